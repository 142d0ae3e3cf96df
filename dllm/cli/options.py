"""Command-line option helpers shared by every command that loads a model or decodes.

Commands (``dllm/cli/main.py``, ``dllm/bench/*``, ``dllm/train/filter_cli.py``) import from here;
this module imports nothing of theirs, so the command layer sits above the library.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from dllm.api.model import DiffusionLM


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default once: appended when it is a value (``(default: 128)``); a help
    text that already describes its default (``default: off``) is left as written, and flags
    and options whose default is None show none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        no_value = action.default is None or action.default is argparse.SUPPRESS or action.nargs == 0  # flags
        if "default" in help_text or no_value or not action.option_strings:
            return help_text
        return f"{help_text} (default: {_typed_default(action)})".lstrip()


def _typed_default(action: argparse.Action) -> str:
    """The default as a person would type it: a list as the words of an option that takes several
    (``1 2 4``), or as the one comma-separated word of one that reads a list (``0.5,1.0,2.0``);
    anything else as argparse shows it (a help-format placeholder)."""
    if not isinstance(action.default, (list, tuple)):
        return "%(default)s"
    separator = " " if action.nargs in ("+", "*") else ","
    return separator.join(str(value) for value in action.default).replace("%", "%%")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a batch size, a sample count)."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (0: none, off)."""
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (a timeout in seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_kv(pairs: Sequence[str] | None) -> dict[str, Any]:
    """["k=v", ...] -> {k: v} with v parsed as JSON when possible (numbers, bools)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"expected key=value, got {pair!r} (e.g. --policy-arg tau=0.9)")
        key, value = pair.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


# each kind of policy and the cache modes: the package whose modules register them, and the
# decorator they register with (``@register_rule("threshold")``)
REGISTRIES = {"policy": ("samplers", "register_rule"), "strategy": ("samplers", "register_strategy"),
              "stopper": ("samplers", "register_stopper"), "cache": ("cache", "register_cache")}
REGISTERED = re.compile(r"""^@(register_\w+)\(\s*["']([^"']+)["']""", re.MULTILINE)  # a module-level decorator
# the registries themselves, by kind: read when a program has already imported them
REGISTRY_TABLES = {"policy": ("dllm.samplers.base", "RULES"), "strategy": ("dllm.samplers.base", "STRATEGIES"),
                   "stopper": ("dllm.samplers.base", "STOPPERS"), "cache": ("dllm.cache.base", "CACHES")}


def policy_names() -> dict[str, list[str]]:
    """Registered names of each kind of policy and of the cache modes, for ``choices``: read from
    the registering decorators in the packages' source (a few ms), since importing the registries
    imports torch (seconds), which ``dllm generate --help`` never needs; and the names in those
    registries when a program imported them already (its own rule, registered before it calls
    ``main``), or when no source was read (an install without its ``.py`` files). A test holds them
    equal to the registries' (tests/cli/test_cli_light_commands.py)."""
    kind_of = {decorator: kind for kind, (_, decorator) in REGISTRIES.items()}
    names: dict[str, set[str]] = {kind: set() for kind in REGISTRIES}
    for package in sorted({package for package, _ in REGISTRIES.values()}):
        for path in (Path(__file__).resolve().parents[1] / package).rglob("*.py"):
            for decorator, name in REGISTERED.findall(path.read_text(encoding="utf-8")):
                if decorator in kind_of:
                    names[kind_of[decorator]].add(name)
    for kind, (module, table) in REGISTRY_TABLES.items():  # a program's own names, registered before main()
        if module in sys.modules or not names[kind]:  # none read: an install without its .py sources
            names[kind].update(getattr(importlib.import_module(module), table))
    return {kind: sorted(found) for kind, found in names.items()}


def _one_of(names: list[str]) -> str:
    return "one of: " + ", ".join(names)


def add_generation_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that decodes."""
    names = policy_names()
    g = p.add_argument_group("decoding")
    g.add_argument("--policy", default="low_confidence", choices=names["policy"], metavar="RULE",
                   help=f"unmasking rule, {_one_of(names['policy'])}")
    g.add_argument("--policy-arg", action="append", metavar="K=V", help="rule option, repeatable")
    g.add_argument("--strategy", default="plain", choices=names["strategy"], metavar="STRATEGY",
                   help=f"decoding strategy, {_one_of(names['strategy'])}")
    g.add_argument("--strategy-arg", action="append", metavar="K=V", help="strategy option, repeatable")
    g.add_argument("--stopper", default="none", choices=names["stopper"], metavar="STOPPER",
                   help=f"stopping criterion, {_one_of(names['stopper'])}")
    g.add_argument("--stopper-arg", action="append", metavar="K=V", help="stopper option, repeatable")
    g.add_argument("--cache", default="none", choices=names["cache"], metavar="CACHE",
                   help=f"KV cache, {_one_of(names['cache'])}")
    g.add_argument("--sub-block-length", type=positive_int, default=None, help="sub-block cache size (default: off)")
    g.add_argument("--cache-arg", action="append", metavar="K=V",
                   help="cache option, repeatable (e.g. refresh_every=4)")
    g.add_argument("--max-tokens", type=positive_int, default=None, action=_MaxTokens, metavar="N",
                   help="answer tokens kept; the canvas is the smallest whole number of blocks that holds them "
                        "(instead of --gen-length; default: --gen-length's)")
    g.add_argument("--gen-length", type=positive_int, default=128, action=_RecordGiven, help="answer canvas in tokens")
    g.add_argument("--block-length", type=positive_int, default=None,
                   help="block size (default: gen-length; a uniform-state model's canvas_length)")
    g.add_argument("--steps", type=positive_int, default=None, help="step budget (default: gen-length)")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    g.add_argument("--top-p", type=float, default=None, help="nucleus filter (default: off)")
    g.add_argument("--top-k", type=positive_int, default=None, help="top-k filter (default: off)")
    g.add_argument("--cfg-scale", type=float, default=0.0, help="classifier-free guidance")
    g.add_argument("--no-stop-at-eos", action="store_true", help="decode every position even after end-of-text")
    g.add_argument("--seed", type=int, default=0, action=_RecordGiven, help="sampling seed")
    g.add_argument("--block-add-threshold", type=float, default=None,
                   help="pipelined decoding of block-causal models (D2F): add a block once the last one has "
                        "decoded this share; needs a rule with a threshold (default: one block at a time)")
    g.add_argument("--decoded-token-threshold", type=float, default=0.95, action=_RecordGiven,
                   help="pipelined decoding: a block is fully active once its predecessor decoded this share")
    g.add_argument("--cuda-graphs", action="store_true",
                   help="CUDA: replay the forwards from CUDA graphs captured once per shape (batch padded to "
                        "captured sizes; not with --cache adaptive or a uniform-state model) (default: eager)")
    g.add_argument("--memory-budget-mb", type=float, default=None,
                   help="refuse a decode whose planned peak memory (MiB: weights, KV cache, logits, "
                        "activations, statistics) exceeds this (default: no check)")


def generation_config(args: argparse.Namespace):
    """The GenerationConfig of the decoding options, with its rule, strategy and stopper built
    once, so a bad name or option is an error before any model is loaded."""
    from dllm.engine.config import GenerationConfig
    from dllm.engine.policies import check_policies

    config = GenerationConfig(
        gen_length=answer_length(args), block_length=args.block_length, steps=args.steps,
        policy=args.policy, policy_args=parse_kv(args.policy_arg),
        strategy=args.strategy, strategy_args=parse_kv(args.strategy_arg),
        stopper=args.stopper, stopper_args=parse_kv(args.stopper_arg),
        cache=args.cache, sub_block_length=args.sub_block_length, cache_args=parse_kv(args.cache_arg),
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        cfg_scale=args.cfg_scale, stop_at_eos=not args.no_stop_at_eos, seed=args.seed,
        memory_budget_mb=args.memory_budget_mb, block_add_threshold=args.block_add_threshold,
        decoded_token_threshold=args.decoded_token_threshold, cuda_graphs=args.cuda_graphs,
    )
    check_policies(config, {"policy_args": "--policy-arg", "strategy_args": "--strategy-arg",
                            "stopper_args": "--stopper-arg", "cache_args": "--cache-arg"})
    if config.cuda_graphs and getattr(args, "device", None) is not None:
        from dllm.models.placement import resolve_device
        from dllm.runner.graphs import graphs_available

        reason = graphs_available(resolve_device(args.device))
        if reason is not None:
            raise ValueError(f"--cuda-graphs: {reason}; drop --cuda-graphs or run on a GPU (--device cuda)")
    return config


def refuse_idle_pipeline_options(args: argparse.Namespace) -> None:
    """A command that decodes with one config (generate) refuses --decoded-token-threshold without
    --block-add-threshold: it only tunes the pipelined mode, so it would be ignored. (A server or a
    chat keeps it: a request or a later /set may turn the pipelined mode on.)"""
    if "decoded_token_threshold" in getattr(args, "given_options", ()) and args.block_add_threshold is None:
        raise ValueError(f"--decoded-token-threshold {args.decoded_token_threshold} only tunes the pipelined mode; "
                         "add --block-add-threshold (e.g. 0.1) to turn it on, or drop --decoded-token-threshold")


def add_tensor_parallel_option(p: argparse.ArgumentParser, *, copies: bool = False) -> None:
    """--tensor-parallel N: split the model over N processes of a torchrun job; ``copies``: the
    command runs one copy of the model per N ranks of a larger job (data / branch parallel)."""
    launch = "a multiple of N: one copy of the model per N ranks" if copies else "N"
    p.add_argument("--tensor-parallel", "--tensor-parallel-size", "-tp", type=positive_int, default=1, metavar="N",
                   help=f"split the model over N processes (run under torchrun --nproc_per_node {launch}): heads, "
                        "MLPs, experts and vocabulary divided, each rank reads only its slices; "
                        "--tensor-parallel-size and -tp are vLLM's names for it (default: 1)")


def add_model_options(p: argparse.ArgumentParser) -> None:
    from dllm.models.placement import DTYPE_CHOICES  # torch: only once a command that loads a model is chosen

    p.add_argument("--model", default=None,
                   help="checkpoint directory, a bundled model's name (`dllm models`) or a Hugging Face hub id "
                        "(org/name: the hub cache first, fetching only the files dllm reads; HF_HUB_OFFLINE=1 "
                        "honoured) (default: the bundled LLaDA-layout model)")
    p.add_argument("--revision", default=None,
                   help="branch, tag or commit of a hub id given to --model (default: main)")
    p.add_argument("--device", default="auto",
                   help="torch device: auto (CUDA when present, else cpu; $DLLM_DEVICE overrides), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="auto", type=_dtype_name, choices=DTYPE_CHOICES,
                   help="weight and activation dtype: auto is the checkpoint's torch_dtype, else "
                        "bfloat16 on a GPU and float32 on the CPU; vLLM's half and float are float16 and float32")
    p.add_argument("--prepack", action="store_true",
                   help="CPU only: reorder the linear weights for oneDNN once at load (faster decode steps; "
                        "logits move by float rounding from the default path)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="CUDA: linears, RMSNorms, attention and log-probabilities through fixed-order Triton "
                        "kernels so a row's logits do not move with its batch (MoE experts not yet measured); "
                        "CPU: accepted, changes nothing (rows already decode their batch-1 tokens)")
    p.add_argument("--quantize", default=None, choices=["int8", "float8"],
                   help="quantize every linear but the LM head at load (torchao, weight-only): int8 on any "
                        "device, float8 on NVIDIA GPUs of compute capability 8.9+ (default: off)")
    p.add_argument("--adapter", default=None, metavar="DIR",
                   help="a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) merged "
                        "into the model's weights at load, e.g. a D2F student (default: none)")
    p.add_argument("--chat-template", default=None, metavar="FILE_OR_TEXT",
                   help="a chat template to use instead of the checkpoint's: a Jinja file or its text, e.g. one "
                        "that shows tools (default: the checkpoint's)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="accepted as vLLM and transformers take it, and changes nothing: dllm never runs code "
                        "shipped with a checkpoint (its own model classes read the weights)")
    p.add_argument("--helper", default=None, metavar="DIR_OR_ID",
                   help="an autoregressive helper of the model's tokenizer for --strategy apd: a causal LM "
                        "directory, a bundled helper (dllm-waitingline-ar) or a hub id, loaded through "
                        "transformers (default: none)")


def add_model_argument(p: argparse.ArgumentParser) -> None:
    """The model as a positional argument too: ``dllm serve MODEL`` as ``vllm serve MODEL``,
    ``dllm chat MODEL`` as ``ollama run MODEL`` (``model_of`` reads it)."""
    p.add_argument("model_tag", nargs="?", default=None, metavar="MODEL",
                   help=f"the model, as --model takes it ({p.prog} MODEL, or {p.prog} --model MODEL)")


def model_of(args: argparse.Namespace) -> str | None:
    """The model asked for: the positional MODEL or --model (the same one if both), else None
    (the bundled default)."""
    tag, flag = getattr(args, "model_tag", None), args.model
    if tag is not None and flag is not None and tag != flag:
        raise ValueError(f"two models given, {tag!r} and --model {flag!r}; give one")
    return flag if tag is None else tag


def _dtype_name(text: str) -> str:
    """argparse type of --dtype: vLLM's aliases as the dtype they name (then checked by ``choices``)."""
    from dllm.models.placement import DTYPE_ALIASES

    return DTYPE_ALIASES.get(text, text)


def load_from_args(args: argparse.Namespace, device: str | None = None) -> DiffusionLM:
    """``dllm.load`` with the options of ``add_model_options``; ``device`` overrides ``--device``
    (torchrun's per-rank device)."""
    import dllm

    return dllm.load(model_of(args), device=args.device if device is None else device, dtype=args.dtype,
                     prepack=args.prepack, revision=args.revision, quantize=getattr(args, "quantize", None),
                     tensor_parallel=getattr(args, "tensor_parallel", 1), adapter=getattr(args, "adapter", None),
                     helper=getattr(args, "helper", None),
                     batch_invariant=getattr(args, "batch_invariant", False),
                     chat_template=getattr(args, "chat_template", None))


def add_verbosity_options(p: argparse.ArgumentParser, *, top_level: bool) -> None:
    """-v / -q: accepted before the command (``dllm -q generate``) and after it; a subcommand's
    copy leaves the top-level value alone unless given (SUPPRESS)."""
    count_default = 0 if top_level else argparse.SUPPRESS
    flag_default = False if top_level else argparse.SUPPRESS
    g = p.add_argument_group("output")
    g.add_argument("-v", "--verbose", action="count", default=count_default,
                   help="debug diagnostics on stderr")
    g.add_argument("-q", "--quiet", action="store_true", default=flag_default,
                   help="only warnings and errors on stderr, no progress bars")


class _MaxTokens(argparse.Action):
    """Stores --max-tokens and, unless --gen-length was given, makes it ``gen_length`` too, so a
    command that reads only ``gen_length`` (serve's default max_tokens) gets the answer length."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        if "gen_length" not in getattr(namespace, "given_options", ()):
            namespace.gen_length = values


class _RecordGiven(argparse.Action):
    """Stores the value and notes that it was given (``args.given_options``), so a conflicting
    option can be refused while the default stays in the help and in the namespace."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, "given_options", {*getattr(namespace, "given_options", ()), self.dest})


def model_block(args: argparse.Namespace, model, config, max_tokens: int | None):
    """``config`` as the loaded ``model`` reads the default block (no --block-length): a
    uniform-state model's is its canvas (``dllm.api.request.canvas_blocks``)."""
    from dllm.api.request import canvas_blocks

    return config if args.block_length is not None else canvas_blocks(config, model.model, max_tokens)


def given_block(args: argparse.Namespace) -> dict[str, int]:
    """``{"block_length": --block-length}`` when it was given, else {}: the options ``merge_config``
    keeps as they are when the answer length changes. A block only on the config would be read as
    derived when it equals its gen_length (``--block-length 32 --max-tokens 6`` makes a 32-token
    canvas of one block) and follow the answer length instead, unlike the API's block_length=32."""
    return {} if args.block_length is None else {"block_length": args.block_length}


def answer_length(args: argparse.Namespace) -> int:
    """The canvas' answer length: ``--gen-length``, or the smallest whole number of blocks that
    holds ``--max-tokens`` (not both)."""
    from dllm.engine.config import block_aligned_gen_length

    max_tokens = getattr(args, "max_tokens", None)
    if max_tokens is None:
        return args.gen_length
    if "gen_length" in getattr(args, "given_options", ()):
        raise ValueError(f"pass --max-tokens {max_tokens} or --gen-length {args.gen_length}, not both: "
                         "--max-tokens is the answer's length (rounded up to whole blocks for the canvas)")
    return block_aligned_gen_length(max_tokens, args.block_length)


def length_flag(args: argparse.Namespace) -> str:
    """The flag that set the answer canvas' length (``--max-tokens``, else ``--gen-length``), for
    an error to name as its fix."""
    return "--max-tokens" if getattr(args, "max_tokens", None) is not None else "--gen-length"


def add_request_options(p: argparse.ArgumentParser) -> None:
    """What a request asks beyond decoding: stops, answer length, samples, echo."""
    g = p.add_argument_group("request")
    g.add_argument("--stop", action="append", metavar="TEXT",
                   help=r"end the text before the first TEXT, repeatable; \n, \t, \r and \\ are read as "
                        r"newline, tab, carriage return and backslash (--stop '\n') (default: none)")
    g.add_argument("--stop-token-id", action="append", type=int, metavar="ID",
                   help="end the text before token ID, repeatable (default: none)")
    g.add_argument("--n", type=positive_int, default=1, help="samples per prompt (seeds seed, seed + 1, ...)")
    g.add_argument("--echo", action="store_true",
                   help="print each prompt as written before its answer (the templated form: --echo-template)")
    g.add_argument("--echo-template", action="store_true",
                   help="print each prompt as the model saw it, chat template and special tokens included")


def output_request(args: argparse.Namespace, vocab_size: int | None = None):
    """The OutputRequest of the request options (checked again against the model's vocabulary)."""
    from dllm.api.request import OutputRequest

    if args.echo and args.echo_template:
        raise ValueError("pass --echo (each prompt as written) or --echo-template (as the model saw it), not both")
    stops = None if args.stop is None else [unescape(text) for text in args.stop]
    return OutputRequest.parse(stop=stops, stop_token_ids=args.stop_token_id, max_tokens=args.max_tokens,
                               n=args.n, echo=args.echo_template, vocab_size=vocab_size)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape(text: str) -> str:
    """The escapes people type in a shell argument (``--stop "\\n"``) as the characters they mean:
    ``\\n``, ``\\t``, ``\\r``, ``\\\\``; any other backslash is kept as written."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)
