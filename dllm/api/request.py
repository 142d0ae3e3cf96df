"""What a generate call asks beyond decoding knobs: stops, ``max_tokens``, ``n`` samples per
prompt, echo. Checked before any model work and turned into the decode's GenerationConfig and
per-row seeds, so the Python API, the CLI and the server map a request one way.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Sequence

from dllm.engine.config import DEFAULT_BLOCK_LENGTH, GenerationConfig, block_aligned_gen_length, sample_seeds
from dllm.engine.decoding import check_seeds
from dllm.api.stops import StopConditions
from dllm.validation import OptionTypeError


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """How rows are turned into outputs.

    stops: stop strings / token ids; the text ends before the first one (finish_reason "stop").
    max_tokens: answer tokens kept; the canvas is the smallest block-aligned length that holds
      them and the answer is cut there (finish_reason "length" when the cut removes text).
    n: samples per prompt, seeded ``sample_seeds(seed, n)``; output rows are grouped by prompt
      (prompt 0's n samples, then prompt 1's, ...).
    echo: each text starts with its prompt's text (as the model saw it, chat template included).
    logprobs: report each kept answer token's logprob with this many alternatives
      (``engine.logprobs``; None: not recorded).
    """

    stops: StopConditions = field(default_factory=StopConditions)
    max_tokens: int | None = None
    n: int = 1
    echo: bool = False
    logprobs: int | None = None

    @classmethod
    def parse(cls, *, stop: Any = None, stop_token_ids: Any = None, max_tokens: Any = None, n: Any = 1,
              echo: Any = False, logprobs: Any = None, vocab_size: int | None = None) -> "OutputRequest":
        """Check each value and name the fix; nothing is rounded or clipped."""
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, numbers.Integral)):
            raise OptionTypeError(f"max_tokens must be a positive int, got {max_tokens!r}")
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens}")
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise OptionTypeError(f"n (samples per prompt) must be a positive int, got {n!r}")
        if n <= 0:
            raise ValueError(f"n (samples per prompt) must be a positive int, got {n}")
        if not isinstance(echo, bool):
            raise OptionTypeError(f"echo must be True or False, got {echo!r}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, numbers.Integral)):
            raise OptionTypeError(f"logprobs must be an int (alternatives per token, 0: the token alone) or None, "
                                  f"got {logprobs!r}")
        stops = StopConditions.parse(stop, stop_token_ids, vocab_size=vocab_size)
        return cls(stops=stops, max_tokens=None if max_tokens is None else int(max_tokens), n=int(n), echo=echo,
                   logprobs=None if logprobs is None else int(logprobs))


# keywords of a generate call beside GenerationConfig's fields, and other libraries' names for them
CALL_KEYWORDS = ("chat", "seeds", "stop", "stop_token_ids", "max_tokens", "n", "echo", "logprobs", "regex", "choice",
                 "json_schema", "grammar")
FOREIGN_KEYWORDS = {"top_logprobs": "logprobs", "max_new_tokens": "max_tokens", "max_length": "max_tokens", "num_return_sequences": "n",
                    "stop_sequences": "stop", "stop_strings": "stop", "eos_token_id": "stop_token_ids",
                    "generation_config": "config", "sampling_params": "config"}
# transformers' and vLLM's options with no counterpart here: named as such, never "corrected" to
# a near spelling of another meaning (min_tokens is no max_tokens)
NO_COUNTERPART = ("min_tokens", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "num_beams",
                  "length_penalty", "no_repeat_ngram_size", "ignore_eos", "best_of", "use_beam_search")
SAMPLING_HINT = ("dllm samples when temperature > 0, so do_sample has no keyword of its own: do_sample=True is "
                 "temperature=1.0 (or another value > 0), do_sample=False the default temperature=0 (argmax)")
# generate's keywords that stream (one prompt, one sample, the answer alone) does not take, and what to do instead
GENERATE_ONLY = {"seeds": "stream decodes one prompt: pass seed=N (generate takes seeds, one per prompt)",
                 "n": "stream decodes one sample: call it once per seed (seed=N), or use generate(n=...)",
                 "echo": "stream's updates carry the answer alone: put the prompt before it, or use "
                         "generate(echo=True)"}


def meant_keyword(name: str, fields: set[str] | Sequence[str], *, foreign: dict[str, str] | None = None,
                  call: Sequence[str] = CALL_KEYWORDS) -> str:
    """``" (did you mean 'x'?)"`` for an unknown keyword: another library's name for one of
    ours (``foreign``, default generate's), or the closest field or ``call`` keyword; what to
    write instead of ``do_sample``; ``""`` when nothing is close or the option has no counterpart."""
    import difflib

    foreign = FOREIGN_KEYWORDS if foreign is None else foreign
    if name == "do_sample":
        return f" ({SAMPLING_HINT})"
    if name in NO_COUNTERPART:
        return " (another library's option, which dllm has no counterpart for)"
    close = [foreign[name]] if name in foreign else difflib.get_close_matches(
        name, [*fields, *call], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_stream_keywords(options: dict[str, Any]) -> None:
    """stream's keywords beyond GenerationConfig's: generate's batch and echo options are named
    with what stream takes instead (the list of known fields alone offered them back)."""
    for name, fix in GENERATE_ONLY.items():
        if name in options:
            raise ValueError(f"stream does not take {name}: {fix}")


def merge_config(config: GenerationConfig | None, options: dict[str, Any],
                 max_tokens: int | None = None, *, model=None) -> GenerationConfig:
    """``config`` (default: GenerationConfig()) with ``options`` applied on top.

    With ``max_tokens`` the answer length is ``block_aligned_gen_length(max_tokens, block)``:
    ``gen_length`` may not be given too. When the answer length changes, values a config
    derived from its gen_length follow the new length (a single block stays one block; one
    token per step stays one per step); values set to something else (a block_length, a steps
    budget) are kept and must fit it. ``model`` (the DiffusionTransformer that will decode it):
    a uniform-state model's block is its canvas: the default block becomes it (``canvas_blocks``)
    and a block of the canvas stays one when the length changes.
    """
    if config is not None and not isinstance(config, GenerationConfig):
        kind = type(config)  # transformers' class has dllm's name: say whose it is
        name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"
        raise OptionTypeError(f"config must be a dllm.GenerationConfig, got {name}; "
                              "pass generation options as keywords (e.g. gen_length=32)")
    known = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; known: {sorted(known)}"
                         f"{meant_keyword(unknown[0], known)}")
    values = {} if config is None else {f.name: getattr(config, f.name) for f in dataclasses.fields(GenerationConfig)}
    if max_tokens is not None and "gen_length" in options:
        raise ValueError(f"pass max_tokens={max_tokens} or gen_length={options['gen_length']}, not both: "
                         "max_tokens is the answer's length (rounded up to whole blocks for the canvas), "
                         "gen_length the canvas' own")
    canvas = canvas_length(model)
    if config is not None and (max_tokens is not None or options.get("gen_length", config.gen_length) != config.gen_length):
        if config.block_length == config.gen_length and config.block_length != canvas:
            values["block_length"] = None  # one block, of the new length
        if config.steps == config.gen_length:
            values["steps"] = None  # one token per step
    if max_tokens is not None:
        block = options.get("block_length", values.get("block_length"))
        values["gen_length"] = block_aligned_gen_length(max_tokens, block)
    try:
        merged = GenerationConfig(**{**values, **options})
    except ValueError as err:  # a kept steps budget or sub-block the rounded length does not fit
        if max_tokens is None or isinstance(err, OptionTypeError) or values["gen_length"] == max_tokens:
            raise
        raise ValueError(f"{err} (max_tokens={max_tokens} makes the canvas gen_length={values['gen_length']}, "
                         f"whole blocks of {block})") from None
    if config is None and "block_length" not in options:  # the default block: the model's own
        merged = canvas_blocks(merged, model, max_tokens)
    return merged


def canvas_length(model) -> int | None:
    """The canvas a uniform-state model (DiffusionGemma) denoises whole; None for other models."""
    return getattr(model.config, "canvas_length", None) if getattr(model, "uniform_state", False) else None


def canvas_blocks(config: GenerationConfig, model, max_tokens: int | None) -> GenerationConfig:
    """``config``, whose block is the default one (one block of the answer), as a uniform-state
    model reads it: that model denoises whole canvases of its ``canvas_length``, so the block is
    the canvas, as many as hold ``max_tokens`` (the answer is cut there) or ``gen_length`` when
    that is whole canvases. A gen_length that is no whole number of canvases is left for the
    decode to refuse with the fix: the canvas is never stretched beyond what was asked. Callers
    apply it only when no block was chosen (``merge_config``; the CLI without --block-length)."""
    canvas = canvas_length(model)
    if canvas is None or config.block_length != config.gen_length or config.block_length == canvas:
        return config
    if max_tokens is None and config.gen_length % canvas:
        return config
    length = block_aligned_gen_length(max_tokens, canvas) if max_tokens is not None else config.gen_length
    steps = None if config.steps == config.gen_length else config.steps  # one token per step stays so
    return dataclasses.replace(config, block_length=canvas, gen_length=length, steps=steps)


def row_seeds(config: GenerationConfig, seeds: Sequence[int] | None, prompts: int, n: int) -> list[int] | None:
    """One seed per output row: each prompt's seed (``seeds``, default ``config.seed``) spread
    over its ``n`` samples; None when every row uses ``config.seed``."""
    if seeds is not None:
        if not isinstance(seeds, (list, tuple)):
            raise OptionTypeError(f"seeds must be a list of ints, one per prompt; got {type(seeds).__name__}")
        check_seeds(list(seeds), prompts)
    base = [config.seed] * prompts if seeds is None else [int(s) for s in seeds]
    if n == 1:
        return None if seeds is None else base
    return [s for seed in base for s in sample_seeds(seed, n)]
