"""Per-batch canvas lengths and prompt formats, so a small model answers at any gen length.

A model trained only on its task's own answer length (32 tokens) learns where the answer ends
from the canvas, not from the answer: at gen length 64 it adds stray characters, at 128 it
writes nothing. LLaDA's SFT pads every answer with end-of-text to the batch's length; here a
share of batches draws one canvas length for all its rows (each row at least its answer plus one
end-of-text) and a share uses the benchmark's one-shot format (one more generated exchange of the
same task before the question). The draws are per batch, not per row, because a batch is as wide
as its widest row: one 128-token row would make the whole batch pay for it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CanvasMix:
    long_share: float = 0.0  # share of batches whose answer canvas length is drawn
    min_gen_length: int = 8  # the drawn length's range (a row never gets less than answer + 1)
    max_gen_length: int = 128
    one_shot_share: float = 0.0  # share of batches in the one-shot format

    def __post_init__(self) -> None:
        for name in ("long_share", "one_shot_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} {getattr(self, name)}: a share of batches, between 0 and 1")
        if not 1 <= self.min_gen_length <= self.max_gen_length:
            raise ValueError(f"gen length range [{self.min_gen_length}, {self.max_gen_length}] is empty")

    @property
    def enabled(self) -> bool:
        return bool(self.long_share or self.one_shot_share)

    def draw(self, rng: random.Random) -> tuple[int | None, int]:
        """(the batch's canvas length, None for each task's own; its number of shots)."""
        if not self.enabled:
            return None, 0
        length = rng.randint(self.min_gen_length, self.max_gen_length) if rng.random() < self.long_share else None
        return length, int(rng.random() < self.one_shot_share)
