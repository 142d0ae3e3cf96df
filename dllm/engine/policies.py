"""Build a config's rule, strategy, stopper and cache once, so a bad name or option is an error
before any model work (the CLI, the server)."""
from __future__ import annotations

from dllm.engine.config import GenerationConfig


def check_policies(config: GenerationConfig, flags: dict[str, str] | None = None) -> None:
    """Raise ValueError naming the option at fault (``flags`` maps a field such as
    "policy_args" to the name the user typed, e.g. "--policy-arg")."""
    from dllm.cache import make_cache
    from dllm.samplers import make_rule, make_stopper, make_strategy

    flags = flags or {}
    built = [_build(make_strategy, config.strategy, config.strategy_args, flags.get("strategy_args", "strategy_args")),
             _build(make_rule, config.policy, config.policy_args, flags.get("policy_args", "policy_args")),
             _build(make_stopper, config.stopper, config.stopper_args, flags.get("stopper_args", "stopper_args"))]
    cache_options = {**config.cache_args, "block_length": config.block_length}
    if config.sub_block_length is not None:
        cache_options["sub_block_length"] = config.sub_block_length
    make_cache(config.cache, **cache_options)
    if config.block_add_threshold is not None:  # the pipeline's semi-active blocks need the threshold
        from dllm.engine.pipeline import check_pipeline_rule

        check_pipeline_rule(built[1], config.policy)
    for part in built:
        check = getattr(part, "check_config", None)
        if check is not None:
            check(config)


def _build(make, name: str, options: dict, flag: str):
    """``make(name, options)``; a value of the wrong type (``tau="high"``) becomes a ValueError
    naming the option, so every caller reports it as bad input."""
    try:
        return make(name, options)
    except TypeError as err:
        raise ValueError(f"{name!r}: an option has a value of the wrong type ({err}); check {flag} {options}") from err
