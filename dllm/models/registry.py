"""Model families by config ``model_type`` / ``architectures``, and how each module tensor is
assembled from checkpoint tensors."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from dllm.models import diffusion_gemma, dream, fast_dllm_v2, llada, llada2_moe, llada_moe, sdar
from dllm.models.config import ArchConfig
from dllm.models.sources import Source, one


@dataclass(frozen=True, slots=True)
class Family:
    """One checkpoint format: its config parser and its tensor names.

    ``layer_weights`` / ``global_weights``: checkpoint name -> module name, one to one ("{i}" is
    the layer index). ``layer_sources(cfg, i)``: module name -> Source for what is not one to
    one in layer i (a fused projection split by rows, per-expert tensors stacked, layers that
    differ: dense or MoE). ``architectures``: the config ``architectures`` entries that pick this
    family when several share a ``model_type`` (LLaDA-8B and LLaDA-MoE both say "llada").
    ``layout_markers``: regexes that all match some checkpoint name of this layout, used to
    name the layout of weights that do not fit their config. ``ignored_weights``: regexes of
    checkpoint tensors the family does not load (DiffusionGemma's vision tower; the loader says
    how many it skipped). ``build_model(cfg, tp)``: the family's own module where it is not the
    shared ``DiffusionTransformer`` (None), with ``parse_config`` returning that module's config
    and ``tp`` the rank's ``TensorShard`` under tensor parallelism (None: one process).
    """

    name: str
    model_types: tuple[str, ...]
    parse_config: Callable[[dict[str, Any]], ArchConfig]
    layer_weights: dict[str, str]
    global_weights: dict[str, str]
    layer_sources: Callable[[ArchConfig, int], dict[str, Source]] | None = None
    architectures: tuple[str, ...] = ()
    layout_markers: tuple[str, ...] = ()
    ignored_weights: tuple[str, ...] = ()
    build_model: Callable[..., Any] | None = None


def _family(name: str, module) -> Family:
    return Family(name, module.MODEL_TYPES, module.parse_config, module.LAYER_WEIGHTS, module.GLOBAL_WEIGHTS,
                  getattr(module, "layer_sources", None), getattr(module, "ARCHITECTURES", ()),
                  getattr(module, "LAYOUT_MARKERS", ()), getattr(module, "IGNORED_WEIGHTS", ()),
                  getattr(module, "build_model", None))


FAMILIES: dict[str, Family] = {
    "llada": _family("llada", llada),
    "dream": _family("dream", dream),
    "fast_dllm_v2": _family("fast_dllm_v2", fast_dllm_v2),
    "sdar": _family("sdar", sdar),
    "llada2_moe": _family("llada2_moe", llada2_moe),
    "llada_moe": _family("llada_moe", llada_moe),
    "diffusion_gemma": _family("diffusion_gemma", diffusion_gemma),
}


def register_family(family: Family) -> None:
    """Add a family (used by block-diffusion checkpoints and by user extensions)."""
    FAMILIES[family.name] = family


def family_for(model_type: str | None, architectures: Iterable[str] | None = None) -> Family:
    """The family whose config ``model_type`` matches (case-insensitive), or a clear error.

    Where several families share the model_type, ``architectures`` (config.json's list) picks
    one; without it the first registered wins (LLaDA-8B for "llada", as before LLaDA-MoE)."""
    key = (model_type or "").lower()
    candidates = [f for f in FAMILIES.values() if key in f.model_types]
    if not candidates:
        known = sorted({t for f in FAMILIES.values() for t in f.model_types})
        raise ValueError(
            f"unknown model_type {model_type!r} in config.json; dllm runs masked-diffusion models, of model_type "
            f"{', '.join(map(repr, known))} (an autoregressive model, such as llama or qwen2, is for vLLM or "
            "transformers). Set model_type to one of these only if the weights have that architecture."
        )
    if len(candidates) == 1 or not architectures:
        return candidates[0]
    archs = list(architectures)
    for family in candidates:
        if any(a in family.architectures for a in archs):
            return family
    known_archs = {f.name: list(f.architectures) for f in candidates}
    raise ValueError(
        f"config.json says model_type {model_type!r} with architectures {archs}, which names none of "
        f"the families sharing that model_type ({known_archs}); set architectures to the one these "
        "weights belong to"
    )


def family_of(raw: dict[str, Any]) -> Family:
    """The family of a parsed config.json (model_type, then architectures)."""
    archs = raw.get("architectures")
    return family_for(raw.get("model_type"), archs if isinstance(archs, list) else None)


def tensor_sources(family: Family, cfg: ArchConfig) -> dict[str, Source]:
    """Module tensor name -> the checkpoint tensors it is assembled from, for every tensor of
    the model built from cfg (the tied LM head excepted)."""
    out: dict[str, Source] = {}
    for i in range(cfg.n_layers):
        for ckpt, module in family.layer_weights.items():
            out[module.format(i=i)] = one(ckpt.format(i=i))
        if family.layer_sources is not None:
            out.update(family.layer_sources(cfg, i))
    for ckpt, module in family.global_weights.items():
        if not (cfg.tie_embeddings and module == "lm_head.weight"):
            out[module] = one(ckpt)
    return out


def weight_map(family: Family, cfg: ArchConfig) -> dict[str, str]:
    """Checkpoint name -> module name for the tensors stored one to one (every tensor of the
    dense families; split or stacked ones are in ``tensor_sources`` only)."""
    return {src.pieces[0].name: module for module, src in tensor_sources(family, cfg).items()
            if src.whole}


def layouts_found(names: Iterable[str]) -> dict[str, str]:
    """Family name -> a checkpoint name showing that layout, for every family whose layout
    markers all match ``names``."""
    names = list(names)
    found = {}
    for family in FAMILIES.values():
        hits = []
        for marker in family.layout_markers:
            pattern = re.compile(marker)
            hit = next((n for n in names if pattern.fullmatch(n)), None)
            if hit is None:
                break
            hits.append(hit)
        else:
            if hits:
                found[family.name] = hits[0]
    return found
