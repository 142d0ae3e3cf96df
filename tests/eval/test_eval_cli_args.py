"""What lm-eval hands the dllm model besides ``--model_args``: ``--batch_size``, ``--device`` and
``--max_batch_size`` come as extra keywords, and a model arg of the same name must not turn into
Python's "got multiple values for keyword argument"; the model's dtype is dllm.load's default."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")
import dllm  # noqa: E402
from dllm.eval.lm_eval import DllmLM  # noqa: E402


def test_a_model_arg_that_the_flag_repeats_with_the_same_value_loads(tiny_dirs):
    args = {"pretrained": str(tiny_dirs["llada"]), "batch_size": 2, "device": "cpu"}
    lm = DllmLM.create_from_arg_obj(args, {"batch_size": 2, "max_batch_size": None, "device": "cpu"})
    assert (lm.options.batch_size, str(lm.device)) == (2, "cpu")


def test_a_model_arg_device_wins_over_the_unnamed_flag(tiny_dirs):
    # python -m dllm.eval turns an unnamed --device into "auto": the model arg is the user's word
    lm = DllmLM.create_from_arg_string(f"pretrained={tiny_dirs['llada']},device=cpu",
                                       {"batch_size": 1, "max_batch_size": None, "device": "auto"})
    assert str(lm.device) == "cpu"


@pytest.mark.parametrize("args, flags, message", [
    ({"batch_size": 4}, {"batch_size": 1}, r"batch_size=4 in --model_args but --batch_size 1; give it once: --batch_size 4"),
    ({"device": "cpu"}, {"device": "cuda:0"}, r"device=cpu in --model_args but --device cuda:0; give it once: --device cpu"),
])
def test_a_model_arg_that_the_flag_contradicts_is_named_before_loading(tiny_dirs, args, flags, message):
    with pytest.raises(ValueError, match=message):
        DllmLM.create_from_arg_obj({"pretrained": "no/such-model", **args}, {"max_batch_size": None, **flags})


def test_the_default_dtype_is_dllm_loads(tiny_dirs, tmp_path):
    """A checkpoint saved in bfloat16 loads in bfloat16, as dllm.load(path) loads it (float32 was
    forced: an 8B model took twice the memory on a GPU unless dtype= was given)."""
    import shutil

    path = tmp_path / "bf16"
    shutil.copytree(tiny_dirs["llada"], path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    expected = dllm.load(path, device="cpu").model.dtype
    lm = DllmLM(pretrained=str(path), device="cpu")
    assert str(expected) == "torch.bfloat16" and lm.model.dtype == expected


def test_lm_evals_trust_remote_code_flag_loads_the_model(tiny_dirs):
    """lm-eval's --trust_remote_code (often needed for a task's dataset script) adds
    trust_remote_code=True to the model args; the dllm model refused it as an unknown key, so
    the flag failed every run. dllm runs no checkpoint code: it loads as without the flag."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    config = EvaluatorConfig(model="dllm", model_args={"pretrained": str(tiny_dirs["llada"])}, tasks=["t"],
                             trust_remote_code=True)._set_trust_remote_code()
    assert config.model_args["trust_remote_code"] is True  # what lm-eval hands the model
    flags = {"batch_size": 1, "max_batch_size": None, "device": "cpu"}
    trusted = DllmLM.create_from_arg_obj(config.model_args, flags)
    plain = DllmLM.create_from_arg_obj({"pretrained": str(tiny_dirs["llada"])}, flags)
    ids = [trusted.tok_encode("hi")]
    assert trusted.dllm.generate_ids(ids, max_tokens=8).token_ids == plain.dllm.generate_ids(ids, max_tokens=8).token_ids
    with pytest.raises(TypeError, match=r"model_args trust_remote_code expects bool"):
        DllmLM.create_from_arg_obj({"pretrained": "no/such-model", "trust_remote_code": "maybe"}, flags)
