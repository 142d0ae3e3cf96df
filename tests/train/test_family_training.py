"""Training the other layouts: block-diffusion masks, weights carried over from another family,
and a fast_dllm_v2 run that loads back as a block-causal checkpoint."""
from __future__ import annotations

import json

import torch

import dllm
from dllm.api.model import default_model_path
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


def test_llada2_moe_run_writes_a_block_causal_moe_checkpoint_that_generates(tmp_path):
    data = require_data()
    out = tmp_path / "moe"
    main(["--out", str(out), "--data", str(data), "--family", "llada2_moe",
          "--tokenizer", str(default_model_path()), "--init-weights", str(default_model_path()),
          "--n-experts", "8", "--top-k", "2", "--expert-hidden", "16", "--expert-bias-rate", "0.01",
          "--steps", "2", "--batch-size", "4", "--eval-every", "2", "--heldout-per-task", "1",
          "--tasks", "waiting_line/copy", "--threads", "1"])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llada2_moe" and config["architectures"] == ["LLaDA2MoeModelLM"]
    assert (config["num_experts"], config["num_experts_per_tok"], config["num_shared_experts"],
            config["first_k_dense_replace"]) == (8, 2, 1, 1)
    assert config["dllm_block_origin"] == "answer" and "auto_map" not in config
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        bias = f.get_tensor("model.layers.1.mlp.gate.expert_bias")
    assert "model.layers.0.mlp.gate_proj.weight" in names, "layer 0 stays dense"
    assert "model.layers.3.mlp.experts.7.down_proj.weight" in names
    assert "model.layers.1.attention.query_key_value.weight" in names
    assert bias.abs().sum() > 0, "the balance update moved the selection bias"
    lm = dllm.load(out)
    assert lm.model.attention == "block_causal" and not lm.model.shift_logits
    assert lm.model.config.block_size == 32 and lm.model.config.block_origin == "answer"
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    shares = log[-1]["expert_load"]
    assert len(shares) == 3 and all(abs(sum(v) - 1) < 1e-5 and len(v) == 8 for v in shares.values())
    text = lm.generate("Copy: [\"Ann Lee\"]", gen_length=32, steps=32).texts[0]
    assert isinstance(text, str)


def test_init_from_a_dense_model_upcycles_its_mlp_into_the_experts():
    from dllm.models.registry import family_for
    from dllm.models.tiny_formats import llada2_config
    from dllm.models.transformer import DiffusionTransformer

    source = load_model(default_model_path(), dtype=torch.float32)
    raw = llada2_config({"mask_token": 1, "eos_token": 0, "pad_token": 0}, d_model=128, n_layers=4, n_heads=4,
                        n_kv_heads=4, mlp_hidden=384, vocab=source.config.vocab_size, max_len=512,
                        n_experts=8, top_k=2, expert_hidden=32)
    raw["partial_rotary_factor"] = 1.0
    raw["rotary_dim"] = 32
    model = DiffusionTransformer(family_for("llada2_moe").parse_config(raw))
    fresh: list[str] = []
    assert init_from_checkpoint(model, default_model_path(), fresh) == []
    assert "layers.1.mlp.router.weight" in fresh and "layers.0.attn.q_norm.weight" in fresh
    dense, moe = source.layers[2].mlp, model.layers[2].mlp
    assert torch.equal(moe.gate_proj[3], dense.gate_proj.weight[96:128])
    assert torch.equal(moe.down_proj[7], dense.down_proj.weight[:, 224:256])
    assert torch.equal(moe.shared.up_proj.weight, dense.up_proj.weight[256:288])
    assert torch.equal(model.layers[0].mlp.up_proj.weight, source.layers[0].mlp.up_proj.weight)
    assert torch.equal(model.layers[1].attn.q_proj.weight, source.layers[1].attn.q_proj.weight)
