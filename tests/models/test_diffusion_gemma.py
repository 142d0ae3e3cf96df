"""DiffusionGemma: loaded from transformers' own ``save_pretrained`` files, its encoder and
denoiser equal transformers' classes (the oracle) within float tolerance; load errors name the
tensor. Skipped with the reason when the installed transformers has no ``diffusion_gemma``."""
from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

import dllm
from dllm.models import CheckpointError, load_model
from dllm.models.gemma import PrefixKV
from dllm.samplers.strategies.apd_helper_cache import cache_argument
from tests.models.gemma_tiny import CANVAS, SLIDING_WINDOW, reference_classes, write_reference

ATOL = 1e-4  # logits reach the soft-cap (30): float32 rounding of several matmuls


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("diffusion_gemma")
    return out, write_reference(out)


def _reference_cache(ref):
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=ref.config.get_text_config())


def _with_cache(module, cache) -> dict:
    """The reference's cache keyword for ``module``: ``past_key_values`` in transformers 5.17 (the
    release that brought DiffusionGemma), ``cache`` in later ones."""
    return {cache_argument(module): cache}


def _positions(lo: int, n: int, batch: int) -> torch.Tensor:
    return torch.arange(lo, lo + n)[None].expand(batch, n)


def _denoiser_logits(ref, model, seed: int):
    """(dllm's logits, the reference's, dllm's prefix store) of one random canvas of CANVAS tokens
    after a random 13-token prompt, batch 2, both models encoding the prompt first."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(6, 250, (2, 13), generator=gen)
    canvas = torch.randint(0, model.config.vocab_size, (2, CANVAS), generator=gen)
    with torch.no_grad():
        cache = _reference_cache(ref)
        ref.model.encoder(input_ids=prompt, **_with_cache(ref.model.encoder, cache))
        expected = ref(decoder_input_ids=canvas, **_with_cache(ref, cache)).logits
        store = PrefixKV()
        model.encode(prompt, _positions(0, 13, 2), torch.ones(2, 13, dtype=torch.bool), store)
        logits = model.denoise(canvas, _positions(13, CANVAS, 2), store)
    return logits, expected, store


def test_encoder_and_denoiser_logits_match_transformers(checkpoint):
    """Prompt longer than the sliding window, two canvases, self-conditioning: every output of
    dllm's module equals transformers' within float32 tolerance."""
    path, ref = checkpoint
    model = load_model(path)
    gen = torch.Generator().manual_seed(1)
    B, P = 2, SLIDING_WINDOW + 5
    prompt = torch.randint(6, 250, (B, P), generator=gen)
    canvas = torch.randint(0, ref.config.text_config.vocab_size, (B, CANVAS), generator=gen)
    with torch.no_grad():
        cache = _reference_cache(ref)
        ref_hidden = ref.model.encoder(input_ids=prompt, **_with_cache(ref.model.encoder, cache)).last_hidden_state
        ref_first = ref(decoder_input_ids=canvas, **_with_cache(ref, cache)).logits
        ref_second = ref(decoder_input_ids=canvas, self_conditioning_logits=ref_first, **_with_cache(ref, cache)).logits

        store = PrefixKV()
        hidden = model.encode(prompt, _positions(0, P, B), torch.ones(B, P, dtype=torch.bool), store)
        first = model.denoise(canvas, _positions(P, CANVAS, B), store)
        second = model.denoise(canvas, _positions(P, CANVAS, B), store, first)
    torch.testing.assert_close(hidden, ref_hidden, atol=ATOL, rtol=0)
    assert ref_first.abs().max() > 1.0  # the perturbed weights give logits far from zero
    torch.testing.assert_close(first, ref_first, atol=ATOL, rtol=0)
    torch.testing.assert_close(second, ref_second, atol=ATOL, rtol=0)
    assert (second - first).abs().max() > 1e-2  # self-conditioning changes the logits

    # the accepted canvas joins the prefix through the encoder; the next canvas reads both
    at = _positions(P, CANVAS, B)
    nxt = torch.randint(0, ref.config.text_config.vocab_size, (B, CANVAS), generator=gen)
    with torch.no_grad():
        ref_hidden = ref.model.encoder(input_ids=canvas, position_ids=at,
                                       **_with_cache(ref.model.encoder, cache)).last_hidden_state
        ref_next = ref(decoder_input_ids=nxt, decoder_position_ids=at + CANVAS, **_with_cache(ref, cache)).logits
        hidden = model.encode(canvas, at, torch.ones(B, CANVAS, dtype=torch.bool), store)
        logits = model.denoise(nxt, at + CANVAS, store)
    torch.testing.assert_close(hidden, ref_hidden, atol=ATOL, rtol=0)
    torch.testing.assert_close(logits, ref_next, atol=ATOL, rtol=0)


def test_left_padded_row_equals_its_single_run(checkpoint):
    """A short prompt left-padded in a batch gets the denoiser logits it gets alone (positions
    are per row; the reference shares one position range over the batch)."""
    path, _ = checkpoint
    model = load_model(path)
    gen = torch.Generator().manual_seed(2)
    long_, short = torch.randint(6, 250, (1, 13), generator=gen), torch.randint(6, 250, (1, 4), generator=gen)
    canvas = torch.randint(0, model.config.vocab_size, (2, CANVAS), generator=gen)
    pad = 13 - 4
    ids = torch.cat([long_, torch.cat([torch.zeros(1, pad, dtype=torch.long), short], 1)])
    valid = torch.ones(2, 13, dtype=torch.bool)
    valid[1, :pad] = False
    positions = torch.stack([torch.arange(13), (torch.arange(13) - pad).clamp(min=0)])
    with torch.no_grad():
        store = PrefixKV()
        model.encode(ids, positions, valid, store)
        batch = model.denoise(canvas, torch.stack([torch.arange(13, 21), torch.arange(4, 12)]), store)
        alone = PrefixKV()
        model.encode(short, _positions(0, 4, 1), torch.ones(1, 4, dtype=torch.bool), alone)
        single = model.denoise(canvas[1:], _positions(4, CANVAS, 1), alone)
    torch.testing.assert_close(batch[1:], single, atol=ATOL, rtol=0)


def test_dllm_load_reads_the_text_model_and_says_what_it_skips(checkpoint, caplog):
    path, ref = checkpoint
    assert len(list(path.glob("model-*.safetensors"))) > 1  # sharded, with an index
    with caplog.at_level(logging.WARNING, logger="dllm.models.loading"):
        lm = dllm.load(path, device="cpu", dtype="float32")
    assert "text model only" in caplog.text and "vision_tower" in caplog.text
    assert lm.model.config.family == "diffusion_gemma" and "family='diffusion_gemma'" in repr(lm)
    assert lm.model.skipped_weights and all(".vision_tower." in n or ".embed_vision." in n
                                            for n in lm.model.skipped_weights)
    assert lm.model.config.mask_token_id is None and lm.model.config.canvas_length == CANVAS
    # the chat template and tokenizer come from the directory
    assert lm.encode([{"role": "user", "content": "the fox"}])[0] == 2  # <bos>
    n_ref = sum(p.numel() for n, p in ref.named_parameters() if "vision" not in n)
    unique = {p.data_ptr(): p.numel() for p in lm.model.parameters()}  # the LM head is the embedding
    assert sum(unique.values()) == n_ref


def _single_file(path, tmp_path):
    """The checkpoint as one model.safetensors (config, tokenizer alike)."""
    out = tmp_path / "single"
    out.mkdir(parents=True)
    tensors = {}
    for f in sorted(path.glob("model-*.safetensors")):
        tensors.update(load_file(str(f)))
    save_file(tensors, str(out / "model.safetensors"))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (out / name).write_text((path / name).read_text())
    return out, tensors


def test_missing_and_misshaped_tensors_are_named(checkpoint, tmp_path):
    path, _ = checkpoint
    out, tensors = _single_file(path, tmp_path)
    del tensors["model.decoder.layers.1.router.per_expert_scale"]
    tensors["model.decoder.layers.0.experts.gate_up_proj"] = tensors["model.decoder.layers.0.experts.gate_up_proj"][:, :40].contiguous()
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_model(out)
    msg = str(err.value)
    assert "missing tensors: ['model.decoder.layers.1.router.per_expert_scale']" in msg
    assert "model.decoder.layers.0.experts.gate_up_proj: checkpoint [4, 40, 64] != config [4, 64, 64]" in msg


def test_mixed_layouts_are_named(checkpoint, tiny_dirs, tmp_path):
    """LLaDA weights under a DiffusionGemma config.json, and the reverse: the error names the
    layout the weights are in."""
    path, _ = checkpoint
    out, _ = _single_file(path, tmp_path)
    for f in tiny_dirs["llada"].glob("*.safetensors"):
        (out / "model.safetensors").write_bytes(f.read_bytes())
    with pytest.raises(CheckpointError, match=r"describes a diffusion_gemma checkpoint, but the weights are in the llada"):
        load_model(out)
    gemma_weights, _ = _single_file(path, tmp_path / "again")
    (gemma_weights / "config.json").write_text((tiny_dirs["llada"] / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"describes a llada checkpoint, but the weights are in the diffusion_gemma \(found model\.decoder"):
        load_model(gemma_weights)


def _full_layer_keys(checkpoint, tmp_path, **text_keys):
    """The checkpoint with text_config's per_layer_config replaced by ``text_keys``; and the
    (head size, K/V heads) of each layer as transformers' config class reads that file."""
    out, _ = _single_file(checkpoint[0], tmp_path)
    raw = json.loads((out / "config.json").read_text())
    del raw["text_config"]["per_layer_config"]
    raw["text_config"].update(text_keys)
    (out / "config.json").write_text(json.dumps(raw))
    text = reference_classes()[0].from_pretrained(out).text_config
    return out, [(text.per_layer_config[i].head_dim, text.per_layer_config[i].num_key_value_heads) for i in range(3)]


def test_gemma4_keys_for_the_full_layers_are_read(checkpoint, tmp_path):
    """Gemma-4 configs give the full-attention layers' shape by ``global_head_dim`` and
    ``num_global_key_value_heads``, which transformers turns into ``per_layer_config``: the same
    model as the checkpoint's own per_layer_config, with the same logits."""
    out, heads = _full_layer_keys(checkpoint, tmp_path, global_head_dim=32, num_global_key_value_heads=1)
    assert heads == [(16, 2), (16, 2), (32, 1)]  # transformers' reading: the weights' shapes
    model = load_model(out)
    assert [model.config.layer_heads(i) for i in range(3)] == heads
    logits, reference, _ = _denoiser_logits(checkpoint[1], model, seed=3)
    torch.testing.assert_close(logits, reference, atol=ATOL, rtol=0)


def test_per_layer_config_keys_it_lacks_are_the_layer_s_base_values(checkpoint, tmp_path):
    """With per_layer_config present transformers ignores global_head_dim: a full layer it gives no
    head_dim keeps head_dim (16), so these 32-wide weights do not fit and the loader says where."""
    out, heads = _full_layer_keys(checkpoint, tmp_path, global_head_dim=32,
                                  per_layer_config={"2": {"num_key_value_heads": 1}})
    assert heads == [(16, 2), (16, 2), (16, 1)]
    with pytest.raises(CheckpointError, match=r"model\.decoder\.layers\.2\.self_attn\.q_proj\.weight: checkpoint "
                                              r"\[128, 64\] != config \[64, 64\]"):
        load_model(out)


@pytest.mark.parametrize("key, value, match", [
    ("use_bidirectional_attention", "all", "bidirectional encoder"),
    ("hidden_activation", "silu", "gelu_pytorch_tanh"),
    ("num_experts", None, "num_experts and top_k_experts"),
])
def test_unsupported_text_configs_are_refused(checkpoint, tmp_path, key, value, match):
    path, _ = checkpoint
    out, _ = _single_file(path, tmp_path)
    raw = json.loads((out / "config.json").read_text())
    raw["text_config"][key] = value
    (out / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=match):
        load_model(out)


def test_reference_classes_are_the_oracle():
    """The oracle is transformers' own module (skips with the reason where it is missing)."""
    config_cls, model_cls = reference_classes()
    assert model_cls.__module__.startswith("transformers.models.diffusion_gemma")


def test_bfloat16_load_runs_in_bfloat16_and_stays_close(checkpoint):
    """The float32 layer_scalar buffers must not lift bfloat16 activations to float32 (a dtype
    clash in the next linear); the logits stay within bfloat16 rounding of transformers' own
    bfloat16 model."""
    path, _ = checkpoint
    _, model_cls = reference_classes()
    ref = model_cls.from_pretrained(path, dtype=torch.bfloat16).eval()
    model = load_model(path, dtype="bfloat16")
    logits, expected, store = _denoiser_logits(ref, model, seed=4)
    assert store.keys[0].dtype == torch.bfloat16
    assert (logits - expected).abs().max() < 0.05 * expected.abs().max()
    assert (logits.argmax(-1) == expected.argmax(-1)).float().mean() >= 0.9


def test_tensor_parallelism_outside_torchrun_is_refused_naming_the_launch(checkpoint):
    """The plan fits this checkpoint (tests/parallel splits it under torchrun); one process is not a group."""
    path, _ = checkpoint
    with pytest.raises(ValueError, match="needs 2 processes: launch it with torchrun --nproc_per_node 2"):
        dllm.load(path, tensor_parallel=2)


def test_likelihood_evaluation_is_refused_with_the_reason(checkpoint):
    """lm-eval's loglikelihood is the masked-diffusion bound: not defined without a mask token."""
    from dllm.eval.likelihood import check_likelihood_model

    path, _ = checkpoint
    with pytest.raises(ValueError, match="'encoder_denoiser' attention, so evaluate it on generate_until"):
        check_likelihood_model(load_model(path))


def test_dllm_s_tiny_writer_is_the_layout_transformers_reads(tmp_path):
    """``write_tiny_checkpoint(dir, "diffusion_gemma")`` (no transformers needed to write it) is
    read by transformers' own from_pretrained, and both give the same logits."""
    from dllm.models.tiny import write_tiny_checkpoint

    _, model_cls = reference_classes()
    path = write_tiny_checkpoint(tmp_path / "tiny", "diffusion_gemma", n_layers=3, seed=1, num_shards=2)
    ref = model_cls.from_pretrained(path).eval()
    model = load_model(path)
    logits, expected, _ = _denoiser_logits(ref, model, seed=5)
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
    assert model.config.layer_types[-1] == "full_attention" and model.config.global_head_dim == 2 * model.config.head_dim


def test_prepacked_and_int8_loads_decode(checkpoint):
    """prepack (oneDNN-reordered linears) keeps the logits within float rounding; int8 weights
    (every linear but the tied head) decode to a full answer."""
    from dllm.models.prepack import prepack_refused

    path, _ = checkpoint
    if prepack_refused() is not None:  # a torch whose prepacked rows vary is refused (test_prepack_probe.py)
        with pytest.raises(ValueError, match="load with prepack=False"):
            load_model(path, prepack=True)
    else:
        plain, packed = load_model(path), load_model(path, prepack=True)
        gen = torch.Generator().manual_seed(6)
        prompt = torch.randint(6, 250, (1, 9), generator=gen)
        canvas = torch.randint(0, plain.config.vocab_size, (1, CANVAS), generator=gen)
        with torch.no_grad():
            outs = []
            for model in (plain, packed):
                store = PrefixKV()
                model.encode(prompt, _positions(0, 9, 1), torch.ones(1, 9, dtype=torch.bool), store)
                outs.append(model.denoise(canvas, _positions(9, CANVAS, 1), store))
        torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=0)
    lm = dllm.load(path, device="cpu", dtype="float32", quantize="int8")
    out = lm.generate("the fox", gen_length=CANVAS, block_length=CANVAS, steps=3, chat=False, stop_at_eos=False)
    assert len(out.token_ids[0]) == CANVAS
