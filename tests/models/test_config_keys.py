"""Each family reads its settings from the config.json keys its original code reads, with that
code's defaults when a key is absent. The tiny checkpoints write most keys at their defaults, so
a setting read from another key (or a wrong default) would load them unchanged: each case here
sets or removes one key of a tiny checkpoint's config and checks the field it decides."""
from __future__ import annotations

import json

import pytest

from dllm.models.registry import family_of
from dllm.models.tiny import write_tiny_checkpoint

FAMILIES = ("llada", "dream", "fast_dllm_v2", "sdar", "llada2_moe", "llada_moe")


@pytest.fixture(scope="module")
def raws(tmp_path_factory):
    root = tmp_path_factory.mktemp("config_keys")
    return {f: json.loads((write_tiny_checkpoint(root / f, f, seed=1) / "config.json").read_text()) for f in FAMILIES}


def _parse(raws, family, drop=(), **changes):
    """The family's ArchConfig of the tiny config with ``drop`` removed and ``changes`` set."""
    raw = {k: v for k, v in raws[family].items() if k not in drop}
    raw.update(changes)
    return family_of(raw).parse_config(raw)


def _field(cfg, dotted: str):
    for name in dotted.split("."):
        cfg = getattr(cfg, name)
    return cfg


@pytest.mark.parametrize("family, changes, field, expected", [
    # LLaDA (configuration_llada.py): rms_norm_eps; rows are embedding_size (the padded vocabulary)
    ("llada", {"rms_norm_eps": 1e-3}, "rms_norm_eps", 1e-3),
    ("llada", {"vocab_size": 300, "embedding_size": 320}, "vocab_size", 320),
    ("llada", {"eos_token_id": [7, 8]}, "eos_token_ids", (7, 8)),
    # Qwen2 keys (Dream, Fast-dLLM v2)
    ("dream", {"rms_norm_eps": 1e-3}, "rms_norm_eps", 1e-3),
    ("dream", {"eos_token_id": [7, 8]}, "eos_token_ids", (7, 8)),
    ("dream", {"head_dim": 40}, "head_dim", 40),  # Qwen2Attention: config.head_dim when given
    ("dream", {"tie_word_embeddings": True}, "tie_embeddings", True),
    ("dream", {"max_position_embeddings": 777}, "max_sequence_length", 777),
    ("fast_dllm_v2", {"bd_size": 8}, "block_size", 8),
    # LLaDA2 (the Ling-MoE gate): renormalised whenever top_k > 1, whatever norm_topk_prob says;
    # the shared experts' hidden size is moe_intermediate_size times their count
    ("llada2_moe", {"norm_topk_prob": False, "num_experts_per_tok": 2}, "moe.norm_topk", True),
    ("llada2_moe", {"num_shared_experts": 2, "moe_intermediate_size": 12}, "moe.shared_hidden", 24),
    # LLaDA-MoE: moe_layer_freq lists 1 for an MoE layer, 0 for a dense one
    ("llada_moe", {"num_hidden_layers": 2, "moe_layer_freq": [0, 1], "dense_intermediate_size": 64},
     "moe_layers", (1,)),
    ("llada_moe", {"rope_theta": 12345.0}, "rope_theta", 12345.0),
    ("sdar", {"rope_theta": 12345.0}, "rope_theta", 12345.0),
    ("sdar", {"block_size": 8}, "block_size", 8),
    ("llada2_moe", {"use_qkv_bias": True}, "qkv_bias", True),
    ("llada_moe", {"attention_bias": True}, "qkv_bias", True),  # LLaDA-MoE: q, k, v and o alike
    ("llada_moe", {"attention_bias": True}, "o_bias", True),
])
def test_a_setting_is_read_from_its_key(raws, family, changes, field, expected):
    assert _field(_parse(raws, family, **changes), field) == expected


@pytest.mark.parametrize("family, drop, changes, field, expected", [
    ("llada", ("mlp_hidden_size", "mlp_ratio"), {"d_model": 48}, "mlp_hidden_size", 4 * 48),  # OLMo's mlp_ratio 4
    ("llada", ("rope_full_precision",), {}, "rope_full_precision", True),  # LLaDA rotates in float32
    ("llada", ("pad_token_id",), {"eos_token_id": [7, 8]}, "pad_token_id", 7),  # the first end-of-text id
    ("dream", ("pad_token_id",), {"eos_token_id": [7, 8]}, "pad_token_id", 7),
    ("dream", (), {}, "rope_full_precision", False),  # Qwen2 casts the tables to the activation dtype
    ("fast_dllm_v2", ("bd_size",), {}, "block_size", 32),
    # LLaDA2's remote config class: half the head rotated, o_proj biased, 2.5x routed, groups 8 / 4
    ("llada2_moe", ("partial_rotary_factor", "rotary_dim"), {"head_dim": 16}, "rotary_dim", 8),
    ("llada2_moe", ("use_bias",), {}, "o_bias", True),
    ("llada2_moe", ("routed_scaling_factor",), {}, "moe.routed_scale", 2.5),
    ("llada2_moe", ("n_group", "topk_group"), {"num_experts": 16}, "moe.n_group", 8),
    ("llada2_moe", ("n_group", "topk_group"), {"num_experts": 16}, "moe.topk_group", 4),
])
def test_an_absent_key_takes_the_original_default(raws, family, drop, changes, field, expected):
    assert _field(_parse(raws, family, drop=drop, **changes), field) == expected


def test_sdar_s_attention_bias_covers_q_k_v_and_o(raws):
    """modeling_sdar.py: attention_bias puts a bias on all four projections, so each is read."""
    from dllm.models import sdar

    cfg = _parse(raws, "sdar", attention_bias=True)
    biases = {name for name in sdar.layer_sources(cfg, 0) if name.endswith(".bias")}
    assert biases == {f"layers.0.attn.{p}.bias" for p in ("q_proj", "k_proj", "v_proj", "o_proj")}


@pytest.fixture(scope="module")
def gemma_raw(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("gemma_keys") / "g", "diffusion_gemma", seed=1)
    return json.loads((path / "config.json").read_text())


def _gemma(raw, **text_changes):
    from dllm.models import diffusion_gemma

    text = {k: v for k, v in raw["text_config"].items() if text_changes.get(k, 0) is not None}
    text.update({k: v for k, v in text_changes.items() if v is not None})
    return diffusion_gemma.parse_config({**raw, "text_config": text})


def test_gemma_layer_types_default_to_every_sixth_full_and_the_last_is_always_full(gemma_raw):
    """transformers' Gemma-4 text config: without layer_types every sixth layer is full attention,
    and the last layer is made full whatever layer_types says."""
    seven = _gemma(gemma_raw, num_hidden_layers=7, layer_types=None)
    assert [i for i in range(7) if not seven.is_sliding(i)] == [5, 6]
    sliding = _gemma(gemma_raw, num_hidden_layers=3, layer_types=["sliding_attention"] * 3)
    assert sliding.layer_types == ("sliding_attention", "sliding_attention", "full_attention")


def test_gemma_full_layers_rotate_a_quarter_only_by_default(gemma_raw):
    """rope_parameters absent: the full layers' default (partial_rotary_factor 0.25, theta 1e6);
    given without a factor, the whole head rotates."""
    assert _gemma(gemma_raw, rope_parameters=None).global_rotary_factor == 0.25
    given = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
             "full_attention": {"rope_type": "proportional", "rope_theta": 1_000_000.0}}
    assert _gemma(gemma_raw, rope_parameters=given).global_rotary_factor == 1.0


@pytest.mark.parametrize("family", ["fast_dllm_v2", "sdar", "llada2_moe"])
def test_block_causal_families_count_blocks_from_position_zero_unless_told(raws, family):
    """How Fast-dLLM v2, SDAR and LLaDA2 were trained: blocks from the canvas start ("absolute");
    dllm_block_origin names another origin (dllm's own block-diffusion models: "answer")."""
    assert _parse(raws, family, drop=("dllm_block_origin",)).block_origin == "absolute"
    assert _parse(raws, family, dllm_block_origin="answer").block_origin == "answer"


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_d2f_student_s_blocks_start_after_the_prompt_by_default(raws, family):
    """dllm_attention=block_causal over a bidirectional family (a D2F student): the prompt is one
    block and answer blocks follow it ("prompt", D2F's create_full_block_attention_mask)."""
    from dllm.models.config import block_causal_override

    raw = {**raws[family], "dllm_attention": "block_causal", "dllm_block_size": 4}
    cfg = block_causal_override(raw, family_of(raw).parse_config(raw))
    assert (cfg.attention, cfg.block_size, cfg.block_origin) == ("block_causal", 4, "prompt")


def test_gemma_ties_its_head_unless_the_config_says_not(gemma_raw):
    """transformers' DiffusionGemma config: tie_word_embeddings defaults to true."""
    from dllm.models import diffusion_gemma

    assert diffusion_gemma.parse_config({k: v for k, v in gemma_raw.items() if k != "tie_word_embeddings"}
                                        ).tie_embeddings is True


def test_gemma_reads_its_canvas_and_image_token_from_the_top_level(gemma_raw):
    """canvas_length (default 256, transformers' DiffusionGemmaConfig) and image_token_id (which
    prompts may not hold: text only) sit beside text_config, not in it."""
    from dllm.models import diffusion_gemma

    assert gemma_raw.get("image_token_id") is not None  # the arrangement: the tiny config names one
    cfg = diffusion_gemma.parse_config({**gemma_raw, "canvas_length": 12})
    assert (cfg.canvas_length, cfg.image_token_id) == (12, gemma_raw["image_token_id"])
    assert diffusion_gemma.parse_config({k: v for k, v in gemma_raw.items() if k != "canvas_length"}
                                        ).canvas_length == 256


def test_sdar_moe_refuses_a_sparse_step_below_one(raws):
    with pytest.raises(ValueError, match="decoder_sparse_step=0 must be a positive integer"):
        _parse(raws, "sdar", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, decoder_sparse_step=0)
