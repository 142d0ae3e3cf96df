"""Tiny block-causal checkpoints for the prompt K/V store's tests: Fast-dLLM v2 and SDAR (blocks
from position 0) and an answer-origin model (dllm's own block-diffusion layout), with a shared
preamble and ragged tails."""
from __future__ import annotations

import json

import dllm
from dllm.models.tiny import write_tiny_checkpoint

KINDS = ("fast_dllm_v2", "sdar", "answer_origin")
PREAMBLE = [(11 * j) % 90 + 5 for j in range(21)]  # a shared "system prompt"
TAILS = [[101, 7], [3, 4, 5, 6, 7, 8, 9], [42], [60, 61, 62, 63, 64], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]]


def tiny_block_causal(directory, kind: str):
    """The loaded model (not the DiffusionLM) of ``kind``, block size 4."""
    family = "fast_dllm_v2" if kind == "answer_origin" else kind
    path = write_tiny_checkpoint(directory, family, seed=3, block_size=4)
    if kind == "answer_origin":  # blocks counted back from the answer start (dllm's bd model)
        config = json.loads((path / "config.json").read_text())
        config["dllm_block_origin"] = "answer"
        (path / "config.json").write_text(json.dumps(config))
    model = dllm.load(path).model
    assert model.attention == "block_causal"
    assert model.config.block_origin == ("answer" if kind == "answer_origin" else "absolute")
    return model
