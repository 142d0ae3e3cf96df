"""compile=True's bookkeeping, with torch.compile stood in for (no compiler run): one compiled
wrapper per model, built once and reused by every decode (another would trace and capture again),
and every cached forward marks its K/V buffers as static before the compiled call (on CUDA,
where the marking matters, the graphs then write them in place). Mutation audit, round 6:
building the wrapper at every call, or never marking the cache, passed every compile test.
The runner's one decision on ``head_rows`` keeps them out of compiled forwards (a graph break)."""
from __future__ import annotations

import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.runner import compiled, model_runner


class _Model(torch.nn.Module):
    device = torch.device("cpu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def test_one_compiled_wrapper_per_model_is_reused(monkeypatch):
    built = []

    def compile_(model, backend=None, mode=None):
        built.append(mode)
        return model

    monkeypatch.setattr(compiled.torch, "compile", compile_)
    monkeypatch.setattr(compiled, "compile_available", lambda: None)  # no compiler import needed
    for mode in (None, "reduce-overhead"):  # the CUDA mode adds the cloning wrapper
        monkeypatch.setattr(compiled, "compile_mode", lambda device, backend, mode=mode: mode)
        model = _Model()
        first = compiled.compiled_model(model)
        assert compiled.compiled_model(model) is first
        assert first(torch.ones(2)).tolist() == [2.0, 2.0]
    assert built == [None, "reduce-overhead"]  # one build per model, whatever the calls


def test_every_compiled_cached_forward_marks_its_cache_static_first(tiny_models, monkeypatch):
    events = []

    def mark(cache, devices=("cuda",)):
        events.append(("mark", id(cache)))

    def call(model, tokens, positions, visible, cache, write_at, head):
        events.append(("call", None if cache is None else id(cache)))
        return model(tokens, positions, visible, cache, write_at, head)

    monkeypatch.setattr(model_runner, "mark_static", mark)
    monkeypatch.setattr(model_runner, "call_compiled", call)
    config = GenerationConfig(gen_length=16, block_length=8, steps=8, cache="dual", compile=True)
    decode(tiny_models["llada"].model, [[5, 17, 42], [7, 8, 9, 10, 11]], config)
    calls = [i for i, (what, _) in enumerate(events) if what == "call"]
    assert len(calls) >= 8 and all(events[i][1] is not None for i in calls)  # every forward of a dual decode is cached
    for i in calls:  # the cache was marked right before its forward
        assert events[i - 1] == ("mark", events[i][1]), events[max(0, i - 2): i + 1]


def test_compiled_forwards_get_no_head_rows_on_a_cpu(tiny_dirs, monkeypatch):
    """On a CPU an eager decode's forwards read only the eligible rows' logits (``head_rows``);
    a compiled one's forwards never get them: their boolean selection is a data-dependent shape,
    a graph break in every compiled forward. The tokens are the eager decode's either way."""
    model = dllm.load(tiny_dirs["llada"], device="cpu", dtype="float32").model  # head_rows pay on a CPU only
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append("head_rows" in kwargs),
                                    with_kwargs=True)
    monkeypatch.setattr(model_runner, "call_compiled", lambda model, *args, **kwargs: model(*args, **kwargs))
    config = dict(gen_length=16, block_length=8, steps=8, cache="none")
    prompts = [[5, 17, 42], [7, 8, 9, 10, 11]]
    eager = decode(model, prompts, GenerationConfig(**config))
    assert seen and all(seen)  # the eager forwards read eligible rows only
    seen.clear()
    compiled_ = decode(model, prompts, GenerationConfig(**config, compile=True))
    assert len(seen) == 8 and not any(seen)
    assert torch.equal(eager.answer, compiled_.answer)
