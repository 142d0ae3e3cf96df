"""select="window" with ratio < 1 chooses a drifted row's tokens once, at the layer where its drift
reached the threshold: the deeper layers recompute that choice, they do not test and choose again."""
from __future__ import annotations

from dllm import GenerationConfig
from dllm.cache.adaptive import AdaptiveCache
from dllm.engine.decoding import decode
from tests.cache.test_adaptive_bookkeeping import models  # noqa: F401 (fixture)


def test_a_drifted_row_chooses_its_tokens_once(models, monkeypatch):
    """3 layers, drift tested from layer 1 with a tiny threshold: every step after the block start
    drifts at layer 1 (its window's masked inputs moved), so one answer of 8 one-token steps makes
    7 choices, none at layer 2."""
    layers = []
    choose = AdaptiveCache._window_attention

    def counting(layer, *args, **kwargs):
        layers.append(layer)
        return choose(layer, *args, **kwargs)

    monkeypatch.setattr(AdaptiveCache, "_window_attention", staticmethod(counting))
    model = models[3]
    config = GenerationConfig(gen_length=8, block_length=8, steps=8, stop_at_eos=False, cache="adaptive",
                              cache_args=dict(select="window", drift=1e-6, from_layer=1, scope="all", ratio=0.5))
    out = decode(model, [[5, 6, 7, 8]], config)
    assert out.nfe.tolist() == [8]
    assert layers == [model.layers[1]] * 7
