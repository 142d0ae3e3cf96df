"""LoRA adapters in the PEFT layout, merged into the base weights at load.

An adapter directory holds ``adapter_config.json`` (``peft_type`` "LORA", ``r``, ``lora_alpha``,
``target_modules``, optionally ``use_rslora``, ``rank_pattern``, ``alpha_pattern``,
``layers_to_transform``) and ``adapter_model.safetensors`` with one pair per adapted linear:
``base_model.model.<module path>.lora_A.weight`` (r, in) and ``....lora_B.weight`` (out, r).
The module path is the one of the original Hugging Face model, so ``<module path>.weight`` is
the checkpoint tensor the family's loader reads: each pair's update
``W += (alpha / r) * B @ A`` (``alpha / sqrt(r)`` with rsLoRA) is a checkpoint-shaped delta,
added to the module tensors through the same ``Source`` pieces the weights came from (rows of
a fused tensor, one expert of a stacked one). Merging once keeps every forward, cache, kernel and
quantizer unchanged: there is no adapter at decode time. D2F's released students
(``SJTU-Deng-Lab/D2F_*_Lora``) are such adapters over LLaDA-8B-Instruct and Dream-7B.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from dllm.models.sources import Source

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."
_PAIR = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_]+)?\.weight")
_LAYER_INDEX = re.compile(r"\.(?:layers|blocks|h)\.(\d+)\.")


class AdapterError(ValueError):
    """An adapter directory that cannot be merged into its base; the message says what to fix."""


@dataclass(frozen=True)
class LoraAdapter:
    """A PEFT LoRA adapter as read from its directory: the config and the (A, B) pair of each
    adapted module path (``model.layers.0.self_attn.q_proj``)."""

    path: Path
    rank: int
    alpha: float
    target_modules: tuple[str, ...] | str
    use_rslora: bool = False
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    layers_to_transform: tuple[int, ...] | None = None
    pairs: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)

    def _pattern_value(self, patterns: dict, module: str, default):
        """PEFT's per-module override: the first key that matches the path's tail."""
        for key, value in patterns.items():
            if re.match(rf"(.*\.)?{key}$", module):
                return value
        return default

    def rank_of(self, module: str) -> int:
        return int(self._pattern_value(self.rank_pattern, module, self.rank))

    def scale(self, module: str) -> float:
        """alpha / r, or alpha / sqrt(r) under rsLoRA, with the module's own r and alpha."""
        r = self.rank_of(module)
        alpha = float(self._pattern_value(self.alpha_pattern, module, self.alpha))
        return alpha / math.sqrt(r) if self.use_rslora else alpha / r

    def targets(self, module: str) -> bool:
        """Whether the config's target_modules (and layers_to_transform) name this module path."""
        if isinstance(self.target_modules, str):
            hit = self.target_modules == "all-linear" or re.fullmatch(self.target_modules, module) is not None
        else:
            hit = any(module == t or module.endswith("." + t) for t in self.target_modules)
        if hit and self.layers_to_transform is not None:
            layer = _LAYER_INDEX.search(f".{module}.")
            hit = layer is not None and int(layer.group(1)) in self.layers_to_transform
        return hit


def _config_error(file: Path, what: str) -> AdapterError:
    return AdapterError(f"{file}: {what}; pass a PEFT LoRA adapter directory (adapter_config.json + "
                        f"{WEIGHTS_FILE}, as PeftModel.save_pretrained writes it)")


def _read_config(file: Path) -> dict[str, Any]:
    try:
        raw = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _config_error(file, f"not valid JSON ({err})") from err
    if not isinstance(raw, dict):
        raise _config_error(file, "not a JSON object")
    if str(raw.get("peft_type", "LORA")).upper() != "LORA":
        raise _config_error(file, f"peft_type is {raw['peft_type']!r}; only LoRA adapters can be merged")
    refused = {"use_dora": "DoRA's magnitude vector", "fan_in_fan_out": "fan_in_fan_out (Conv1D weights)"}
    for key, what in refused.items():
        if raw.get(key):
            raise _config_error(file, f"{key} is set; {what} is not supported, only plain LoRA")
    if raw.get("bias", "none") != "none":
        raise _config_error(file, f"bias is {raw['bias']!r}; only adapters trained with bias='none' can be merged")
    if raw.get("modules_to_save"):
        raise _config_error(file, f"modules_to_save {raw['modules_to_save']} holds whole replaced modules; "
                            "only LoRA pairs can be merged")
    for key in ("r", "lora_alpha", "target_modules"):
        if key not in raw:
            raise _config_error(file, f"no {key!r}")
    r, alpha = raw["r"], raw["lora_alpha"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise _config_error(file, f"r must be a positive integer, got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise _config_error(file, f"lora_alpha must be a finite number, got {alpha!r}")
    targets = raw["target_modules"]
    if not (isinstance(targets, str) or (isinstance(targets, list) and targets
                                         and all(isinstance(t, str) for t in targets))):
        raise _config_error(file, f"target_modules must be a list of module names or a regex string, got {targets!r}")
    return raw


def read_adapter(path: str | Path) -> LoraAdapter:
    """Read and check an adapter directory: the config, and every tensor a LoRA pair of the
    declared rank (A (r, in), B (out, r)) for a module the config targets."""
    path = Path(path)
    config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
    if not config_file.is_file():
        raise AdapterError(f"no {CONFIG_FILE} in {path}; pass the directory PeftModel.save_pretrained wrote")
    if not weights_file.is_file():
        hint = " (adapter_model.bin is not read; convert it to safetensors)" if (path / "adapter_model.bin").is_file() else ""
        raise AdapterError(f"no {WEIGHTS_FILE} in {path}{hint}")
    raw = _read_config(config_file)
    layers = raw.get("layers_to_transform")
    adapter = LoraAdapter(
        path=path, rank=raw["r"], alpha=float(raw["lora_alpha"]),
        target_modules=raw["target_modules"] if isinstance(raw["target_modules"], str) else tuple(raw["target_modules"]),
        use_rslora=bool(raw.get("use_rslora", False)),
        rank_pattern=dict(raw.get("rank_pattern") or {}), alpha_pattern=dict(raw.get("alpha_pattern") or {}),
        layers_to_transform=None if layers is None else tuple([layers] if isinstance(layers, int) else layers),
    )
    halves: dict[str, dict[str, Tensor]] = {}
    try:
        with safe_open(weights_file, framework="pt", device="cpu") as f:
            for name in f.keys():
                m = _PAIR.fullmatch(name)
                if m is None:
                    raise AdapterError(
                        f"{weights_file}: tensor {name} is not a LoRA pair (expected "
                        f"{PREFIX}<module path>.lora_A.weight / .lora_B.weight); embedding LoRA, biases "
                        "and saved modules cannot be merged: retrain the adapter on linear layers only")
                halves.setdefault(m["module"], {})[m["ab"]] = f.get_tensor(name)
    except (SafetensorError, OSError) as err:
        raise AdapterError(f"{weights_file} is not a readable safetensors file ({err})") from err
    if not halves:
        raise AdapterError(f"{weights_file} holds no tensors")
    for module, ab in sorted(halves.items()):
        for half in "AB":
            if half not in ab:
                raise AdapterError(f"{weights_file}: {PREFIX}{module}.lora_{half}.weight is missing (its "
                                   f"lora_{'B' if half == 'A' else 'A'} is there); the file is incomplete")
        a, b = ab["A"], ab["B"]
        r = adapter.rank_of(module)
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            raise AdapterError(
                f"{weights_file}: {PREFIX}{module}: lora_A {list(a.shape)} and lora_B {list(b.shape)} are not a "
                f"rank-{r} pair (A (r, in), B (out, r)) as {CONFIG_FILE} says (r / rank_pattern); the config "
                "does not belong to these weights")
        if not adapter.targets(module):
            raise AdapterError(f"{weights_file}: {PREFIX}{module}.lora_A.weight adapts {module}, which "
                               f"target_modules {raw['target_modules']!r} does not name; the config does not "
                               "belong to these weights")
        adapter.pairs[module] = (a, b)
    return adapter


def check_against_base(adapter: LoraAdapter, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Checkpoint tensor name -> the adapted module path, checked against the base's checkpoint
    shapes (headers only, before any weight is read): every pair must adapt a 2-D weight of the
    base with A's in and B's out features, and every linear weight the config targets must have
    its pair."""
    out: dict[str, str] = {}
    base_hint = "; load the adapter with the base checkpoint it was trained on"
    for module, (a, b) in sorted(adapter.pairs.items()):
        name = f"{module}.weight"
        tensor = f"{PREFIX}{module}.lora_A.weight"
        if name not in shapes:
            close = [n for n in shapes if n.endswith("." + module.rsplit(".", 1)[-1] + ".weight")][:3]
            seen = f" (the base has e.g. {close})" if close else ""
            raise AdapterError(f"{adapter.path}: {tensor} adapts {name}, which the base checkpoint does not "
                               f"have{seen}{base_hint}")
        shape = shapes[name]
        if len(shape) != 2 or (shape[0], shape[1]) != (b.shape[0], a.shape[1]):
            raise AdapterError(f"{adapter.path}: {tensor} (A {list(a.shape)}, B {list(b.shape)}) gives an update "
                               f"of {[b.shape[0], a.shape[1]]}, but the base's {name} is {list(shape)}{base_hint}")
        out[name] = module
    if adapter.target_modules != "all-linear":
        missing = sorted(n for n, s in shapes.items() if len(s) == 2 and n.endswith(".weight")
                         and adapter.targets(n[: -len(".weight")]) and n not in out)
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise AdapterError(f"{adapter.path}: target_modules {adapter.target_modules!r} names {shown} of the "
                               f"base, but {WEIGHTS_FILE} has no LoRA pair for them; the adapter is incomplete "
                               f"or was trained on another base{base_hint}")
    return out


def delta(adapter: LoraAdapter, module: str, device: torch.device | str) -> Tensor:
    """scale * B @ A of one module path, in float32 on ``device``."""
    a, b = adapter.pairs[module]
    a32 = a.to(device=device, dtype=torch.float32)
    return (b.to(device=device, dtype=torch.float32) @ a32) * adapter.scale(module)


def adapted_modules(sources: dict[str, Source], adapted: dict[str, str]) -> set[str]:
    """The module tensors built from an adapted checkpoint tensor (the loader reads them in
    float32, so the merged weight is rounded to the load dtype once)."""
    return {module for module, src in sources.items() if any(p.name in adapted for p in src.pieces)}


def merge_adapter(state: dict[str, Tensor], sources: dict[str, Source], adapter: LoraAdapter,
                  adapted: dict[str, str], dtype: torch.dtype) -> None:
    """Add each adapted checkpoint tensor's update to the module tensors built from it: whole
    tensors, row ranges of a fused one (in piece order), one slot of a stacked one; summed in
    float32, then cast to ``dtype``. One update exists at a time."""
    for module in sorted(adapted_modules(sources, adapted)):
        src = sources[module]
        weight = state[module].float()
        at = 0
        for i, piece in enumerate(src.pieces):
            upd = delta(adapter, adapted[piece.name], weight.device) if piece.name in adapted else None
            if src.stack:
                if upd is not None:
                    weight[i] += upd
                continue
            lo, hi = piece.rows if piece.rows is not None else (0, None)
            n = (hi - lo) if hi is not None else weight.shape[0] - at
            if upd is not None:
                weight[at: at + n] += upd[lo: lo + n]
            at += n
        state[module] = weight.to(dtype)
