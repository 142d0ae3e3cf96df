"""Training the other layouts: block-diffusion masks, weights carried over from another family,
and a fast_dllm_v2 run that loads back as a block-causal checkpoint."""
from __future__ import annotations

import json

import torch

import dllm
from dllm.api import default_model_path
from dllm.models.loading import load_model
from dllm.train.init_from import init_from_checkpoint
from dllm.train.objectives import block_diffusion_masks
from dllm.train.train_small import main
from tests.pb_data import require_data


def test_block_diffusion_masks_are_complementary_inside_one_block():
    gen = torch.Generator().manual_seed(0)
    P, bd = 5, 4
    answer = torch.zeros(6, 5 + 16, dtype=torch.bool)
    answer[:3, P:P + 16] = True
    answer[3:, P:P + 8] = True  # shorter answers: right-padded
    masks = block_diffusion_masks(answer, P, bd, gen)
    first, second = masks.chunk(2)
    assert not (first & second).any()
    union = first | second
    for row in range(6):
        cols = union[row].nonzero().flatten()
        assert len(cols) == bd, "one whole block is covered by the pair"
        lo = int(cols[0])
        assert (lo - P) % bd == 0 and answer[row, lo:lo + bd].all(), "the block is an answer block"
        assert torch.equal(cols, torch.arange(lo, lo + bd))


def test_init_from_another_family_pools_kv_heads_and_zeroes_biases(tmp_path):
    from dllm.models.registry import family_for
    from dllm.models.transformer import DiffusionTransformer

    source = load_model(default_model_path(), dtype=torch.float32)
    raw = {"model_type": "Dream", "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 384, "vocab_size": source.config.vocab_size,
           "mask_token_id": source.mask_token_id, "eos_token_id": 0}
    model = DiffusionTransformer(family_for("Dream").parse_config(raw))
    zeroed = init_from_checkpoint(model, default_model_path())
    assert len(zeroed) == 3 * 4 and all(not model.get_parameter(n).any() for n in zeroed)
    k_src = source.layers[1].attn.k_proj.weight.reshape(2, 2, 32, 128)
    assert torch.equal(model.layers[1].attn.k_proj.weight, k_src.mean(1).reshape(64, 128))
    assert torch.equal(model.layers[2].mlp.up_proj.weight, source.layers[2].mlp.up_proj.weight)


def test_block_diffusion_run_writes_a_block_causal_checkpoint(tmp_path):
    data = require_data()
    out = tmp_path / "bd"
    main(["--out", str(out), "--data", str(data), "--family", "fast_dllm_v2", "--bd-size", "8",
          "--tokenizer", str(default_model_path()), "--init-weights", str(default_model_path()),
          "--steps", "2", "--batch-size", "4", "--eval-every", "2", "--heldout-per-task", "1",
          "--tasks", "waiting_line/copy", "--threads", "1"])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "Fast_dLLM_Qwen" and config["bd_size"] == 8
    lm = dllm.load(out)
    assert lm.model.attention == "block_causal" and lm.model.shift_logits
    assert lm.model.config.block_size == 8
