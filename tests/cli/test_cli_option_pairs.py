"""Options that say one thing twice are refused before any model work: --max-tokens with
--gen-length, and two different models (the positional MODEL and --model)."""
from __future__ import annotations

import argparse

import pytest

from dllm.cli import main
from dllm.cli.options import model_of


def test_max_tokens_and_gen_length_together_are_refused(capsys):
    assert main(["generate", "hi", "--max-tokens", "8", "--gen-length", "16"]) == 2
    err = capsys.readouterr().err
    assert "pass --max-tokens 8 or --gen-length 16, not both" in err and err.count("\n") == 1, err


def test_two_different_models_are_refused_and_one_given_twice_is_it():
    with pytest.raises(ValueError, match="two models given, 'a' and --model 'b'; give one"):
        model_of(argparse.Namespace(model_tag="a", model="b"))
    assert model_of(argparse.Namespace(model_tag="a", model="a")) == "a"
    assert model_of(argparse.Namespace(model_tag=None, model="b")) == "b"
