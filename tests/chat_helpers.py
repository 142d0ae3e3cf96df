"""What the chat tests share: a scripted person typing at ``run_chat``'s prompt."""
from __future__ import annotations

from typing import Callable


def line_reader(lines: list[str]) -> Callable[[], str]:
    """``read_line`` for ``run_chat``: the lines in order, then end of input (Ctrl-D)."""
    feed = iter(lines)

    def read_line() -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read_line
