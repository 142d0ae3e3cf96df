"""cache="encoder": the prefix K/V of an encoder-denoiser model (DiffusionGemma).

Such a model reads its prompt and every finished canvas through a causal encoder whose K/V the
denoiser attends to; the denoiser never writes them. At a window's first forward the positions
encoded so far are extended to the window start (the prompt, then each committed canvas, once),
and every forward denoises the window's tokens over them. ``self_conditioning`` is the previous
step's logits of the window (set by the uniform strategy; None at a canvas's first step).
"""
from __future__ import annotations

from torch import Tensor

from dllm.cache.base import register_cache
from dllm.runner.model_runner import ModelRunner


@register_cache("encoder", cache_args=())
class EncoderPrefix:
    def __init__(self, *, block_length: int, sub_block_length: int | None = None) -> None:
        if sub_block_length is not None:
            raise ValueError("cache 'encoder' denoises whole canvases: drop sub_block_length")
        self.store = None  # the model's PrefixKV, made at the first forward
        self.encoded = 0  # canvas positions [0, encoded) are in the store
        self.self_conditioning: Tensor | None = None
        self.peak_bytes = 0

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        if not hasattr(runner.model, "denoise"):
            raise ValueError("cache 'encoder' is for encoder-denoiser models (DiffusionGemma); this model is "
                             "mask-based: use cache 'none', 'prefix', 'dual', ...")
        if rows is not None:
            raise ValueError("cache 'encoder' forwards the canvas rows only (no candidate states)")
        if self.store is None:
            self.store = runner.new_prefix()
        if self.encoded < bs:
            runner.encode(tokens[:, self.encoded:bs], self.encoded, self.store)
            self.encoded = bs
            self.peak_bytes = max(self.peak_bytes, sum(k.numel() * k.element_size() * 2 for k in self.store.keys))
        return runner.denoise(tokens[:, bs:be], bs, self.store, self.self_conditioning, count=count)
