"""On a uniform-state model only the default rule (low_confidence without options) becomes the
entropy-bound acceptance; low_confidence with options of its own is a mask-based choice, refused
with the reason rather than its options handed to another rule."""
from __future__ import annotations

import pytest

import dllm
from dllm.engine.config import GenerationConfig
from dllm.engine.uniform_state import uniform_state_config


@pytest.fixture(scope="module")
def gemma():
    return dllm.load("dllm-waitingline-gemma").model


def test_only_the_default_rule_becomes_eb_sampler(gemma):
    canvas = gemma.config.canvas_length
    assert uniform_state_config(gemma, GenerationConfig(gen_length=canvas, block_length=canvas)).policy == "eb_sampler"
    with pytest.raises(ValueError, match="policy 'low_confidence': mask-based"):
        uniform_state_config(gemma, GenerationConfig(gen_length=canvas, block_length=canvas, policy_args={"tau": 0.9}))
