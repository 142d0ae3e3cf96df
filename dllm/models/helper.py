"""An autoregressive helper beside the diffusion model: ``dllm.load(..., helper=PATH_OR_ID)``.

APD (Israel et al. 2025) verifies the diffusion model's parallel drafts with a small causal LM
of the same tokenizer (Qwen2.5-0.5B for Dream). dllm loads any Hugging Face causal LM for that
through transformers' own classes (``AutoModelForCausalLM``; remote code is refused: the helper
runs as its authors' library runs it), on the diffusion model's device and dtype. Its ids must
mean the diffusion model's tokens: every token of the helper's tokenizer has the model's id, and
every ordinary (non-special) token of the model's is in the helper's; otherwise the first
mismatch is named. The helper is set on the model as ``model.helper`` (a ``HelperLM``, not a
submodule: the diffusion model's parameters, memory plan and repr stay its own), where the
strategies that use it (``apd``) find it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from dllm.models.loading import CheckpointError, read_json_object
from dllm.models.quantize import quiet_torchao
from dllm.models.tokenizer import load_tokenizer

BUNDLED_HELPERS = Path(__file__).resolve().parent.parent / "assets" / "helpers"


@dataclass(kw_only=True, slots=True)
class HelperLM:
    model: Any  # a transformers causal LM (PreTrainedModel), in eval mode
    path: Path
    vocab_size: int  # rows of its embedding: ids it can read and predict

    def __repr__(self) -> str:
        return f"HelperLM({self.path.name!r}, type={self.model.config.model_type!r}, vocab_size={self.vocab_size})"


def bundled_helpers() -> dict[str, Path]:
    """Shipped helpers by name (``dllm/assets/helpers/<name>``, directories with a config.json)."""
    if not BUNDLED_HELPERS.is_dir():
        return {}
    return {d.name: d for d in sorted(BUNDLED_HELPERS.iterdir()) if (d / "config.json").is_file()}


def resolve_helper_path(helper: str | os.PathLike) -> Path:
    """A helper directory from a path, a bundled helper's name or a hub id (``dllm.models.hub``)."""
    from dllm.models.hub import hub_snapshot, is_hub_id

    if Path(helper).exists():
        return Path(helper)
    helpers = bundled_helpers()
    if isinstance(helper, str) and helper in helpers:
        return helpers[helper]
    if isinstance(helper, str) and is_hub_id(helper):
        return hub_snapshot(helper)
    raise FileNotFoundError(f"helper {str(helper)!r} is not a directory, a bundled helper's name "
                            f"({', '.join(helpers) or 'none'}) or a Hugging Face hub id (org/name); pass a causal "
                            "LM's checkpoint directory, e.g. the bundled dllm-waitingline-ar")


def tokenizer_mismatch(model_tokenizer, helper_tokenizer) -> str | None:
    """The first way the helper's ids differ from the model's, or None when they agree: a helper
    token at another id (or absent) in the model's tokenizer, or an ordinary model token the
    helper lacks. The model's own special tokens (e.g. a mask token) may be missing."""
    ours, theirs = model_tokenizer.get_vocab(), helper_tokenizer.get_vocab()
    for token, index in sorted(theirs.items(), key=lambda item: item[1]):
        if token not in ours:
            return f"the helper's token {token!r} (id {index}) is not in the model's tokenizer"
        if ours[token] != index:
            return f"token {token!r} is id {index} in the helper's tokenizer and id {ours[token]} in the model's"
    special = {t.content for t in model_tokenizer.added_tokens_decoder.values() if t.special}
    special |= set(model_tokenizer.all_special_tokens)
    missing = sorted((index, token) for token, index in ours.items() if token not in theirs and token not in special)
    if missing:
        index, token = missing[0]
        return (f"the model's token {token!r} (id {index}) is not in the helper's tokenizer "
                f"({len(missing)} ordinary tokens missing)")
    return None


@contextmanager
def _no_progress_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off while a helper loads (it drew one on stderr even
    under ``dllm -q`` and into files), restored after."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def load_helper(helper: str | os.PathLike, model_tokenizer, *, device: torch.device, dtype: torch.dtype) -> HelperLM:
    """Load ``helper`` (a causal LM) on ``device`` in ``dtype``; its tokenizer must match
    ``model_tokenizer`` (checked before any weight is read)."""
    path = resolve_helper_path(helper)
    raw = read_json_object(path / "config.json") if (path / "config.json").is_file() else None
    if raw is None:
        raise CheckpointError(f"no config.json in helper {path}; pass a causal LM's checkpoint directory")
    if "auto_map" in raw:
        raise CheckpointError(f"helper {path} needs remote code (auto_map in its config.json); dllm loads helpers "
                              "with transformers' own classes only: pick a causal LM transformers ships")
    mismatch = tokenizer_mismatch(model_tokenizer, load_tokenizer(path))
    if mismatch is not None:
        raise ValueError(f"helper {path} does not share the diffusion model's tokenizer: {mismatch}; "
                         "an autoregressive helper must read and write the model's ids (pick one of its tokenizer)")
    try:
        with quiet_torchao(), _no_progress_bar():  # a library load prints nothing (dllm -q, pipes)
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False)
    except (ValueError, KeyError) as err:  # not a causal LM transformers knows
        raise CheckpointError(f"helper {path} is not a causal LM transformers can load "
                              f"(model_type {raw.get('model_type')!r}): {err}") from err
    model = model.to(device).eval().requires_grad_(False)
    return HelperLM(model=model, path=path, vocab_size=model.get_input_embeddings().weight.shape[0])
