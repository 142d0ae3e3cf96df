"""Initialise a new model from another family's trained weights (same widths and vocabulary).

Families share one module layout (``DiffusionTransformer``), so weights carry over by module
name. What differs is filled the standard way: q/k/v biases the source lacks start at zero,
and fewer key/value heads (GQA) are made by mean-pooling the source's K/V heads within each
group, as in GQA uptraining (Ainslie et al., 2023).

A mixture-of-experts target (LLaDA2) from a dense source is upcycled (sparse upcycling,
Komatsuzaki et al., 2023, at a smaller expert width): expert e takes hidden units
[e*I, (e+1)*I) of the source layer's SwiGLU (wrapping around past its last unit), the shared
expert the slice after the routed experts'; routers keep their fresh initialisation. Per-head
q/k norms the source lacks start at weight 1.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import Tensor

from dllm.models.loading import load_model
from dllm.models.transformer import DiffusionTransformer

_MOE_WEIGHT = re.compile(r"(layers\.\d+\.mlp)\.(shared\.)?(gate_proj|up_proj|down_proj)(\.weight)?")


def init_from_checkpoint(model: DiffusionTransformer, source_dir: Path,
                         fresh: list[str] | None = None) -> list[str]:
    """Copy ``source_dir``'s weights into ``model``; returns the names that started at zero.
    ``fresh``, if given, collects the names that kept their new initialisation (MoE routers,
    q/k norms at 1) or were upcycled from slices of a dense MLP."""
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
    noted = fresh if fresh is not None else []
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
            elif name.endswith((".attn.q_norm.weight", ".attn.k_norm.weight")) and name not in state:
                param.fill_(1.0)
                noted.append(name)
            elif name.endswith(".mlp.router.weight") and name not in state:
                noted.append(name)
            elif _upcycle(name, param, state, dst.moe.n_experts if dst.moe else 0):
                noted.append(name)
            else:
                raise SystemExit(f"--init-weights {source_dir}: no source weight for {name}")
    return zeroed


def _upcycle(name: str, param: Tensor, state: dict[str, Tensor], n_experts: int) -> bool:
    """An MoE expert stack ((E, I, d) gate / up, (E, d, I) down) or a shared-expert weight from
    slices of the source layer's dense SwiGLU; False when ``name`` is not one."""
    m = _MOE_WEIGHT.fullmatch(name)
    if m is None or f"{m[1]}.{m[3]}.weight" not in state:
        return False
    dense = state[f"{m[1]}.{m[3]}.weight"]  # (H, d) for gate / up, (d, H) for down
    down = m[3] == "down_proj"
    total = dense.shape[1 if down else 0]

    def units(start: int, width: int) -> Tensor:
        cols = torch.arange(start, start + width) % total
        return dense[:, cols] if down else dense[cols]

    if m[2]:  # the shared expert: the slice after the routed experts'
        width = param.shape[1 if down else 0]
        param.copy_(units(n_experts * width, width))
        return True
    width = param.shape[2 if down else 1]
    for e in range(param.shape[0]):
        param[e].copy_(units(e * width, width))
    return True
