"""Model families by config ``model_type``, and the checkpoint-name -> module-name map."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dllm.models import dream, fast_dllm_v2, llada
from dllm.models.config import ArchConfig


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    parse_config: Callable[[dict[str, Any]], ArchConfig]
    layer_weights: dict[str, str]
    global_weights: dict[str, str]


FAMILIES: dict[str, Family] = {
    "llada": Family("llada", llada.MODEL_TYPES, llada.parse_config, llada.LAYER_WEIGHTS, llada.GLOBAL_WEIGHTS),
    "dream": Family("dream", dream.MODEL_TYPES, dream.parse_config, dream.LAYER_WEIGHTS, dream.GLOBAL_WEIGHTS),
    "fast_dllm_v2": Family("fast_dllm_v2", fast_dllm_v2.MODEL_TYPES, fast_dllm_v2.parse_config,
                           fast_dllm_v2.LAYER_WEIGHTS, fast_dllm_v2.GLOBAL_WEIGHTS),
}


def register_family(family: Family) -> None:
    """Add a family (used by block-diffusion checkpoints and by user extensions)."""
    FAMILIES[family.name] = family


def family_for(model_type: str | None) -> Family:
    """The family whose config ``model_type`` matches (case-insensitive), or a clear error."""
    key = (model_type or "").lower()
    for family in FAMILIES.values():
        if key in family.model_types:
            return family
    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise ValueError(
        f"unknown model_type {model_type!r} in config.json; dllm knows {known}. "
        "Set model_type to one of these if the checkpoint has that architecture."
    )


def weight_map(family: Family, cfg: ArchConfig) -> dict[str, str]:
    """Every checkpoint tensor name the family expects for cfg, mapped to its module name."""
    names = {
        ckpt.format(i=i): module.format(i=i)
        for i in range(cfg.n_layers)
        for ckpt, module in family.layer_weights.items()
    }
    for ckpt, module in family.global_weights.items():
        if not (cfg.tie_embeddings and module == "lm_head.weight"):
            names[ckpt] = module
    return names
