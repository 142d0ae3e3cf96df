"""Write a trained DiffusionTransformer back to its family's original checkpoint layout."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from dllm.models.registry import family_of, tensor_sources
from dllm.models.sources import to_checkpoint
from dllm.models.transformer import DiffusionTransformer


def save_checkpoint(model: DiffusionTransformer, raw_config: dict, out_dir: Path,
                    dtype: torch.dtype = torch.float32) -> None:
    """config.json + model.safetensors under the original tensor names (fused q/k/v and
    per-expert tensors rebuilt for the families that store them so)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = tensor_sources(family_of(raw_config), model.config)
    buffers = {name for name, _ in model.named_buffers()}  # keep their own dtype (MoE's float32 bias)
    state = {k: v.detach().to("cpu", v.dtype if k in buffers else dtype) for k, v in model.state_dict().items()}
    tensors = {name: t.contiguous() for name, t in to_checkpoint(sources, state).items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n")
