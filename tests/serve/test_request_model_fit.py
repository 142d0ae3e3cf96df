"""Requests a model cannot decode are a 400 naming the field, before any model work: options the
model refuses (mask-based options on the uniform-state model, the uniform-state ones on a
mask-based model, a block length that is not the canvas, a strategy whose helper the server did
not load, a step budget the block-causal windows cannot split) used to reach the scheduler and
come back as a 500 "internal error" from the decode's first batch."""
from __future__ import annotations

import httpx
import pytest

import dllm
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import RequestError, ServerDefaults, parse_request
from serve_helpers import RecordingScheduler, running_server

MESSAGES = [{"role": "user", "content": "Who waits first?"}]


@pytest.fixture(scope="module")
def gemma():
    return dllm.load("dllm-waitingline-gemma")


@pytest.fixture(scope="module")
def llada():
    return dllm.load()


def refusal(model, body, chat=False) -> RequestError:
    prompt = {"messages": MESSAGES} if chat else {"prompt": "Alice waits"}
    with pytest.raises(RequestError) as err:
        parse_request({**prompt, "max_tokens": 8, **body}, model, ServerDefaults(), chat=chat, served_name="m")
    assert err.value.status == 400
    return err.value


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"temperature": 1.0}, "temperature", "t_min / t_max"),
    ({"top_p": 0.5}, "top_p", "t_min / t_max"),
    ({"strategy": "freedave"}, "strategy", "use strategy 'uniform'"),
    ({"cache": "dual"}, "cache", "use cache 'encoder'"),
    ({"stopper": "sched"}, "stopper", "stability_threshold"),
    ({"policy": "threshold"}, "policy", "eb_sampler"),
    ({"cfg_scale": 1.0}, "cfg_scale", "no mask"),
    ({"block_length": 8}, "block_length", "canvases of 32 tokens"),
])
def test_mask_based_options_on_the_uniform_state_model(gemma, body, param, words):
    err = refusal(gemma, body)
    assert param == err.param and words in str(err)


def test_echo_with_logprobs_on_the_uniform_state_model(gemma):
    """The echoed prompt's logprobs come from a forward with the answer masked: no mask token here."""
    err = refusal(gemma, {"echo": True, "logprobs": 1})
    assert err.param == "echo" and "uniform-state" in str(err)
    parse_request({"prompt": "Alice waits", "max_tokens": 8, "logprobs": 1}, gemma, ServerDefaults(), chat=False,
                  served_name="m")  # the answer's own logprobs are served


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"strategy": "uniform"}, "strategy", "mask-based"),
    ({"cache": "encoder"}, "cache", "mask-based"),
    ({"strategy": "apd"}, "strategy", "helper"),
    ({"strategy": "guided"}, "strategy", "helper"),
])
def test_options_a_mask_based_model_cannot_take(llada, body, param, words):
    err = refusal(llada, body, chat=True)
    assert err.param == param and words in str(err)


def test_steps_the_block_causal_windows_cannot_split():
    bd = dllm.load("dllm-waitingline-bd")  # blocks of 8: the server's block of 32 decodes 4 windows
    err = refusal(bd, {"steps": 6})
    assert err.param == "steps" and "steps=4" in str(err)


def test_config_errors_name_their_field(llada):
    """GenerationConfig's own refusals carry the field too (they used to have param null)."""
    assert refusal(llada, {"top_p": 0}).param == "top_p"
    assert refusal(llada, {"top_k": 0}).param == "top_k"
    assert "'none' or 'eotp'" in str(refusal(llada, {"strategy": "freedave", "logprobs": 1}))


def test_the_server_answers_400_and_decodes_nothing(gemma):
    scheduler = RecordingScheduler(gemma, SchedulerLimits(max_batch=2, max_queue=4))
    app = create_app(gemma, scheduler, defaults=ServerDefaults(max_tokens=8), served_name="m")
    try:
        with running_server(app) as url:
            for body in ({"temperature": 1.0}, {"block_length": 8}, {"echo": True, "logprobs": 1}):
                r = httpx.post(url + "/v1/completions", json={"prompt": "Alice waits", "seed": 1, **body}, timeout=60)
                assert r.status_code == 400, r.text
                error = r.json()["error"]
                assert error["type"] == "invalid_request_error" and error["param"] == next(iter(body))
            assert scheduler.submitted == []
            ok = httpx.post(url + "/v1/completions", json={"prompt": "Alice waits", "seed": 1}, timeout=60)
            assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        scheduler.close()


def test_a_uniform_state_server_decodes_blocks_of_its_canvas(tmp_path):
    """The server's block of 32 is no canvas of a model of 8-token canvases: its block is the canvas."""
    from dllm.models.tiny import write_tiny_checkpoint

    tiny = dllm.load(write_tiny_checkpoint(tmp_path / "gemma", "diffusion_gemma"), dtype="float32")
    assert tiny.model.config.canvas_length == 8
    parsed = parse_request({"prompt": "Alice waits", "max_tokens": 12}, tiny, ServerDefaults(), chat=False,
                           served_name="m")
    assert parsed.config.block_length == 8 and parsed.config.gen_length == 16
    assert refusal(tiny, {"block_length": 32}).param == "block_length"  # a block the request sets is its own


def test_server_options_the_model_refuses_stop_the_server_at_start(gemma, monkeypatch, capsys):
    """``dllm serve --model dllm-waitingline-gemma --policy threshold`` used to start and then refuse
    (or fail) every request that kept the server's options."""
    from dllm.cli.main import main
    from dllm.serve import serve_options
    from dllm.serve.requests import check_server_defaults

    with pytest.raises(ValueError, match="the server's options") as err:
        check_server_defaults(gemma, ServerDefaults(options={"policy": "threshold"}))
    assert "eb_sampler" in str(err.value)
    check_server_defaults(gemma, ServerDefaults())  # its own defaults serve

    def serve_forever(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(serve_options, "serve_forever", serve_forever)
    assert main(["serve", "--model", "dllm-waitingline-gemma", "--policy", "threshold"]) == 2
    assert "dllm serve: error: the server's options" in capsys.readouterr().err


@pytest.mark.parametrize(("body", "param"), [
    ({"policy": "threshold", "policy_args": {"tau": 2.0}}, "policy_args"),
    ({"policy": "threshold", "policy_args": {"tau": "high"}}, "policy_args"),
    ({"policy": "threshold", "policy_args": {"tua": 0.5}}, "policy_args"),
    ({"stopper": "sched", "stopper_args": {"tau": -1}}, "stopper_args"),
    ({"strategy": "freedave", "strategy_args": {"drafts": 0}}, "strategy_args"),
])
def test_a_rule_s_options_refusal_names_its_field(llada, body, param):
    """A rule, stopper or strategy refusing its options is a 400 whose param is the request's
    *_args field (the message names the option, not the field)."""
    assert refusal(llada, body).param == param


def test_an_unknown_rule_names_its_own_field(llada):
    assert refusal(llada, {"policy": "thresold", "policy_args": {"tau": 0.5}}).param == "policy"
