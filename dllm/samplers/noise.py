"""Per-row random streams: where a row's random numbers come from.

A row's noise is keyed by its own seed, the base-rule steps it has taken in the decode (its
clock) and the answer position, hashed by the counter-based hash of the confidence kernel. It
never depends on the row's place in the batch, the batch size or the prompt width, so a row
samples alike alone and in any batch, and a candidate state (a FreeDave draft k steps ahead)
draws what the base decode would draw in that state.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dllm.kernels.confidence_stats import hash_uniform_torch

# Rules draw from columns no vocabulary reaches (the kernel's token noise uses columns 0..V-1),
# one column per use, so a rule's draws are independent of the sampled tokens.
RULE_COLUMN = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class RowNoise:
    """The random stream of B states over a window of W answer positions."""

    seed: Tensor  # (B,) int64 non-negative seed of each state's row (the hash folds it)
    clock: Tensor  # (B,) int64 base-rule steps the state's row has taken in the decode
    positions: Tensor  # (W,) or (B, W) int64 answer positions of the window (per state)

    def counters(self) -> Tensor:
        """(B, W) int64 kernel counters: the clock in the high half, the position in the low."""
        positions = self.positions if self.positions.dim() == 2 else self.positions[None, :]
        return (self.clock[:, None] << 32) | positions

    def uniform(self, draw: int = 0) -> Tensor:
        """(B, W) float32 uniforms in (0, 1) for a rule; ``draw`` picks another independent set."""
        column = torch.tensor(RULE_COLUMN - draw, device=self.seed.device)
        return hash_uniform_torch(self.seed[:, None], self.counters(), column)
