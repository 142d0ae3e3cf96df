"""Build a config's rule, strategy, stopper and cache once, so a bad name or option is an error
before any model work (the CLI, the server)."""
from __future__ import annotations

from dllm.engine.config import GenerationConfig


class PolicyOptionError(ValueError):
    """A strategy, rule or stopper refused its name or options; ``field`` is the config field
    they came from ("policy_args", ...), so a server can say which request field is at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_policies(config: GenerationConfig, flags: dict[str, str] | None = None) -> None:
    """Raise ValueError naming the option at fault (``flags`` maps a field such as
    "policy_args" to the name the user typed, e.g. "--policy-arg")."""
    from dllm.cache import make_cache
    from dllm.samplers import RULES, STOPPERS, STRATEGIES, make_rule, make_stopper, make_strategy

    flags = flags or {}
    built = [_build(make_strategy, STRATEGIES, config.strategy, config.strategy_args, "strategy", flags),
             _build(make_rule, RULES, config.policy, config.policy_args, "policy", flags),
             _build(make_stopper, STOPPERS, config.stopper, config.stopper_args, "stopper", flags)]
    make_cache(config.cache, **config.cache_options())
    if config.block_add_threshold is not None:  # the pipeline's semi-active blocks need the threshold
        from dllm.engine.pipeline import check_pipeline_rule

        check_pipeline_rule(built[1], config.policy)
    for part in built:
        check = getattr(part, "check_config", None)
        if check is not None:
            check(config)


def _build(make, known: dict, name: str, options: dict, kind: str, flags: dict[str, str]):
    """``make(name, options)``; a refusal is a ``PolicyOptionError`` of its field (``kind`` for an
    unknown name, else ``kind + "_args"``), and a value of the wrong type (``tau="high"``) one
    naming the option, so every caller reports it as bad input."""
    field = kind if name not in known else f"{kind}_args"
    try:
        return make(name, options)
    except TypeError as err:
        raise PolicyOptionError(f"{name!r}: an option has a value of the wrong type ({err}); check "
                                f"{flags.get(field, field)} {options}", field) from err
    except PolicyOptionError:
        raise
    except ValueError as err:
        raise PolicyOptionError(str(err), field) from err
