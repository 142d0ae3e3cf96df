"""``dllm chat``'s settings: what ``/set`` changes and ``/show`` prints.

``/set`` takes the command line's names with dashes or underscores (``block-length=8``,
``--block-length=8``, ``block_length=8``), dotted keys into an option dict
(``policy_args.tau=0.5``), values as JSON when they parse (spaces inside JSON are fine:
``policy_args={"tau": 0.5}``) and ``max-tokens`` as on the command line. A change is checked
whole (the config it makes, its rule, strategy, stopper and cache) before it is kept.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dllm.api.request import OutputRequest, canvas_length, merge_config
from dllm.cli.options import parse_kv
from dllm.cli.parser import did_you_mean
from dllm.engine.config import GenerationConfig

FIELDS = tuple(f.name for f in dataclasses.fields(GenerationConfig))
ALIASES = {"policy_arg": "policy_args", "strategy_arg": "strategy_args", "stopper_arg": "stopper_args",
           "cache_arg": "cache_args"}  # the command line's repeatable K=V options
SET_EXAMPLES = "e.g. /set temperature=0.7, /set block-length=8, /set policy_args.tau=0.5"


def split_settings(text: str) -> list[str]:
    """``text`` split at whitespace outside quotes and brackets, so a JSON value may hold spaces:
    ``'a=1 b={"x": 1}'`` -> ``['a=1', 'b={"x": 1}']``."""
    parts, current, depth, quote, escaped = [], [], 0, None, False
    for ch in text:
        if quote is not None:  # inside a quoted string: only its closing quote matters
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth = max(depth - 1, 0)
        elif ch.isspace() and depth == 0:
            if current:
                parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


def setting_name(key: str) -> str:
    """A typed key as the config names it: ``--block-length`` -> ``block_length``."""
    name = key.strip().lstrip("-").replace("-", "_")
    head, dot, rest = name.partition(".")
    return ALIASES.get(head, head) + dot + rest


@dataclass(frozen=True)
class ChatSettings:
    """The command line's config, the options ``/set`` put on top of it and ``max_tokens``;
    ``model``: the DiffusionTransformer that decodes it (a uniform-state model's canvas block
    stays its block as max_tokens changes; ``merge_config``). ``default_block``: the block when
    no option sets one (``dllm chat``: the server's ``DEFAULT_BLOCK_LENGTH``, so an answer that
    ends early stops after its block), where it fits the turn's canvas, steps and sub-blocks;
    None, or where it does not fit: one block of the answer, as ``generate``."""

    base: GenerationConfig
    options: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    model: Any = None
    default_block: int | None = None

    def config(self) -> GenerationConfig:
        if self.default_block is not None and "block_length" not in self.options and canvas_length(self.model) is None:
            try:  # a canvas, steps budget or sub-block that 32 does not divide keeps one block (below)
                return merge_config(self.base, {**self.options, "block_length": self.default_block}, self.max_tokens,
                                    model=self.model)
            except ValueError:
                pass
        return merge_config(self.base, self.options, self.max_tokens, model=self.model)

    def updated(self, text: str) -> "ChatSettings":
        """The settings with ``/set``'s ``text`` applied; ValueError (self unchanged) when it is
        malformed or makes a config that cannot decode."""
        from dllm.engine.policies import check_policies

        pairs = split_settings(text)
        malformed = [p for p in pairs if "=" not in p]
        if not pairs or malformed:
            raise ValueError(f"expected key=value, got {(malformed or [text])[0]!r} ({SET_EXAMPLES})")
        options, max_tokens = dict(self.options), self.max_tokens
        for key, value in parse_kv(pairs).items():
            name, _, sub = setting_name(key).partition(".")
            if name == "max_tokens":  # the answer length instead of gen_length, as on the command line
                max_tokens = value
                options.pop("gen_length", None)
                continue
            if name not in FIELDS:
                raise ValueError(f"unknown generation option {key!r}{did_you_mean(name, (*FIELDS, 'max_tokens'))}; "
                                 "/show lists them")
            if name == "gen_length":
                max_tokens = None
            if sub:
                current = options.get(name, getattr(self.base, name))
                if not isinstance(current, dict):
                    raise ValueError(f"{name} is not a dict of options; set it whole: /set {name}=VALUE")
                value = {**current, sub: value}
            options[name] = value
        OutputRequest.parse(max_tokens=max_tokens)  # a positive int or null
        new = ChatSettings(self.base, options, max_tokens, self.model, self.default_block)
        check_policies(new.config())
        if self.model is not None:  # what the model itself refuses: now, not at the next turn
            from dllm.engine.model_fit import check_model_fit

            check_model_fit(self.model, new.config())
        return new

    def length_setting(self) -> str:
        """What sets the answer's length, as typed at ``/set``: ``max-tokens=N`` or ``gen-length=N``."""
        if self.max_tokens is not None:
            return f"max-tokens={self.max_tokens}"
        return f"gen-length={self.config().gen_length}"

    def show(self, width: int = 100) -> str:
        """Every setting of the next turn, ``name=value``, wrapped at ``width``."""
        config = self.config()
        items = [f"max_tokens={self.max_tokens}"] + [f"{name}={getattr(config, name)!r}" for name in FIELDS]
        lines = [""]
        for item in items:
            if lines[-1] and len(lines[-1]) + 2 + len(item) > width:
                lines.append(item)
            else:
                lines[-1] = f"{lines[-1]}  {item}" if lines[-1] else item
        return "\n".join(lines)
