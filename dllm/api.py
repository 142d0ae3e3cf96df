"""The Python API: ``model = dllm.load(path)``; ``out = model.generate(prompts, ...)``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, Union

import torch

from dllm.config import GenerationConfig
from dllm.engine import DecodeResult, decode
from dllm.models import load_model, load_tokenizer

Message = dict[str, str]
Prompt = Union[str, Sequence[Message]]


def default_model_path() -> Path:
    """The small trained model that ships inside the package."""
    return Path(__file__).resolve().parent / "assets" / "models" / "dllm-waitingline-llada"


@dataclass(kw_only=True, slots=True)
class GenerationOutput:
    texts: list[str]  # answer text up to (not including) the first end-of-text
    token_ids: list[list[int]]  # answer ids up to and including the first end-of-text
    stats: list[dict[str, Any]]  # per row: nfe, tpf, token_forwards, draft_rows, tokens, seconds
    decode_order: list[list[int]] = field(default_factory=list)  # forward index per answer token
    memory: dict[str, int] = field(default_factory=dict)  # dllm.memory plan + kv_cache_peak_bytes


class DiffusionLM:
    """A loaded checkpoint (model + tokenizer) that generates with any policy and cache."""

    def __init__(self, model, tokenizer, path: Path) -> None:
        self.model, self.tokenizer, self.path = model, tokenizer, path

    def encode(self, prompt: Prompt, chat: bool | None = None) -> list[int]:
        """Token ids of one prompt; chat messages (or a string with ``chat``) use the template."""
        has_template = self.tokenizer.chat_template is not None
        if isinstance(prompt, str) and not (chat or (chat is None and has_template)):
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not has_template:
            raise ValueError(f"the tokenizer in {self.path} has no chat template; pass plain text with chat=False")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: Prompt | Sequence[Prompt], config: GenerationConfig | None = None,
                 *, chat: bool | None = None, **options: Any) -> GenerationOutput:
        """Generate for one prompt or many (ragged lengths are fine).

        ``options`` are GenerationConfig fields, applied on top of ``config``.
        """
        config = _merge(config, options)
        batch = [prompts] if isinstance(prompts, str) or _is_messages(prompts) else list(prompts)
        ids = [self.encode(p, chat) for p in batch]
        return self.generate_ids(ids, config)

    def generate_ids(self, ids: list[list[int]], config: GenerationConfig) -> GenerationOutput:
        result = decode(self.model, ids, config)
        return self.to_output(result)

    def to_output(self, result: DecodeResult) -> GenerationOutput:
        eos = set(self.model.eos_token_ids)
        texts, token_ids, stats, orders = [], [], [], []
        for row, answer in enumerate(result.answer.tolist()):
            end = next((i for i, t in enumerate(answer) if t in eos), None)
            kept = answer if end is None else answer[: end + 1]
            text_ids = answer if end is None else answer[:end]
            texts.append(self.tokenizer.decode(text_ids, skip_special_tokens=False))
            token_ids.append(kept)
            orders.append(result.order[row, : len(kept)].tolist())
            nfe = int(result.nfe[row])
            stats.append({
                "nfe": nfe, "tokens": len(kept), "tpf": len(kept) / max(nfe, 1),
                "token_forwards": int(result.token_forwards[row]),
                "draft_rows": int(result.draft_rows[row]), "seconds": result.wall_time,
            })
        return GenerationOutput(texts=texts, token_ids=token_ids, stats=stats, decode_order=orders,
                                memory=result.memory)


def _is_messages(value: Any) -> bool:
    return isinstance(value, Sequence) and len(value) > 0 and isinstance(value[0], dict)


def _merge(config: GenerationConfig | None, options: dict[str, Any]) -> GenerationConfig:
    if config is None:
        return GenerationConfig(**options)
    known = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; known: {sorted(known)}")
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GenerationConfig)}
    return GenerationConfig(**{**values, **options})


def load(path: str | Path | None = None, *, device: str | torch.device = "cpu",
         dtype: str | torch.dtype = "float32") -> DiffusionLM:
    """Load a checkpoint directory (default: the bundled trained model)."""
    path = Path(path) if path is not None else default_model_path()
    if path is None or not path.exists():
        raise FileNotFoundError(f"model directory {path} does not exist; pass a checkpoint directory")
    return DiffusionLM(load_model(path, dtype=dtype, device=device), load_tokenizer(path), path)
