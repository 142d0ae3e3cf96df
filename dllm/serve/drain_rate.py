"""How long the scheduler's queue takes to drain, measured: the Retry-After of a 429.

Rows leave the queue as fast as running rows finish, so the drain time is the queue's depth over
the rate rows finished at recently. That rate is rows per second of busy time: the rows that
finished in the last ``window_s`` over the union of their decode intervals (admission to finish),
so idle time between bursts does not dilute it and a batch that finishes all at once counts its
whole decode. Before any row has finished there is nothing to measure: the lower bound is
returned, and the next 429 (a cheap answer) carries a measured value.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable


class DrainRate:
    """Finished rows' decode intervals (``finished``, on the scheduler's thread) -> seconds for
    the queue to drain (``drain_seconds``, on any thread)."""

    def __init__(self, window_s: float = 60.0, max_rows: int = 256, min_s: float = 1.0, max_s: float = 60.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not 0 < min_s <= max_s or window_s <= 0 or max_rows <= 0:
            raise ValueError(f"need 0 < min_s <= max_s, window_s > 0 and max_rows > 0, got min_s={min_s}, "
                             f"max_s={max_s}, window_s={window_s}, max_rows={max_rows}")
        self.window_s, self.min_s, self.max_s, self.clock = window_s, min_s, max_s, clock
        self._rows: collections.deque[tuple[float, float]] = collections.deque(maxlen=max_rows)  # (start, end)
        self._lock = threading.Lock()

    def finished(self, decode_seconds: float) -> None:
        """A row that decoded for ``decode_seconds`` (from its admission) finished now."""
        if decode_seconds > 0:
            now = self.clock()
            with self._lock:
                self._rows.append((now - decode_seconds, now))

    def rows_per_second(self) -> float | None:
        """Rows finished per second of busy time over the window (None: none finished in it)."""
        horizon = self.clock() - self.window_s
        with self._lock:
            rows = sorted(r for r in self._rows if r[1] >= horizon)
        busy, reach = 0.0, float("-inf")
        for start, end in rows:  # the length of the union of the intervals
            start = max(start, reach)
            if end > start:
                busy += end - start
                reach = end
        return len(rows) / busy if rows and busy > 0 else None

    def drain_seconds(self, queued_rows: int) -> float:
        """Seconds for ``queued_rows`` to leave the queue at the measured rate, within
        [min_s, max_s]."""
        rate = self.rows_per_second()
        if rate is None:
            return self.min_s
        return round(min(self.max_s, max(self.min_s, queued_rows / rate)), 2)
