"""The Python API: ``model = dllm.load(path)``; ``out = model.generate(prompts, ...)``."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence, Union

import torch

from dllm.config import GenerationConfig
from dllm.engine import DecodeResult, Decoding, RowStart, check_prompts, decode
from dllm.inputs import check_token_ids, prompt_batch
from dllm.models import load_model, load_tokenizer
from dllm.models.tokenizer import check_decodable, check_tokenizer_fits
from dllm.stops import StopConditions
from dllm.streaming import StreamUpdate, stream_decoding
from dllm.validation import OptionTypeError

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
        if chat is not None and not isinstance(chat, bool):
            raise OptionTypeError(f"chat must be True, False or None, got {chat!r}")
        has_template = self.tokenizer.chat_template is not None
        if isinstance(prompt, str) and not (chat or (chat is None and has_template)):
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not has_template:
            raise ValueError(f"the tokenizer in {self.path} has no chat template; pass plain text with chat=False")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: Prompt | Sequence[Prompt], config: GenerationConfig | None = None,
                 *, chat: bool | None = None, seeds: Sequence[int] | None = None,
                 **options: Any) -> GenerationOutput:
        """Generate for one prompt or many (ragged lengths are fine).

        ``options`` are GenerationConfig fields, applied on top of ``config``. ``seeds``: one
        sampling seed per prompt (default: ``config.seed`` for each); a row samples the same
        tokens alone or in any batch, at any position.
        """
        config = _merge(config, options)
        ids = [self.encode(p, chat) for p in prompt_batch(prompts)]
        return self.generate_ids(ids, config, seeds=seeds)

    def generate_ids(self, ids: list[list[int]], config: GenerationConfig | None = None, *,
                     seeds: Sequence[int] | None = None, **options: Any) -> GenerationOutput:
        """Generate from token ids (a list of prompts, each a list of ids of this model)."""
        config = _merge(config, options)
        ids = check_token_ids(ids, self.model.config.vocab_size)
        result = decode(self.model, ids, config, seeds=None if seeds is None else list(seeds))
        return self.to_output(result)

    def stream(self, prompt: Prompt, config: GenerationConfig | None = None, *, chat: bool | None = None,
               seed: int | None = None, stop: Any = None, stop_token_ids: Any = None,
               **options: Any) -> Iterator[StreamUpdate]:
        """Decode one prompt, yielding a ``StreamUpdate`` after each forward (newly committed
        positions, the canvas, the final prefix and its new text), then a last one with
        ``finished=True``. Same tokens as ``generate``; ``stop`` / ``stop_token_ids`` end the
        text (and the decode) at the first stop. Bad input raises here, before any model work."""
        config = _merge(config, options)
        prompts = prompt_batch(prompt)
        if len(prompts) != 1:
            raise ValueError(f"stream takes one prompt (a string or chat messages), got {len(prompts)}; "
                             "call it once per prompt, or use generate for a batch")
        ids = check_token_ids([self.encode(prompts[0], chat)], self.model.config.vocab_size)
        check_prompts(ids, config, self.model.config.max_sequence_length)
        stops = StopConditions.parse(stop, stop_token_ids, vocab_size=self.model.config.vocab_size)
        seed = config.seed if seed is None else seed
        decoding = Decoding(self.model, [RowStart(prefix=ids[0], gen_length=config.gen_length, seed=seed)], config)
        return stream_decoding(self, decoding, stops)

    def to_output(self, result: DecodeResult) -> GenerationOutput:
        eos = set(self.model.eos_token_ids)
        texts, token_ids, stats, orders = [], [], [], []
        for row, answer in enumerate(result.answer.tolist()):
            end = next((i for i, t in enumerate(answer) if t in eos), None)
            kept = answer if end is None else answer[: end + 1]
            check_decodable(kept, self.tokenizer, self.model.config.vocab_size, self.path)
            text_ids = answer if end is None else answer[:end]
            texts.append(self.tokenizer.decode(text_ids, skip_special_tokens=False))
            token_ids.append(kept)
            orders.append(result.order[row, : len(kept)].tolist())
            nfe = int(result.nfe[row])
            stats.append({
                "nfe": nfe, "tokens": len(kept), "tpf": len(kept) / max(nfe, 1),
                "token_forwards": int(result.token_forwards[row]),
                "draft_rows": int(result.draft_rows[row]), "seconds": result.row_seconds[row],
            })
        return GenerationOutput(texts=texts, token_ids=token_ids, stats=stats, decode_order=orders,
                                memory=result.memory)


def _merge(config: GenerationConfig | None, options: dict[str, Any]) -> GenerationConfig:
    """``config`` (default: GenerationConfig()) with ``options`` applied on top."""
    if config is not None and not isinstance(config, GenerationConfig):
        raise OptionTypeError(f"config must be a dllm.GenerationConfig, got {type(config).__name__}; "
                              "pass generation options as keywords (e.g. gen_length=32)")
    known = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; known: {sorted(known)}")
    if config is None:
        return GenerationConfig(**options)
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GenerationConfig)}
    return GenerationConfig(**{**values, **options})


def load(path: str | Path | None = None, *, device: str | torch.device = "cpu",
         dtype: str | torch.dtype = "float32") -> DiffusionLM:
    """Load a checkpoint directory (default: the bundled trained model)."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise OptionTypeError(f"path must be a checkpoint directory (str or Path), got {type(path).__name__}")
    path = Path(path) if path is not None else default_model_path()
    if not path.exists():
        raise FileNotFoundError(f"model directory {path} does not exist; pass a checkpoint directory "
                                "(dllm never downloads: fetch a Hugging Face model's files into a "
                                "directory first, e.g. with `huggingface-cli download ID --local-dir DIR`)")
    model = load_model(path, dtype=dtype, device=device)
    tokenizer = load_tokenizer(path)
    check_tokenizer_fits(tokenizer, model.config, path)
    return DiffusionLM(model, tokenizer, path)
