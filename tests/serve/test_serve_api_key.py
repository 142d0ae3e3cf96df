"""An empty API key is refused at start-up (issue 37): ``--api-key "$KEY"`` with KEY unset, or an
empty $DLLM_API_KEY, used to serve an open server without a word."""
from __future__ import annotations

import argparse

import pytest

import dllm.serve.cli as serve_cli
from dllm.cli.main import main
from dllm.serve.limits import API_KEY_ENV, VLLM_API_KEY_ENV
from dllm.serve.serve_options import access_settings


def args(api_key: str | None) -> argparse.Namespace:
    return argparse.Namespace(api_key=api_key, host="127.0.0.1", protect_health_metrics=False, allowed_origins=(),
                              allowed_hosts=())


@pytest.fixture
def no_model_load(monkeypatch):
    """A load fails the test: the refusal must come before the model loads."""
    def load(_args):
        raise AssertionError("the model was loaded before the API key was checked")
    monkeypatch.setattr(serve_cli, "load_from_args", load)


@pytest.mark.parametrize("env", [None, "from-env", ""])
def test_empty_api_key_option_is_refused_before_loading(env, monkeypatch, capsys, no_model_load):
    if env is None:
        monkeypatch.delenv(API_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(API_KEY_ENV, env)
    assert main(["serve", "--api-key", "", "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dllm serve: error: --api-key is empty")
    assert "non-empty key" in err[0] and f"unset {API_KEY_ENV}" in err[0]


@pytest.mark.parametrize("empty", ["", "  "])
def test_empty_env_key_is_refused_before_loading(empty, monkeypatch, capsys, no_model_load):
    monkeypatch.setenv(API_KEY_ENV, empty)
    assert main(["serve", "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"dllm serve: error: ${API_KEY_ENV} is empty")


def test_given_keys_are_used(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "env-key")
    assert access_settings(args(None)).api_key == "env-key"
    assert access_settings(args("cli-key")).api_key == "cli-key"  # the option wins over the variable
    monkeypatch.setenv(API_KEY_ENV, "")
    assert access_settings(args("cli-key")).api_key == "cli-key"  # an empty variable under a given key is unused
    monkeypatch.delenv(API_KEY_ENV)
    assert access_settings(args(None)).api_key is None  # neither: no authentication (loopback only by default)


def test_vllm_api_key_is_read_after_ours(monkeypatch, capsys, no_model_load):
    """A server moved from vLLM keeps the key its clients send (it served them open before)."""
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.setenv(VLLM_API_KEY_ENV, "vllm-key")
    assert access_settings(args(None)).api_key == "vllm-key"
    assert access_settings(args("cli-key")).api_key == "cli-key"
    monkeypatch.setenv(API_KEY_ENV, "dllm-key")
    assert access_settings(args(None)).api_key == "dllm-key"
    monkeypatch.delenv(API_KEY_ENV)
    monkeypatch.setenv(VLLM_API_KEY_ENV, "")
    assert main(["serve", "--port", "1"]) == 2
    assert capsys.readouterr().err.startswith(f"dllm serve: error: ${VLLM_API_KEY_ENV} is empty")
