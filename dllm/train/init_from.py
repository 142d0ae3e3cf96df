"""Initialise a new model from another family's trained weights (same widths and vocabulary).

Families share one module layout (``DiffusionTransformer``), so weights carry over by module
name. What differs is filled the standard way: q/k/v biases the source lacks start at zero,
and fewer key/value heads (GQA) are made by mean-pooling the source's K/V heads within each
group, as in GQA uptraining (Ainslie et al., 2023).
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm.models.loading import load_model
from dllm.models.transformer import DiffusionTransformer


def init_from_checkpoint(model: DiffusionTransformer, source_dir: Path) -> list[str]:
    """Copy ``source_dir``'s weights into ``model``; returns the names that started at zero."""
    source = load_model(source_dir, dtype=torch.float32)
    src, dst = source.config, model.config
    for field in ("d_model", "n_layers", "n_heads", "head_dim", "mlp_hidden_size", "vocab_size"):
        if getattr(src, field) != getattr(dst, field):
            raise SystemExit(f"--init-weights {source_dir}: {field} is {getattr(src, field)} there and "
                             f"{getattr(dst, field)} here; give the new model the same widths")
    if src.n_kv_heads % dst.n_kv_heads:
        raise SystemExit(f"--init-weights: {src.n_kv_heads} source K/V heads do not pool into "
                         f"{dst.n_kv_heads}; pick --n-kv-heads dividing {src.n_kv_heads}")
    state = source.state_dict()
    zeroed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in state and state[name].shape == param.shape:
                param.copy_(state[name])
            elif name in state and name.endswith(("k_proj.weight", "v_proj.weight")):
                group = src.n_kv_heads // dst.n_kv_heads
                heads = state[name].reshape(dst.n_kv_heads, group, src.head_dim, src.d_model)
                param.copy_(heads.mean(1).reshape(param.shape))
            elif name.endswith("_proj.bias") and name not in state:
                param.zero_()
                zeroed.append(name)
            else:
                raise SystemExit(f"--init-weights {source_dir}: no source weight for {name}")
    return zeroed
