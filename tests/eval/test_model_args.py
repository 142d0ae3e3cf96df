"""lm-eval's model_args reach every GenerationConfig field with the API's checks; stop strings
and token limits mean what an lm-eval task expects of them."""
from __future__ import annotations

import pytest

from dllm.engine.config import GenerationConfig
from dllm.eval.model_args import parse_model_args
from dllm.eval.text import block_aligned_length, cut_at_stop


def test_fields_bare_options_and_prefixed_options_reach_the_config():
    options, config = parse_model_args({"pretrained": "DIR", "policy": "threshold", "tau": 0.8, "cache": "dual",
                                        "block_length": 32, "gen_length": 256, "cache_args.refresh_every": 4,
                                        "strategy": "lopa", "branches": 3, "mc_num": 16, "batch_size": "8"})
    assert (options.pretrained, options.mc_num, options.batch_size) == ("DIR", 16, 8)
    assert config.policy_args == {"tau": 0.8} and config.cache_args == {"refresh_every": 4}
    assert config.strategy_args == {"branches": 3}
    assert (config.gen_length, config.block_length, config.cache) == (256, 32, "dual")
    _, same = parse_model_args({"policy": "threshold", "policy_args.tau": 0.8})
    assert same.policy_args == {"tau": 0.8}
    _, nested = parse_model_args({"policy": "threshold", "policy_args": {"tau": 0.8}})  # lm-eval's JSON form
    assert nested.policy_args == {"tau": 0.8}
    with_adapter, _ = parse_model_args({"pretrained": "BASE", "adapter": "LORA"})  # a D2F student
    assert (with_adapter.pretrained, with_adapter.adapter) == ("BASE", "LORA")


def test_every_generation_config_field_is_a_model_arg():
    import dataclasses

    for f in dataclasses.fields(GenerationConfig):
        if f.name.endswith("_args"):
            continue
        with pytest.raises((TypeError, ValueError), match=f.name):  # each is read and checked by type
            parse_model_args({f.name: object()})


@pytest.mark.parametrize("args, message", [
    ({"gen_length": 100, "block_length": 32}, "not a multiple of block_length"),
    ({"gen_length": 8.5}, "gen_length"),
    ({"gamma": 0.9}, "unknown model_args key 'gamma'"),  # the default rule has no gamma
    ({"policy": "threshold", "tau": "high"}, "tau"),
    ({"policy": "nope"}, "unknown unmasking rule"),
    ({"cache": "dual", "cache_args.refresh_every": 0}, "refresh_every"),
    ({"colour": 1}, "known keys"),
    # low_confidence and sched both declare schedule: a bare one is refused, naming the prefix
    ({"stopper": "sched", "schedule": "linear"}, r"it is an option of \['policy_args', 'stopper_args'\]; write "
                                                 "policy_args.schedule=linear"),
    ({"policy_args": 3}, "not a dict"),
    ({"batch_size": "auto"}, "batch_size=auto"),
    ({"mc_num": 0}, "mc_num"),
    ({"greedy_check": "yes"}, "greedy_check"),
])
def test_bad_model_args_name_the_key_and_the_fix(args, message):
    with pytest.raises(ValueError, match=message):
        parse_model_args(args)


def test_stop_strings_cut_at_the_first_occurrence_of_any():
    assert cut_at_stop("a b\n\nQuestion: c", ["Question:", "\n\n"]) == "a b"
    assert cut_at_stop("a b Question: c\n\n", ["\n\n", "Question:"]) == "a b "
    assert cut_at_stop("abc", "b") == "a"
    assert cut_at_stop("abc", None) == "abc" and cut_at_stop("abc", ["", "z"]) == "abc"
    with pytest.raises(TypeError, match="stop strings"):
        cut_at_stop("abc", [3])


def test_token_limits_round_up_to_whole_blocks():
    assert block_aligned_length(256, 32) == 256
    assert block_aligned_length(100, 32) == 128
    assert block_aligned_length(1, 32) == 32
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_gen_toks"):
            block_aligned_length(bad, 32)


def test_output_path_becomes_the_records_folder_unless_one_is_given():
    from dllm.eval.__main__ import _with_save_dir

    argv = ["--model", "dllm", "--output_path", "OUT", "--tasks", "gsm8k"]
    assert _with_save_dir(argv) == [*argv, "--model_args", "save_dir=OUT"]
    assert _with_save_dir(["--output_path=OUT"])[-1] == "save_dir=OUT"
    given = ["--model_args", "save_dir=MINE", "--output_path", "OUT"]
    assert _with_save_dir(given) == given
    assert _with_save_dir(["--tasks", "gsm8k"]) == ["--tasks", "gsm8k"]
    as_json = ["--model_args", '{"pretrained": "m", "save_dir": "MINE"}', "--output_path", "OUT"]  # lm-eval reads JSON too
    assert _with_save_dir(as_json) == as_json
