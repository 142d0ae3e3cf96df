"""cache="encoder" reports as its peak the encoder prefix it holds, keys and values alike (the
prefix only grows over a decode, so its last size is its peak)."""
from __future__ import annotations

from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from dllm.models import load_model
from dllm.models.tiny import write_tiny_checkpoint


def test_the_peak_is_the_prefixs_keys_and_values(tmp_path):
    model = load_model(write_tiny_checkpoint(tmp_path / "gemma", "diffusion_gemma", seed=0))
    canvas = model.config.canvas_length
    config = GenerationConfig(gen_length=2 * canvas, block_length=canvas, steps=4, strategy="uniform",
                              cache="encoder", policy="eb_sampler", stop_at_eos=False)
    decoding = Decoding(model, [RowStart(prefix=[2, 7, 9, 11], gen_length=2 * canvas, seed=0)], config)
    result = decoding.run()
    store = decoding.state.cache.store
    held = sum(k.nbytes for k in store.keys) + sum(v.nbytes for v in store.values)
    assert store.keys[0].shape[2] == 4 + canvas  # the prompt and the first canvas were encoded
    assert result.memory["kv_cache_peak_bytes"] == held > 0
