"""lm-eval ``--model_args`` -> what to load, how to evaluate, and a validated GenerationConfig.

lm-eval passes ``key=value`` pairs with values already typed (``0.9`` a float, ``true`` a
bool). Every GenerationConfig field is a key of its own (``gen_length=256``, ``cache=dual``).
Options of the chosen rule, strategy or stopper may be named bare (``tau=0.9``) when exactly
one of them declares it, or with their field as prefix (``policy_args.tau=0.9``,
``cache_args.refresh_every=4``). The config, its rule, strategy, stopper and cache are built
once here, so a bad name or value is an error before the model loads.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from dllm.engine.config import GenerationConfig
from dllm.engine.policies import check_policies
from dllm.samplers import RULES, STOPPERS, STRATEGIES
from dllm.validation import check_value, field_types

DICT_FIELDS = {"policy_args": ("policy", RULES), "strategy_args": ("strategy", STRATEGIES),
               "stopper_args": ("stopper", STOPPERS), "cache_args": ("cache", None)}


@dataclass(kw_only=True, slots=True)
class EvalOptions:
    """What the lm-eval model needs besides the decoding config.

    pretrained: checkpoint directory, bundled model's name or hub id (None: the bundled model);
      revision, device, dtype, prepack, quantize: as dllm.load, with its defaults (device "auto":
      CUDA when present, else cpu; dtype "auto": the checkpoint's torch_dtype, else bfloat16 on a
      GPU and float32 on the CPU).
    batch_size: requests per decode, and rows per forward of the likelihood estimator.
    mc_num: Monte-Carlo samples per loglikelihood request (LLaDA's default 128).
    greedy_check: also decode each continuation greedily to answer lm-eval's is_greedy (one
      forward per continuation token); off, is_greedy is reported False.
    save_dir: where per-request records (resume) and the speed summary go (None: nowhere);
      ``python -m dllm.eval`` sets it to ``--output_path``.
    add_bos_token: start every context with the tokenizer's beginning-of-text token (Dream's
      evaluation does for Base models; chat templates already write it).
    max_batch_size: lm-eval's ceiling for ``batch_size=auto``, which dllm refuses; unused.
    tensor_parallel: split the model over this many torchrun ranks (as dllm.load); a job of more
      ranks holds one copy per this many, and lm-eval shards the documents over the copies.
    adapter: a PEFT LoRA adapter directory merged into ``pretrained`` at load (as dllm.load), e.g.
      a D2F student's; the records of a run with one never answer a run without it.
    trust_remote_code: what lm-eval's ``--trust_remote_code`` adds to the model args (besides
      letting ``datasets`` run a task's loading script); dllm runs no checkpoint code, so it
      changes nothing here (as ``dllm.load``'s).
    """

    pretrained: str | None = None
    revision: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    prepack: bool = False
    quantize: str | None = None
    batch_size: int = 1
    mc_num: int = 128
    greedy_check: bool = True
    save_dir: str | None = None
    add_bos_token: bool = False
    max_batch_size: int | None = None
    tensor_parallel: int = 1
    adapter: str | None = None
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, str) and self.batch_size.startswith("auto"):
            raise ValueError("batch_size=auto is not supported by the dllm model; pass --batch_size N")
        for name, annotation in field_types(EvalOptions).items():
            setattr(self, name, check_value(getattr(self, name), annotation, f"model_args {name}"))
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.mc_num < 1:
            raise ValueError(f"mc_num must be >= 1 Monte-Carlo sample, got {self.mc_num}")
        if self.tensor_parallel < 1:
            raise ValueError(f"tensor_parallel must be >= 1 process, got {self.tensor_parallel}")


def merge_flags(args: dict[str, Any], flags: dict[str, Any] | None) -> dict[str, Any]:
    """``--model_args`` with what lm-eval passes from its own flags (``--batch_size``,
    ``--max_batch_size``, ``--device``; None: not given) as keywords of the same names. A key
    given both ways must agree (lm-eval's own merge is a Python "got multiple values" error),
    except the unnamed device ("auto", as ``python -m dllm.eval`` sets it): the model arg names it."""
    merged = dict(args)
    for key, value in (flags or {}).items():
        if value is None or (key == "device" and value == "auto" and key in merged):
            continue
        if key in merged and str(merged[key]) != str(value):
            raise ValueError(f"{key}={merged[key]} in --model_args but --{key} {value}; "
                             f"give it once: --{key} {merged[key]}")
        merged[key] = merged.get(key, value)
    return merged


def _option_names(registry, name: str) -> set[str]:
    cls = registry.get(name)
    if cls is None or not dataclasses.is_dataclass(cls):
        return set()
    return {f.name for f in dataclasses.fields(cls) if f.init}


def parse_model_args(args: dict[str, Any]) -> tuple[EvalOptions, GenerationConfig]:
    """Split lm-eval's model_args into EvalOptions and a GenerationConfig; errors name the key."""
    eval_keys = {f.name for f in dataclasses.fields(EvalOptions)}
    config_keys = {f.name for f in dataclasses.fields(GenerationConfig)}
    eval_values = {k: v for k, v in args.items() if k in eval_keys and v is not None}
    if eval_values.get("batch_size") is not None and not isinstance(eval_values["batch_size"], int):
        text = str(eval_values["batch_size"])
        eval_values["batch_size"] = int(text) if text.isdigit() else text
    fields = {k: v for k, v in args.items() if k in config_keys - set(DICT_FIELDS)}
    nested: dict[str, dict[str, Any]] = {name: {} for name in DICT_FIELDS}
    bare = {}
    for key, value in args.items():
        if key in eval_keys or key in fields:
            continue
        if key in DICT_FIELDS:
            if not isinstance(value, dict):
                raise ValueError(f"model_args {key}={value!r} is not a dict; name each option instead, "
                                 f"e.g. {key}.NAME=VALUE (or NAME=VALUE when only one part has it)")
            nested[key].update(value)
            continue
        prefix, _, option = key.partition(".")
        if prefix in DICT_FIELDS and option:
            nested[prefix][option] = value
        else:
            bare[key] = value
    for key, value in bare.items():
        owners = [field for field, (kind, registry) in DICT_FIELDS.items() if registry is not None
                  and key in _option_names(registry, fields.get(kind, _default(kind)))]
        if len(owners) != 1:
            known = sorted(eval_keys | config_keys - set(DICT_FIELDS))
            where = (f"it is an option of {owners}; write {owners[0]}.{key}={value}" if owners else
                     f"known keys: {known}, plus the options of the chosen policy / strategy / "
                     "stopper (bare or as policy_args.NAME, strategy_args.NAME, stopper_args.NAME) "
                     "and cache_args.NAME")
            close = [] if owners else difflib.get_close_matches(key, [*known, *_all_option_names(fields)], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown model_args key {key!r}{hint}; {where}")
        nested[owners[0]][key] = value
    options = EvalOptions(**eval_values)
    config = GenerationConfig(**fields, **{k: v for k, v in nested.items() if v})
    check_parts(config)
    return options, config


def _all_option_names(fields: dict[str, Any]) -> set[str]:
    """Every option of the chosen policy, strategy and stopper: what a bare key may name."""
    return {name for kind, registry in DICT_FIELDS.values() if registry is not None
            for name in _option_names(registry, fields.get(kind, _default(kind)))}


def _default(kind: str) -> str:
    return next(f.default for f in dataclasses.fields(GenerationConfig) if f.name == kind)


def check_parts(config: GenerationConfig) -> None:
    """Build the config's rule, strategy, stopper and cache once: a wrong option fails now."""
    check_policies(config, {"policy_args": "policy_args.<key>", "strategy_args": "strategy_args.<key>",
                            "stopper_args": "stopper_args.<key>"})
