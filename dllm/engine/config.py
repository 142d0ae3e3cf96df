"""GenerationConfig: every decoding knob in one validated dataclass."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from dllm.validation import OptionTypeError, check_value, field_types

# other libraries' names for a field (transformers' GenerationConfig, Fast-dLLM's and Dream's loops)
# the block of interactive decoding (the server, dllm chat) when no option sets one: Fast-dLLM's and
# LLaDA's semi-autoregressive block (LLaDA's chat.py), Fast-dLLM v2's and LLaDA2's model block; an answer
# that ends early stops after its block instead of decoding one block of the whole length
DEFAULT_BLOCK_LENGTH = 32


FOREIGN_FIELDS = {"max_new_tokens": "gen_length", "max_length": "gen_length", "max_tokens": "gen_length",
                  "block_size": "block_length", "diffusion_steps": "steps",
                  "do_sample": "temperature (it samples when > 0; do_sample=False is the default 0)"}


@dataclass(kw_only=True, slots=True)
class GenerationConfig:
    """How to decode. Defaults follow the LLaDA reference (one token per step, one block).

    gen_length: answer tokens (the canvas holds prompt + gen_length masks).
    block_length: semi-autoregressive block size; None means one block of gen_length.
    steps: step budget over the whole answer; None means gen_length (one token per step).
      Split evenly over blocks: steps must be a multiple of the number of blocks.
    policy / policy_args: the unmasking rule by name (see ``dllm.samplers.RULES``).
    strategy / strategy_args: how forwards are spent ("plain", or draft-and-verify / lookahead).
    stopper / stopper_args: early-exit criterion ("none", or a registered stopper).
    cache / sub_block_length / cache_args: KV-cache mode ("none", "prefix", "dual", "adaptive") and options.
    temperature: Gumbel-max sampling temperature (0 = argmax); top_p / top_k filter first, at
      temperature 0 too: the argmax stays, but the confidence that ranks positions is read from
      the filtered distribution (Dream's sample_tokens), so the order and answer can change.
    cfg_scale: LLaDA classifier-free guidance (unconditional = prompt replaced by masks).
    stop_at_eos: a row stops once every position before its first end-of-text is committed;
      the rest of its canvas is filled with end-of-text.
    memory_budget_mb: refuse (before any model work) a decode whose planned peak (weights, KV
      cache, logits, activations, statistics; dllm.engine.memory) exceeds this many MiB; None = no check.
    edit_threshold: token editing (LLaDA2.1): after each step's commits, already decided answer
      positions of the window are rewritten where the forward's token differs from them and its
      probability exceeds this; None = no editing. A window then ends only after a forward that
      edits nothing with no mask left, or after ``max_post_steps`` such forwards.
    max_post_steps: forwards a window may take for editing once its masks are all decided.
    block_add_threshold: the pipelined mode for block-causal models (D2F; ``dllm/engine/pipeline.py``):
      several blocks in flight, a new one added when the last one's decoded share reaches this;
      None = one block at a time. Needs a rule with a threshold (it is D2F's skip_threshold).
    decoded_token_threshold: pipelined mode: a block is fully active (commits its best position
      when nothing passes the threshold) once its predecessor's decoded share reaches this.
    compile: run the model forward through torch.compile (CUDA: mode="reduce-overhead", i.e.
      CUDA graphs of the static-shaped window forwards; CPU: a plain compile). Same tokens as
      eager; off by default until measured (dllm/runner/compiled.py).
    cuda_graphs: replay the forwards from CUDA graphs captured once per shape (batch padded to
      captured sizes, the prompt region left-padded to a captured width, K/V in static slots
      reused across decodes; dllm/runner/graphs.py). CUDA only; exclusive with compile; off by
      default until measured.
    """

    gen_length: int = 128
    block_length: int | None = None
    steps: int | None = None
    policy: str = "low_confidence"
    policy_args: dict[str, Any] = field(default_factory=dict)
    strategy: str = "plain"
    strategy_args: dict[str, Any] = field(default_factory=dict)
    stopper: str = "none"
    stopper_args: dict[str, Any] = field(default_factory=dict)
    cache: str = "none"
    sub_block_length: int | None = None
    cache_args: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    cfg_scale: float = 0.0
    stop_at_eos: bool = True
    seed: int = 0
    memory_budget_mb: float | None = None
    edit_threshold: float | None = None
    max_post_steps: int = 16
    compile: bool = False
    cuda_graphs: bool = False
    block_add_threshold: float | None = None
    decoded_token_threshold: float = 0.95

    def __new__(cls, *args: Any, **options: Any) -> GenerationConfig:
        """Refuse an unknown option with the field it likely means (Python's own TypeError named
        none: ``max_new_tokens`` is ``gen_length`` here)."""
        known = [f.name for f in fields(cls)]
        for name in options:
            if name not in known:
                close = [FOREIGN_FIELDS[name]] if name in FOREIGN_FIELDS else difflib.get_close_matches(name, known, n=1)
                hint = f"use {close[0]}" if close else f"its fields: {', '.join(known)}"
                raise OptionTypeError(f"GenerationConfig has no option {name!r}; {hint}")
        return object.__new__(cls)

    def __post_init__(self) -> None:
        for name, annotation in field_types(GenerationConfig).items():  # gen_length=8.5, tau=nan, ...
            setattr(self, name, check_value(getattr(self, name), annotation, f"GenerationConfig.{name}"))
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        if self.gen_length <= 0:
            raise ValueError(f"gen_length must be positive, got {self.gen_length}")
        if self.block_length is None:
            self.block_length = self.gen_length
        if self.block_length <= 0:
            raise ValueError(f"block_length must be positive, got {self.block_length}; None means one block of gen_length")
        if self.gen_length % self.block_length:
            raise ValueError(
                f"gen_length={self.gen_length} is not a multiple of block_length="
                f"{self.block_length}; choose a block_length that divides gen_length"
            )
        if self.steps is None:
            self.steps = self.gen_length
        if self.steps <= 0 or self.steps % self.num_blocks:
            raise ValueError(
                f"steps={self.steps} must be a positive multiple of the number of blocks "
                f"({self.num_blocks} = gen_length / block_length); e.g. steps={self.num_blocks * max(1, self.steps // self.num_blocks)}"
            )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k <= 0:
            raise ValueError(f"top_k must be positive, got {self.top_k}")
        if self.memory_budget_mb is not None and self.memory_budget_mb <= 0:
            raise ValueError(f"memory_budget_mb must be positive, got {self.memory_budget_mb}")
        if self.edit_threshold is not None and not 0 <= self.edit_threshold < 1:
            raise ValueError(f"edit_threshold must be in [0, 1) (a probability), got {self.edit_threshold}")
        if self.max_post_steps < 0:
            raise ValueError(f"max_post_steps must be >= 0, got {self.max_post_steps}")
        if self.edit_threshold is not None and self.strategy != "plain":
            raise ValueError(f"token editing (edit_threshold) runs with strategy 'plain', not {self.strategy!r}: "
                             "candidate states of draft-and-verify or lookahead have no single forward to edit from")
        if not 0 <= self.decoded_token_threshold <= 1:  # checked with the pipeline off too: a sweep's typo shows
            raise ValueError(f"decoded_token_threshold must be a decoded share in [0, 1], got {self.decoded_token_threshold}")
        if self.block_add_threshold is not None:
            self._check_pipeline()
        if self.cfg_scale < 0:
            raise ValueError(f"cfg_scale must be >= 0, got {self.cfg_scale}")
        if self.cuda_graphs and self.compile:
            raise ValueError("cuda_graphs=True and compile=True both capture the forward; pick one")
        if self.cuda_graphs and self.cache == "adaptive":
            raise ValueError("cache='adaptive' runs its layers itself, so there is no forward to replay under "
                             "cuda_graphs=True; use cache='dual' (or 'prefix', 'none') or cuda_graphs=False")
        if self.sub_block_length is not None and (
            self.sub_block_length <= 0 or self.block_length % self.sub_block_length
        ):
            raise ValueError(
                f"sub_block_length={self.sub_block_length} must divide block_length={self.block_length}"
            )
        if self.steps % self.num_windows:
            raise ValueError(
                f"steps={self.steps} must be a multiple of the number of sub-blocks ({self.num_windows}); "
                f"e.g. steps={self.num_windows * max(1, self.steps // self.num_windows)}"
            )

    def _check_pipeline(self) -> None:
        if not 0 <= self.block_add_threshold <= 1:
            raise ValueError(f"block_add_threshold must be a decoded share in [0, 1], got {self.block_add_threshold}")
        refused = [(self.sub_block_length is not None, "sub_block_length (the pipeline's windows are whole blocks)"),
                   (self.edit_threshold is not None, "token editing (edit_threshold)"),
                   (self.strategy not in ("plain", "lopa"), f"strategy {self.strategy!r} (plain and lopa run pipelined)")]
        for bad, what in refused:
            if bad:
                raise ValueError(f"the pipelined mode (block_add_threshold) does not run with {what}; drop one of them")

    @property
    def num_blocks(self) -> int:
        return self.gen_length // self.block_length

    @property
    def window_length(self) -> int:
        """The decision window: the sub-block when sub_block_length is set, else the block."""
        return self.sub_block_length or self.block_length

    def cache_options(self) -> dict[str, Any]:
        """The keyword options ``make_cache(self.cache, ...)`` takes: ``cache_args`` with the
        block (and the sub-block when set), as the decode and the up-front check build it."""
        options = {**self.cache_args, "block_length": self.block_length}
        if self.sub_block_length is not None:
            options["sub_block_length"] = self.sub_block_length
        return options

    @property
    def num_windows(self) -> int:
        return self.gen_length // self.window_length

    @property
    def steps_per_block(self) -> int:
        """Step budget of one decision window (a block, or a sub-block)."""
        return self.steps // self.num_windows


def block_aligned_gen_length(max_tokens: int, block_length: int | None) -> int:
    """The smallest gen_length that holds ``max_tokens`` and is a whole number of blocks
    (``block_length`` None: one block of exactly ``max_tokens``). The answer is then cut at
    ``max_tokens`` tokens (finish_reason "length" when that cut removes text)."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if block_length is None:
        return max_tokens
    if isinstance(block_length, bool) or not isinstance(block_length, int) or block_length <= 0:
        raise ValueError(f"block_length must be a positive int, got {block_length!r}")
    return -(-max_tokens // block_length) * block_length


def sample_seeds(seed: int, n: int) -> list[int]:
    """Distinct seeds of ``n`` samples of one prompt: seed, seed + 1, ... (mod 2**63)."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return [(seed + i) % 2**63 for i in range(n)]
