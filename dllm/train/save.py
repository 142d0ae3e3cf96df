"""Write a trained DiffusionTransformer back to its family's original checkpoint layout."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from dllm.models.registry import family_for, weight_map
from dllm.models.transformer import DiffusionTransformer


def save_checkpoint(model: DiffusionTransformer, raw_config: dict, out_dir: Path,
                    dtype: torch.dtype = torch.float32) -> None:
    """config.json + model.safetensors under the original tensor names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = weight_map(family_for(raw_config["model_type"]), model.config)
    state = model.state_dict()
    tensors = {ckpt: state[module].detach().to("cpu", dtype).contiguous() for ckpt, module in names.items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n")
