"""Learn2PD learned filter (Bao et al. 2025, arXiv 2509.25188; ``ims-kdks/Learning-to-Parallel-Decoding``).

A 2-layer MLP f over the window's confidence vector predicts which positions already hold
their final token: Linear(W, W) -> ReLU -> Linear(W, W), 2,112 parameters at W = 32. Eligible
positions with sigmoid(f(c)) > tau (0.96 in the official eval scripts) are committed on top of
a one-token floor, the most confident eligible position (the official floor is the baseline
top-k schedule at one token per step). The input is the probability of every window position,
decoded ones included (recomputed each forward), as in the paper.

A filter is a directory with ``filter.safetensors`` + ``filter.json`` (width, hidden size and
training metadata), written by ``dllm train-filter`` and loaded with
``policy_args={"filter": DIR}``. Its width must equal the decision window (block_length, or
sub_block_length when set); a mismatch is an error before any model work.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from dllm.samplers.base import RuleInput, register_rule
from dllm.samplers.rules.threshold import most_confident

WEIGHTS, CONFIG = "filter.safetensors", "filter.json"


class ConfidenceFilter(nn.Module):
    """(N, W) confidences -> (N, W) logits: Linear(W, H) -> ReLU -> Linear(H, W), H = W."""

    def __init__(self, width: int, hidden: int | None = None) -> None:
        super().__init__()
        self.width, self.hidden = width, hidden or width
        self.net = nn.Sequential(nn.Linear(width, self.hidden), nn.ReLU(), nn.Linear(self.hidden, width))

    def forward(self, conf: Tensor) -> Tensor:
        return self.net(conf)

    def save(self, out_dir: str | Path, extra: dict | None = None) -> None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(out_dir / WEIGHTS))
        meta = {"kind": "learn2pd", "width": self.width, "hidden": self.hidden, **(extra or {})}
        (out_dir / CONFIG).write_text(json.dumps(meta, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "ConfidenceFilter":
        path = Path(path)
        if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
            raise FileNotFoundError(f"{path} is not a Learn2PD filter (needs {CONFIG} and {WEIGHTS}); "
                                    "train one with `dllm train-filter`")
        meta = json.loads((path / CONFIG).read_text())
        module = cls(int(meta["width"]), int(meta.get("hidden") or meta["width"]))
        try:
            module.load_state_dict(load_file(str(path / WEIGHTS)))
        except RuntimeError as err:  # missing / mis-shaped tensors
            raise ValueError(f"{path / WEIGHTS} does not match {CONFIG} (width {module.width}): {err}") from err
        return module.eval().requires_grad_(False)


@register_rule("learn2pd")
@dataclass(kw_only=True, slots=True)
class Learn2PD:
    filter: str = ""
    tau: float = 0.96
    module: ConfidenceFilter | None = field(default=None, repr=False)  # tests may pass one

    def __post_init__(self) -> None:
        if not 0 <= self.tau <= 1:
            raise ValueError(f"learn2pd tau must be in [0, 1], got {self.tau}")
        if self.module is None:
            if not self.filter:
                raise ValueError("learn2pd needs policy_args filter=DIR (a directory written by `dllm train-filter`)")
            self.module = ConfidenceFilter.load(self.filter)

    def check_config(self, config) -> None:
        self._check_width(config.window_length)

    def _check_width(self, width: int) -> None:
        if width != self.module.width:
            raise ValueError(f"the Learn2PD filter was trained for windows of {self.module.width} positions, "
                             f"but the decision window has {width}; set block_length (or sub_block_length) "
                             f"to {self.module.width}, or train a filter with --block-length {width}")

    def __call__(self, inp: RuleInput) -> Tensor:
        self._check_width(inp.eligible.shape[-1])
        prob = inp.stats.prob
        weight = self.module.net[0].weight
        if weight.device != prob.device:  # once: follow the model's device
            self.module.to(prob.device)
        scores = self.module(prob.to(weight.dtype))  # (B, W) logits
        accept = inp.eligible & (torch.sigmoid(scores.float()) > self.tau)
        return accept | most_confident(prob, inp.eligible)
