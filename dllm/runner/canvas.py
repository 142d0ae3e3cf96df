"""The decode canvas: left-padded prompts followed by gen_length mask tokens.

Left padding aligns every row's answer region, so blocks line up across a ragged batch.
Position ids are explicit and count only real tokens, so a padded row sees exactly the
positions it would see alone (the official LLaDA loop gets this wrong).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(kw_only=True, slots=True)
class Canvas:
    tokens: Tensor  # (B, L) long: pads, prompt, then answer (masks until committed)
    valid: Tensor  # (B, L) bool: False on left padding
    positions: Tensor  # (B, L) long
    prompt_width: int  # P: padded prompt width; the answer occupies [P, L)
    prompt_lengths: Tensor  # (B,) long
    padded: bool = False  # some key is not a real token (ragged prompts, a truncated end)

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def hide(self, positions: Tensor) -> None:
        """Make ``positions`` (B, L) bool invisible as keys (EoTP's truncated ends)."""
        self.valid &= ~positions
        self.padded = True


def build_canvas(prompts: list[list[int]], *, gen_length: int, mask_id: int, pad_id: int,
                 device: torch.device | str, min_width: int = 0) -> Canvas:
    """Left-pad ``prompts`` to a common width (at least ``min_width``) and append ``gen_length``
    masks."""
    width = max(min_width, max(len(p) for p in prompts))
    B, L = len(prompts), width + gen_length
    tokens = torch.full((B, L), pad_id, dtype=torch.long)
    valid = torch.zeros((B, L), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt) : width] = torch.tensor(prompt, dtype=torch.long)
        valid[row, width - len(prompt) :] = True
    tokens[:, width:] = mask_id
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    return Canvas(tokens=tokens.to(device), valid=valid.to(device), positions=positions.to(device),
                  prompt_width=width, prompt_lengths=lengths.to(device),
                  padded=any(len(p) < width for p in prompts))
