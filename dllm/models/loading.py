"""Load an original Hugging Face checkpoint directory into a DiffusionTransformer.

No remote code, no network: config.json is parsed by the family's own dataclass, weights are
read by their original names from single or sharded safetensors, straight into a module built
on the meta device (``assign=True``), so the weights are never held twice.
"""
from __future__ import annotations

import json
import logging
import re
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open

from dllm.models.adapters import AdapterError, adapted_modules, check_against_base, merge_adapter, read_adapter
from dllm.models.config import ArchConfig, block_causal_override
from dllm.models.placement import checkpoint_dtype, resolve_device, resolve_dtype
from dllm.models.prepack import check_prepack, prepack_linears
from dllm.models.registry import Family, family_of, layouts_found, tensor_sources
from dllm.models.sources import Piece, assemble, checkpoint_shapes
from dllm.models.transformer import DiffusionTransformer
from dllm.validation import OptionTypeError

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard


log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message says what to fix."""


def read_json_object(file: Path) -> dict:
    """A JSON file holding one object, or a CheckpointError naming the file and the fault."""
    try:
        value = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{file} is not valid JSON ({err}); restore the checkpoint's original file") from err
    if not isinstance(value, dict):
        raise CheckpointError(f"{file} holds a JSON {type(value).__name__}, not an object "
                              "({...}); restore the checkpoint's original file")
    return value


def read_config(path: Path) -> tuple[dict, ArchConfig]:
    """Parse config.json into the family's ArchConfig (raises CheckpointError / ValueError)."""
    config_file = path / "config.json"
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory; pass a checkpoint directory")
    if not config_file.is_file():
        raise CheckpointError(
            f"no config.json in {path}; pass the directory that holds config.json and *.safetensors"
        )
    raw = read_json_object(config_file)
    try:
        family = family_of(raw)
    except ValueError as err:
        raise CheckpointError(f"{config_file}: {err}") from err
    try:
        cfg = block_causal_override(raw, family.parse_config(raw))
    except KeyError as err:
        raise CheckpointError(f"{config_file} has no {err.args[0]!r}, which a {family.name} config "
                              "needs; restore the checkpoint's original config.json") from err
    except (TypeError, ValueError) as err:  # wrong-typed or inconsistent values
        raise CheckpointError(f"{config_file} ({family.name}): {err}") from err
    return raw, _with_generation_ends(path, cfg)


def _with_generation_ends(path: Path, cfg):
    """``cfg`` with generation_config.json's ``eos_token_id`` after config.json's end ids: transformers'
    generate and the official loops (SDAR's generate.py) stop there, and chat checkpoints list their
    end-of-turn token there only (Fast-dLLM v2: config 151645, generation_config [151645, 151643])."""
    gen_file = path / "generation_config.json"
    eos = read_json_object(gen_file).get("eos_token_id") if gen_file.is_file() else None
    if eos is None:
        return cfg
    ends = eos if isinstance(eos, list) else [eos]
    bad = [e for e in ends if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < cfg.vocab_size]
    if bad:
        raise CheckpointError(f"{gen_file}: eos_token_id {eos!r} holds {bad}, which are not token ids of this model "
                              f"(vocabulary {cfg.vocab_size}); fix eos_token_id in generation_config.json")
    if cfg.mask_token_id in ends:
        raise CheckpointError(f"{gen_file}: eos_token_id {eos!r} holds the mask token {cfg.mask_token_id}, so a "
                              "committed mask would end the answer; fix eos_token_id in generation_config.json")
    import dataclasses

    added = tuple(e for e in dict.fromkeys(ends) if e not in cfg.eos_token_ids)
    return dataclasses.replace(cfg, eos_token_ids=cfg.eos_token_ids + added) if added else cfg


def _open_safetensors(file: Path):
    """safe_open with the file named when it is not a readable safetensors file."""
    try:
        return safe_open(file, framework="pt", device="cpu")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file} is not a readable safetensors file ({err}); "
                              "download it again or re-export the weights") from err


def safetensors_files(path: Path) -> dict[str, Path]:
    """Tensor name -> file, from model.safetensors.index.json or the *.safetensors present."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map_ = read_json_object(index).get("weight_map")
        if not isinstance(weight_map_, dict) or not all(isinstance(f, str) for f in weight_map_.values()):
            raise CheckpointError(f"{index} has no \"weight_map\" object (tensor name -> shard file); "
                                  "restore the checkpoint's original index file")
        missing_files = sorted({f for f in weight_map_.values() if not (path / f).is_file()})
        if missing_files:
            raise CheckpointError(f"shards listed in {index.name} are missing from {path}: {missing_files}; download "
                                  "them again (every shard the index names), or restore the index of these shards")
        _check_index(index, weight_map_)
        return {name: path / f for name, f in weight_map_.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"no weights in {path}: expected model.safetensors or a sharded "
            "model.safetensors.index.json (PyTorch .bin files are not supported; convert them)"
        )
    names: dict[str, Path] = {}
    for file in files:
        with _open_safetensors(file) as f:
            names.update({k: file for k in f.keys()})
    return names


def _check_index(index: Path, weight_map_: dict[str, str]) -> None:
    """Every tensor the index maps to a shard is in that shard (headers only): a wrong entry is
    named with the shard it points to and the shard that really holds it."""
    held: dict[str, set[str]] = {}
    for shard in sorted(set(weight_map_.values())):
        with _open_safetensors(index.parent / shard) as f:
            held[shard] = set(f.keys())
    wrong = []
    for name, shard in sorted(weight_map_.items()):
        if name not in held[shard]:
            actual = [other for other, names in held.items() if name in names]
            where = f"it is in {actual}" if actual else "no shard holds it"
            wrong.append(f"{name} -> {shard} ({where})")
    if wrong:
        shown = "; ".join(wrong[:5]) + (f"; and {len(wrong) - 5} more" if len(wrong) > 5 else "")
        raise CheckpointError(f"{index} maps tensors to shards that do not hold them: {shown}. Fix those "
                              "entries of its weight_map, or restore the checkpoint's original index file")


def _skip_ignored(family: Family, files: dict[str, Path]) -> tuple[dict[str, Path], list[str]]:
    """The checkpoint's tensors without those the family does not load, and those."""
    patterns = [re.compile(p) for p in family.ignored_weights]
    skipped = [n for n in files if any(p.fullmatch(n) for p in patterns)]
    dropped = set(skipped)
    return {n: f for n, f in files.items() if n not in dropped}, skipped


def _without_tied_head(family: Family, cfg, files: dict[str, Path], path: Path) -> dict[str, Path]:
    """The checkpoint's tensors without a stored LM head when config.json ties the head to the embedding:
    transformers makes the head the embedding whatever else the file holds (some exports write both)."""
    if not cfg.tie_embeddings:
        return files
    heads = {ckpt for ckpt, module in family.global_weights.items() if module == "lm_head.weight" and ckpt in files}
    if heads:
        log.warning("%s: config.json ties the LM head to the embedding, so the checkpoint's own %s is not read",
                    path, ", ".join(sorted(heads)))
    return {n: f for n, f in files.items() if n not in heads}


def _check_tensors(files: dict[str, Path], expected: dict[str, tuple[int, ...]]) -> None:
    missing = sorted(set(expected) - set(files))
    unexpected = sorted(set(files) - set(expected))
    misshaped = []
    for name in sorted(set(expected) & set(files)):
        with _open_safetensors(files[name]) as f:
            shape = tuple(f.get_slice(name).get_shape())
        if shape != expected[name]:
            misshaped.append(f"{name}: checkpoint {list(shape)} != config {list(expected[name])}")
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing}")
    if unexpected:
        problems.append(f"unexpected tensors: {unexpected}")
    if misshaped:
        problems.append(f"mis-shaped tensors: {misshaped}")
    if problems:
        raise CheckpointError(
            "checkpoint does not match its config.json ("
            + "; ".join(problems)
            + "). Check that config.json belongs to these weights."
        )


def _check_layout(family: Family, raw: dict, files: dict[str, Path], expected: dict) -> None:
    """Weights of another family's layout than config.json says (LLaDA-8B's config with
    LLaDA-MoE's weights, or the reverse) are named as such, not as a list of missing tensors.
    Weights holding most of the tensors config.json names are its layout with some missing (SDAR-MoE
    and LLaDA-MoE share every name): ``_check_tensors`` names those."""
    if len(set(expected) & set(files)) * 2 > len(expected):
        return
    found = layouts_found(files)
    if family.name in found or not found:
        return
    others = " or ".join(f"{name} (found {hit})" for name, hit in found.items())
    raise CheckpointError(
        f"config.json (model_type {raw.get('model_type')!r}, architectures {raw.get('architectures')}) "
        f"describes a {family.name} checkpoint, but the weights are in the {others} layout. "
        "Use the config.json that belongs to these weights."
    )


def _read_piece(f, file: Path, piece: Piece, cols: tuple[int, int] | None = None) -> torch.Tensor:
    """The piece (rows [lo, hi) of a checkpoint tensor, or all of it; an ``inner`` piece: its range
    of the second dimension); ``cols``: only columns [lo, hi) of the piece's second dimension (a
    tensor-parallel rank's input features; of an ``inner`` piece, counted from its range's start).
    Only the slice is read from the file."""
    try:
        if piece.rows is None and piece.inner is None and cols is None:
            return f.get_tensor(piece.name)
        lo, hi = piece.rows if piece.rows is not None else (0, f.get_slice(piece.name).get_shape()[0])
        if piece.inner is not None:  # a fused tensor's part along dim 1 (DiffusionGemma's gate / up)
            c_lo, c_hi = piece.inner
            if cols is not None:
                if not 0 <= cols[0] <= cols[1] <= c_hi - c_lo:
                    raise ValueError(f"columns {list(cols)} of {piece.name}'s part {list(piece.inner)} lie outside "
                                     f"its {c_hi - c_lo} columns; a read must stay inside its part")
                c_lo, c_hi = c_lo + cols[0], c_lo + cols[1]
            return f.get_slice(piece.name)[lo:hi, c_lo:c_hi]
        if cols is not None:
            return f.get_slice(piece.name)[lo:hi, cols[0]:cols[1]]
        return f.get_slice(piece.name)[lo:hi]
    except SafetensorError as err:
        raise CheckpointError(f"tensor {piece.name} in {file} cannot be read ({err}); the file is damaged: "
                              "download it again or re-export the weights") from err


def load_model(
    path: str | Path, *, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
    prepack: bool = False, tensor_parallel: TensorShard | None = None, adapter: str | Path | None = None,
) -> DiffusionTransformer:
    """Load a LLaDA / Dream (or registered) checkpoint directory for inference.

    ``tensor_parallel``: this rank's shard of a tensor-parallel group (``dllm.parallel.
    tensor_plan``): the plan is checked against config.json before any weight is read, the
    modules are built with the rank's shapes and only the rank's slices are read.

    ``device`` / ``dtype`` may be ``"auto"`` (``dllm.models.placement``); the defaults stay
    explicit here, ``dllm.load`` is the one that defaults to ``"auto"``. ``prepack``: reorder
    the linear weights for oneDNN once (CPU only; ``dllm.models.prepack``). ``adapter``: a PEFT
    LoRA adapter directory merged into the weights as they load (``dllm.models.adapters``),
    checked against the checkpoint's tensor names and shapes before any weight is read."""
    path = Path(path)
    device = resolve_device(device)
    if dtype != "auto":
        resolve_dtype(dtype)  # a bad dtype fails before the directory is read
    if not isinstance(prepack, bool):
        raise OptionTypeError(f"prepack must be True or False, got {prepack!r}")
    raw, cfg = read_config(path)
    tp = tensor_parallel if tensor_parallel is not None and tensor_parallel.size > 1 else None
    lora = read_adapter(adapter) if adapter is not None else None
    if lora is not None and tp is not None:
        raise AdapterError("a LoRA adapter cannot be merged under tensor parallelism yet; merge it into a "
                           "checkpoint first, or load without tensor_parallel")
    if tp is not None:
        from dllm.parallel.tensor_plan import check_plan

        check_plan(cfg, tp.size)
    try:  # the checkpoint's declared dtype matters only to "auto"
        declared = checkpoint_dtype(raw) if dtype == "auto" else None
    except ValueError as err:
        raise CheckpointError(f"{path / 'config.json'}: {err}") from err
    torch_dtype = resolve_dtype(dtype, device=device, declared=declared)
    if prepack:
        check_prepack(device, torch_dtype)
    family = family_of(raw)
    sources = tensor_sources(family, cfg)
    files, skipped = _skip_ignored(family, safetensors_files(path))
    files = _without_tied_head(family, cfg, files, path)
    with torch.device("meta"):
        if family.build_model is not None:  # its own module, which takes the rank's shard itself
            model = family.build_model(cfg) if tp is None else family.build_model(cfg, tp)
        elif tp is None:
            model = DiffusionTransformer(cfg)
        else:
            from dllm.parallel.tensor_plan import local_config

            model = DiffusionTransformer(local_config(cfg, tp.size), tp)
        # the whole shapes, for the checks
        full = model if tp is None else (family.build_model or DiffusionTransformer)(cfg)
    if skipped:
        log.warning("%s: loading the text model only; %d tensors of the checkpoint's other parts (%s) are not "
                    "loaded", path, len(skipped), ", ".join(sorted({n.split(".")[2] for n in skipped})))
    module_shapes = {k: tuple(v.shape) for k, v in full.state_dict().items()}
    expected = checkpoint_shapes(sources, module_shapes)
    _check_layout(family, raw, files, expected)
    _check_tensors(files, expected)
    adapted = check_against_base(lora, expected) if lora is not None else {}
    read_float32 = adapted_modules(sources, adapted)  # merged in float32, rounded once
    state = {}
    with ExitStack() as stack:
        handles = {file: stack.enter_context(_open_safetensors(file)) for file in sorted(set(files.values()))}

        # buffers keep the dtype the module declares (MoE's float32 selection bias)
        buffer_dtypes = {name: b.dtype for name, b in model.named_buffers()}
        for module, src in sources.items():
            dtype_ = torch.float32 if module in read_float32 else buffer_dtypes.get(module, torch_dtype)

            def read(piece: Piece, cols: tuple[int, int] | None = None) -> torch.Tensor:
                file = files[piece.name]  # cast piece by piece: a stacked tensor is built once
                return _read_piece(handles[file], file, piece, cols).to(device=device, dtype=dtype_)

            if tp is None:
                state[module] = assemble(src, read)
            else:  # only this rank's slice (``dllm.parallel.tensor_plan``)
                from dllm.parallel.tensor_plan import read_local

                state[module] = read_local(module, src, module_shapes[module], tp, cfg,
                                           {n: s[0] for n, s in expected.items()}, read
                                           ).to(device=device, dtype=dtype_)
    if lora is not None:
        merge_adapter(state, sources, lora, adapted, torch_dtype)
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["embed.weight"]
    model.load_state_dict(state, assign=True, strict=True)
    model.skipped_weights = tuple(sorted(skipped))
    model.eval().requires_grad_(False)
    if prepack:
        prepack_linears(model)
    return model
