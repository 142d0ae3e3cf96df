"""Learn2PD learned filter (Bao et al. 2025): a 2-layer MLP over the block's confidence vector
predicts which positions already hold their final token; positions scoring sigmoid > tau are
committed on top of a one-token floor (the most confident eligible position).

The filter reads the confidences of every block position, decoded ones included (recomputed
each forward), as in the paper. It is saved as ``filter.safetensors`` + ``filter.json`` and
loaded by directory: ``policy_args={"filter": DIR}``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from dllm.samplers.base import RuleInput, register_rule
from dllm.samplers.threshold import most_confident


class ConfidenceFilter(nn.Module):
    """(N, W) confidences -> (N, W) logits: Linear(W, W) -> ReLU -> Linear(W, W)."""

    def __init__(self, width: int, hidden: int | None = None) -> None:
        super().__init__()
        self.width = width
        self.hidden = hidden or width
        self.net = nn.Sequential(nn.Linear(width, self.hidden), nn.ReLU(), nn.Linear(self.hidden, width))

    def forward(self, conf: Tensor) -> Tensor:
        return self.net(conf)

    def save(self, out_dir: Path, extra: dict | None = None) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(out_dir / "filter.safetensors"))
        meta = {"width": self.width, "hidden": self.hidden, **(extra or {})}
        (out_dir / "filter.json").write_text(json.dumps(meta, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "ConfidenceFilter":
        path = Path(path)
        if not (path / "filter.json").is_file():
            raise FileNotFoundError(f"no filter.json in {path}; train one with `dllm train-filter`")
        meta = json.loads((path / "filter.json").read_text())
        module = cls(meta["width"], meta["hidden"])
        module.load_state_dict(load_file(str(path / "filter.safetensors")))
        return module.eval().requires_grad_(False)


@register_rule("learn2pd")
@dataclass(kw_only=True, slots=True)
class Learn2PD:
    filter: str = ""
    tau: float = 0.96
    module: ConfidenceFilter | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.module is None:
            if not self.filter:
                raise ValueError("learn2pd needs policy_args filter=DIR (a trained filter directory)")
            self.module = ConfidenceFilter.load(self.filter)

    def __call__(self, inp: RuleInput) -> Tensor:
        width = inp.eligible.shape[-1]
        if width != self.module.width:
            raise ValueError(f"the filter was trained for windows of {self.module.width} positions, but the "
                             f"decision window has {width}; set block_length (or sub_block_length) to {self.module.width}")
        weight = self.module.net[0].weight
        scores = self.module(inp.stats.prob.to(weight.device, weight.dtype))  # (B, W)
        accept = inp.eligible & (torch.sigmoid(scores.float()) > self.tau)
        return accept | most_confident(inp.stats.prob, inp.eligible)
