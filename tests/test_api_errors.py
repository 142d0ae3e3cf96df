"""Bad input to the Python API fails before any model work, naming what to change."""
from __future__ import annotations

import math

import pytest

import dllm
from dllm.validation import OptionTypeError


@pytest.fixture(scope="module")
def model(tiny_models):
    return tiny_models["llada"]


@pytest.mark.parametrize("prompts,match", [
    (None, r"prompts must be a string, a list of chat messages .* got NoneType"),
    (5, r"prompts must be a string, a list of chat messages .* got int"),
    (b"hi", r"prompts are bytes; decode them to str first"),
    (["ok", 3], r"prompt 1 is int; each prompt must be a string or a list of chat messages"),
    ([], "no prompts given"),
])
def test_prompts_of_the_wrong_type(model, prompts, match):
    with pytest.raises((TypeError, ValueError), match=match):
        model.generate(prompts, gen_length=8)


@pytest.mark.parametrize("messages,match", [
    ([{"content": "hi"}], r"prompt 0, message 0 has no 'role'"),
    ([{"role": "user"}], r"prompt 0, message 0 has no 'content'"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
     r"prompt 0, message 1: 'content' must be a string, got NoneType"),
    ([{"role": "user", "content": "hi"}, "and then"], r"prompt 0, message 1 is str"),
])
def test_chat_messages_need_role_and_content(model, messages, match):
    with pytest.raises((TypeError, ValueError), match=match):
        model.generate(messages, gen_length=8)
    with pytest.raises((TypeError, ValueError), match=match.replace("prompt 0", "prompt 1")):
        model.generate(["first", messages], gen_length=8)


def test_chat_messages_with_chat_false_are_refused_not_templated(model):
    """chat=False means "no template"; messages cannot be read without one, so the call names the
    two ways out instead of applying the template anyway."""
    with pytest.raises(ValueError, match=r"chat=False .* chat messages, .* pass the text as a string, or drop chat=False"):
        model.generate([{"role": "user", "content": "hi"}], chat=False, gen_length=8)


@pytest.mark.parametrize("config", [None, dllm.GenerationConfig(gen_length=8)])
def test_unknown_keyword_is_named_with_or_without_a_config(model, config):
    with pytest.raises(ValueError, match=r"unknown generation option\(s\) \['gen_lenght'\]; known: .*gen_length"):
        model.generate("hi", config, gen_lenght=8)


@pytest.mark.parametrize("keyword, meant", [("gen_lenght", "gen_length"), ("temprature", "temperature"),
                                            ("max_new_tokens", "max_tokens"), ("max_length", "max_tokens"),
                                            ("num_return_sequences", "n"), ("stop_sequences", "stop"),
                                            ("generation_config", "config")])
def test_an_unknown_keyword_is_told_the_one_meant(model, keyword, meant):
    """transformers' and vLLM's names, and typos, get the keyword generate takes (max_tokens, n
    and stop are no GenerationConfig fields, so the list of known fields alone never named them)."""
    with pytest.raises(ValueError, match=rf"\(did you mean {meant!r}\?\)$"):
        model.generate("hi", **{keyword: 8})


def test_config_of_the_wrong_type(model):
    with pytest.raises(TypeError, match="config must be a dllm.GenerationConfig, got int; pass generation options as keywords"):
        model.generate("hi", 32)
    import transformers  # its class has dllm's name: "must be a dllm.GenerationConfig, got GenerationConfig"

    with pytest.raises(TypeError, match=r"must be a dllm.GenerationConfig, got transformers.GenerationConfig; pass"):
        model.generate("hi", transformers.GenerationConfig(max_new_tokens=8))
    with pytest.raises(TypeError, match="chat must be True, False or None"):
        model.generate("hi", gen_length=8, chat="yes")


@pytest.mark.parametrize("ids,match", [
    ([[1, 10_000]], r"prompt 0, token 1 is id 10000, outside the model's vocabulary \[0, 300\)"),
    ([[1], [2, -1]], r"prompt 1, token 1 is id -1, outside the model's vocabulary"),
    ([[1.7, 2]], r"prompt 0, token 0 is 1.7 \(float\); token ids are ints"),
    ([[True, 2]], r"prompt 0, token 0 is True \(bool\)"),
    ([1, 2, 3], r"token ids must be a list of prompts, each a list of int ids.* prompt 0 is int"),
    # a row of another type is named (the list around it was blamed: "... got list")
    ([[1, 2], __import__("torch").tensor([1, 2])], r"ids\.tolist\(\)\); prompt 1 is Tensor$"),
])
def test_bad_token_ids(model, ids, match):
    with pytest.raises((TypeError, ValueError), match=match):
        model.generate_ids(ids, dllm.GenerationConfig(gen_length=8))


def test_generate_ids_takes_options_like_generate(model):
    ids = [model.encode("hello")]
    with_config = model.generate_ids(ids, dllm.GenerationConfig(gen_length=8))
    assert model.generate_ids(ids, gen_length=8).token_ids == with_config.token_ids


INT_FIELDS = ["gen_length", "block_length", "steps", "sub_block_length", "top_k", "seed"]
FLOAT_FIELDS = ["temperature", "top_p", "cfg_scale", "memory_budget_mb"]


@pytest.mark.parametrize("name", INT_FIELDS)
@pytest.mark.parametrize("value", [8.0, True, "8"])
def test_int_fields_refuse_floats_bools_and_strings(name, value):
    with pytest.raises(TypeError, match=rf"GenerationConfig.{name} expects int.*, got {value!r} \({type(value).__name__}\)"):
        dllm.GenerationConfig(**{"gen_length": 8, name: value})


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_float_fields_refuse_nan_and_inf(name, value):
    with pytest.raises(ValueError, match=rf"GenerationConfig.{name} must be a finite number, got {value!r}"):
        dllm.GenerationConfig(gen_length=8, **{name: value})


@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_float_fields_refuse_strings_and_accept_ints(name):
    with pytest.raises(TypeError, match=rf"GenerationConfig.{name} expects float"):
        dllm.GenerationConfig(gen_length=8, **{name: "0.5"})
    value = 1
    config = dllm.GenerationConfig(gen_length=8, **{name: value})
    assert getattr(config, name) == 1.0 and isinstance(getattr(config, name), float)


@pytest.mark.parametrize("kwargs,match", [
    ({"seed": -1}, r"seed must be in \[0, 2\*\*63\), got -1"),
    ({"seed": 2**64}, r"seed must be in \[0, 2\*\*63\)"),
    ({"stop_at_eos": "no"}, r"GenerationConfig.stop_at_eos expects bool, got 'no'"),
    ({"policy": None}, r"GenerationConfig.policy expects str, got None"),
    ({"policy_args": [("tau", 0.5)]}, r"GenerationConfig.policy_args expects a dict"),
    ({"cache_args": {1: 2}}, r"GenerationConfig.cache_args expects a dict"),
    ({"block_length": 0}, r"block_length must be positive, got 0"),  # not "gen_length=8 is not a multiple of 0"
    # meaningful only pipelined, yet a value no run can use is named with the pipeline off too
    ({"decoded_token_threshold": 2.0}, r"decoded_token_threshold must be a decoded share in \[0, 1\], got 2.0"),
])
def test_other_wrong_generation_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dllm.GenerationConfig(gen_length=8, **kwargs)


def test_nan_temperature_no_longer_decodes_as_argmax(model):
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        model.generate("hi", gen_length=8, temperature=float("nan"))


def test_load_names_what_a_path_must_be(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE=1 forbids downloading. Fetch it .* download "
                                                "GSAI-ML/LLaDA-8B-Instruct"):
        dllm.load("GSAI-ML/LLaDA-8B-Instruct")
    with pytest.raises(FileNotFoundError, match="does not exist, is not a bundled model's name .* not a Hugging Face"):
        dllm.load("no/such/dir")
    with pytest.raises(TypeError, match="path must be a checkpoint directory, a bundled model.s name or a hub id .*got int"):
        dllm.load(8)


def test_a_prompt_past_the_context_names_max_tokens_when_it_set_the_length(model):
    """The fix offered is the option the caller gave: max_tokens (with its rounding to whole blocks
    and the largest value that fits), not gen_length, which the caller never passed."""
    context = model.model.config.max_sequence_length
    prompt = [5] * 10
    with pytest.raises(ValueError, match=rf"prompt 0 has 10 tokens \+ max_tokens {context} = {context + 10} > the "
                                         rf"model's context of {context}; shorten the prompt or lower max_tokens to {context - 10}$"):
        model.generate_ids([prompt], max_tokens=context)
    asked = context - 13  # rounded up to whole blocks of 8: past the context by the rounding alone
    rounded, fits = -(-asked // 8) * 8, (context - 10) // 8 * 8
    with pytest.raises(ValueError, match=rf"max_tokens {asked} \(rounded up to {rounded}, whole blocks of 8\) = "
                                         rf"{rounded + 10} > .* lower max_tokens to {fits}$"):
        model.generate_ids([prompt], max_tokens=asked, block_length=8)
    with pytest.raises(ValueError, match=r"lower max_tokens to"):
        next(model.stream(model.tokenizer.decode(prompt), max_tokens=context, chat=False))
    with pytest.raises(ValueError, match=rf"\+ gen_length {context} = .* shorten the prompt or lower gen_length$"):
        model.generate_ids([prompt], gen_length=context)


@pytest.mark.parametrize("value", [True, False])
def test_do_sample_is_told_the_temperature_that_means_it(model, value):
    """transformers' do_sample was offered 'compile', its nearest spelling."""
    with pytest.raises(ValueError, match=r"\['do_sample'\].*do_sample=True is temperature=1\.0 .*do_sample=False "
                                         r"the default temperature=0 \(argmax\)\)$"):
        model.generate("hi", max_tokens=8, do_sample=value)


@pytest.mark.parametrize("keyword", ["min_tokens", "min_p", "repetition_penalty", "ignore_eos"])
def test_an_option_with_no_counterpart_is_not_corrected_to_another_meaning(model, keyword):
    """vLLM's min_tokens was told "did you mean 'max_tokens'?", the opposite bound."""
    with pytest.raises(ValueError, match=rf"\[{keyword!r}\].*\(another library's option, which dllm has no "
                                         r"counterpart for\)$") as err:
        model.generate("hi", max_tokens=8, **{keyword: 1})
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize("keyword, value, fix", [
    ("seeds", [1], r"pass seed=N \(generate takes seeds, one per prompt\)"),
    ("n", 2, r"call it once per seed \(seed=N\), or use generate\(n=\.\.\.\)"),
    ("echo", True, r"put the prompt before it, or use generate\(echo=True\)"),
])
def test_stream_names_what_it_takes_instead_of_generates_batch_keywords(model, keyword, value, fix):
    """stream(seeds=[1]) was told "unknown generation option(s) ['seeds'] (did you mean 'seeds'?)"."""
    with pytest.raises(ValueError, match=rf"^stream does not take {keyword}: .*{fix}$"):
        model.stream("hi", max_tokens=8, **{keyword: value})


@pytest.mark.parametrize("prompts", [[[1, 2, 3]], [[1, 2], [3]], [1, 2, 3]])
def test_token_ids_given_to_generate_name_generate_ids(model, prompts):
    with pytest.raises(TypeError, match=r"these are token ids, which model\.generate_ids\(\[\[id, \.\.\.\], \.\.\.\]\) takes"):
        model.generate(prompts, max_tokens=8)
    with pytest.raises(TypeError, match=r"model\.generate_ids"):
        model.stream(prompts, max_tokens=8)


def test_an_empty_message_list_is_named_as_one(model):
    with pytest.raises(ValueError, match=r"prompt 1 is an empty list; a chat prompt needs at least one message"):
        model.generate(["hi", []], max_tokens=8)


@pytest.mark.parametrize("keyword, value, meant", [("torch_dtype", "bfloat16", "dtype"), ("device_map", "auto", "device"),
                                                   ("pretrained_model_name_or_path", "x", "path"),
                                                   ("devcie", "cpu", "device")])
def test_load_names_its_keyword_for_transformers_ones_before_reading_files(keyword, value, meant):
    """from_pretrained's keywords were Python's bare "unexpected keyword argument"; the path
    does not exist, so only a check made before any file is read can answer."""
    with pytest.raises(TypeError, match=rf"load\(\) got unknown keyword\(s\) \[{keyword!r}\]; known: .*'dtype'.*"
                                        rf"\(did you mean {meant!r}\?\)$"):
        dllm.load("no/such-dir", **{keyword: value})


def test_trust_remote_code_is_taken_and_changes_nothing(tiny_dirs):
    """dllm runs no checkpoint code: True loads the model False loads, bit for bit."""
    trusted = dllm.load(tiny_dirs["llada"], device="cpu", trust_remote_code=True)
    plain = dllm.load(tiny_dirs["llada"], device="cpu")
    ids = [trusted.encode("hi", chat=False)]
    assert trusted.generate_ids(ids, max_tokens=8).token_ids == plain.generate_ids(ids, max_tokens=8).token_ids
    with pytest.raises(TypeError, match=r"trust_remote_code must be True or False, got 'yes'"):
        dllm.load("no/such-dir", trust_remote_code="yes")


@pytest.mark.parametrize("config, options", [(dllm.GenerationConfig(gen_length=16, block_length=8, steps=8), {}),
                                             (None, {"block_length": 8, "steps": 8})])
def test_a_steps_budget_the_rounded_max_tokens_breaks_names_the_rounding(model, config, options):
    """max_tokens=20 in blocks of 8 is a canvas of 24 (3 blocks), which 8 steps do not divide: the
    error spoke of a gen_length of 3 blocks the caller never gave."""
    with pytest.raises(ValueError, match=r"steps=8 must be a positive multiple of the number of blocks \(3 = .*"
                                         r"\(max_tokens=20 makes the canvas gen_length=24, whole blocks of 8\)$"):
        model.generate("hi", config, max_tokens=20, **options)


def test_load_reads_a_home_relative_path_and_refuses_an_empty_one(tiny_dirs, tmp_path, monkeypatch):
    """"~/models/x" was "does not exist ... not a hub id" (the ~ read as a folder name), and ""
    loaded the working directory (Path("") is ".")."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(tiny_dirs["llada"], home / "models" / "tiny")
    monkeypatch.setenv("HOME", str(home))
    loaded = dllm.load("~/models/tiny", device="cpu")
    assert loaded.path == home / "models" / "tiny"
    ids = [loaded.encode("hi", chat=False)]
    expected = dllm.load(tiny_dirs["llada"], device="cpu").generate_ids(ids, max_tokens=8).token_ids
    assert loaded.generate_ids(ids, max_tokens=8).token_ids == expected
    monkeypatch.chdir(home / "models" / "tiny")  # a checkpoint where "" would have found one
    with pytest.raises(ValueError, match="the model path is empty; pass a checkpoint directory"):
        dllm.load("")


@pytest.mark.parametrize("keyword, fix", [("max_new_tokens", "use gen_length"), ("block_size", "use block_length"),
                                          ("gen_lenght", "use gen_length"), ("do_sample", "use temperature"),
                                          ("beams", "its fields: gen_length, block_length")])
def test_generation_config_names_the_field_an_unknown_option_means(keyword, fix):
    """GenerationConfig(max_new_tokens=8) was Python's bare "unexpected keyword argument"."""
    with pytest.raises(TypeError, match=rf"^GenerationConfig has no option {keyword!r}; {fix}"):
        dllm.GenerationConfig(**{keyword: 8})


def test_generation_config_still_copies_and_pickles():
    """The check of unknown options sits in __new__: replace, copy and pickle go through it."""
    import copy
    import dataclasses
    import pickle

    config = dllm.GenerationConfig(gen_length=32, block_length=8, policy_args={"tau": 0.5})
    assert dataclasses.replace(config, steps=8).steps == 8
    assert copy.deepcopy(config) == config == pickle.loads(pickle.dumps(config))
