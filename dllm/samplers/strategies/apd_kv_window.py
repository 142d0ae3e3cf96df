"""APD's diffusion K/V window (``kv_window``, W; Israel et al. 2025, the released loop's
``kv_window``): an approximation that recomputes only the K/V near the lookahead window.

Each round the diffusion model forwards the canvas from ``left`` to the window's end over the
K/V kept from earlier rounds for the positions before ``left``, where ``left`` is W - 1
positions before the previous round's window start (so the tokens accepted last round, and the
W - 1 before them, get K/V computed with their committed values); a row's first round forwards
from position 0. K/V older than that are frozen as last computed: they attended to masks and
drafts that have since been committed (the approximation; W large = exact).

In dllm's terms it is a cache (``block_logits`` as ``dllm.cache`` has it) over ``KVBuffers``
that APD installs as the decode's cache. Rows of a ragged batch keep their own ``left``: the
forward runs once per distinct ``left`` (rows sharing it together), each charged to its rows,
so every row gets its single run's K/V, tokens and forwards.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm.cache.kv import KVBuffers


class APDWindowCache:
    """The K/V window cache; the strategy sets ``start`` (B,) (this round's window start,
    canvas column), ``right`` (B,) (the canvas end the model sees) and ``moving`` (B,) (rows
    with a round) before each forward."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.kv: KVBuffers | None = None
        self.last_start: Tensor | None = None  # (B,) previous window start; -1 before a row's first round
        self.start = self.right = self.moving = None
        self.peak_bytes = 0

    def block_logits(self, runner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        """(B, be - bs, V) logits of the block; positions before a row's ``left`` (committed, never
        read) are zeros, rows without a round all zeros."""
        if rows is not None:
            raise ValueError("apd's kv_window cache forwards canvas rows only, not candidate states")
        B = tokens.shape[0]
        if self.kv is None:
            # its own buffers even under cuda_graphs: its forward length follows the data (runner/graphs.py)
            self.kv = KVBuffers.allocate(runner.model, B, runner.canvas.length)
            self.last_start = torch.full((B,), -1, dtype=torch.long, device=tokens.device)
            self.peak_bytes = self.kv.nbytes
        shift = int(runner.shift_logits)
        first = self.last_start < 0
        left = torch.where(first, 0, (self.last_start - self.window + 1).clamp_min(0))  # (B,)
        count = self.moving if count is None else count & self.moving
        out = None
        # host reads: which rows share a left, and how far each group's forward runs
        for lo in sorted(set(left[self.moving].tolist())):
            group = self.moving & (left == lo)
            idx = group.nonzero().flatten()
            end = int(self.right[idx].max())
            head = max(lo, bs - shift)  # the first output read (position bs reads bs - shift)
            whole = idx.numel() == B
            kv = self.kv if whole else self.kv.select(idx)
            self.peak_bytes = max(self.peak_bytes, self.kv.nbytes + (0 if whole else kv.nbytes))
            part = tokens[:, lo:end] if whole else tokens[idx, lo:end]
            tail = min(end, be - shift)  # outputs past the window's end are never read
            logits = runner.forward(part, lo, cache=kv, rows=None if whole else idx, count=count & group,
                                    logits_for=(head - lo, tail - lo))  # (N, tail - head, V)
            if not whole:
                for (k, v), (ck, cv) in zip(self.kv.layers, kv.layers):
                    k.index_copy_(0, idx, ck)
                    v.index_copy_(0, idx, cv)
            if out is None:
                out = logits.new_zeros(B, be - bs, logits.shape[-1])
            out[idx, head - (bs - shift) : tail - (bs - shift)] = logits
        self.last_start = torch.where(self.moving, self.start, self.last_start)
        if out is None:  # no row has a round
            out = torch.zeros(B, be - bs, runner.model.config.vocab_size, device=tokens.device)
        return out
