"""A tied LM head is the embedding itself, not a copy: the weights are held once (a 126k x 4096
LLaDA embedding is 2 GB in bfloat16), and the logits are those of a head equal to it."""
from __future__ import annotations

import json
import shutil

from dllm.models import load_model


def test_a_tied_head_shares_the_embedding_s_storage(tiny_dirs, tmp_path):
    tied = shutil.copytree(tiny_dirs["llada"], tmp_path / "tied")
    raw = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**raw, "weight_tying": True}))
    model = load_model(tied)
    assert model.lm_head.weight.data_ptr() == model.embed.weight.data_ptr()
    untied = load_model(tiny_dirs["llada"])
    assert untied.lm_head.weight.data_ptr() != untied.embed.weight.data_ptr()  # the arrangement: two tensors
