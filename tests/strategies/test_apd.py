"""APD reproduces its released loop (tests/oracles_apd.py) token for token on Dream-layout (and
LLaDA-layout) checkpoints with a tiny Qwen2 helper written by transformers, in the same rounds;
each row of a ragged batch is its single run (tokens and forwards), at temperature > 0 and with
blocks too; guided diffusion (FlashDLM) reproduces its loop and is the helper's greedy decode
under every cache and in ragged batches; what either does not compose with is refused with the
reason."""
from __future__ import annotations

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.engine.policies import check_policies
from dllm.models.tiny import write_tiny_checkpoint
from tests.oracles_apd import apd_generate, guided_generate
from tests.tiny_helper import write_tiny_helper

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]


@pytest.fixture(scope="module")
def models(tmp_path_factory, test_device):
    root = tmp_path_factory.mktemp("apd")
    out = {}
    for family, seed in (("dream", 2), ("llada", 1)):
        ckpt = write_tiny_checkpoint(root / family, family, seed=seed)
        helper = write_tiny_helper(root / f"{family}_helper", ckpt, seed=seed)
        out[family] = dllm.load(ckpt, device=test_device, dtype="float32", helper=helper).model
    return out


def _apd(gen_length: int, R: float, M: int | None, **extra) -> GenerationConfig:
    return GenerationConfig(gen_length=gen_length, block_length=gen_length, strategy="apd",
                            strategy_args={"mixture_weight": R, "max_lookahead": M}, **extra)


@pytest.mark.parametrize("family", ["dream", "llada"])
@pytest.mark.parametrize("R, M", [(0.5, None), (0.7, 4), (0.9, 8), (1.0, 6), (0.0, 6)])
def test_apd_equals_released_loop(models, family, R, M):
    model = models[family]
    G = 24
    accepted_many = rejected = False
    for prompt in PROMPTS:
        want, rounds = apd_generate(model, model.helper.model, prompt, gen_length=G, mixture_weight=R,
                                    max_lookahead=M, eos_id=-1)  # no end-of-text stop: the whole canvas
        got = decode(model, [prompt], _apd(G, R, M, stop_at_eos=False))
        assert got.answer[0].tolist() == want, prompt
        assert int(got.nfe[0]) == rounds, prompt
        accepted_many |= rounds < G
        rejected |= rounds > -(-G // (M or G))
    if 0 < R < 1:  # the helper both accepts parallel drafts and cuts windows
        assert accepted_many and rejected
    if R == 1:  # the diffusion model alone: every window whole
        assert not rejected


def test_apd_stops_at_end_of_text_as_released(models):
    """With the end-of-text stop, the loop ends at the round that commits one (text after it in that
    round is kept by both, and cut from the answer)."""
    model = models["dream"]
    eos = model.eos_token_ids[0]
    hits = 0
    for prompt in PROMPTS + [[9, 9, 9], [300 - 7, 11]]:
        want, rounds = apd_generate(model, model.helper.model, prompt, gen_length=32, mixture_weight=0.3,
                                    max_lookahead=8, eos_id=eos)
        got = decode(model, [prompt], _apd(32, 0.3, 8))
        end = want.index(eos) + 1 if eos in want else len(want)
        hits += eos in want
        assert got.answer[0].tolist()[:end] == want[:end], prompt
        assert int(got.nfe[0]) == rounds, prompt
    assert hits  # some answer ended early


@pytest.mark.parametrize("extra", [dict(), dict(block_length=8), dict(temperature=0.8, seed=3),
                                   dict(stop_at_eos=True, temperature=1.0, top_k=20)],
                         ids=["one_block", "blocks", "temperature", "eos_sampled"])
def test_ragged_batch_equals_single_runs(models, extra):
    model = models["dream"]
    cfg = GenerationConfig(**{**dict(gen_length=24, block_length=24, strategy="apd", stop_at_eos=False,
                                     strategy_args={"mixture_weight": 0.6, "max_lookahead": 6}), **extra})
    batch = decode(model, PROMPTS, cfg, seeds=[1, 2, 3, 4])
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg, seeds=[row + 1])
        assert batch.answer[row].tolist() == single.answer[0].tolist(), row
        assert int(batch.nfe[row]) == int(single.nfe[0]), row


@pytest.mark.parametrize("family", ["dream", "llada"])
@pytest.mark.parametrize("R, M, W", [(0.5, None, 1), (0.7, 6, 2), (0.6, 8, 5)])
def test_apd_kv_window_equals_released_loop(models, family, R, M, W):
    """kv_window (W): the released loop's K/V approximation, same tokens and rounds; a small W
    changes some answer (the frozen K/V are really used)."""
    model = models[family]
    G, changed = 24, False
    for prompt in PROMPTS:
        want, rounds = apd_generate(model, model.helper.model, prompt, gen_length=G, mixture_weight=R,
                                    max_lookahead=M, eos_id=-1, kv_window=W)
        if W == 1:  # the exact loop only serves the check below, made for the smallest window
            exact, _ = apd_generate(model, model.helper.model, prompt, gen_length=G, mixture_weight=R,
                                    max_lookahead=M, eos_id=-1)
            changed |= want != exact
        cfg = _apd(G, R, M, stop_at_eos=False)
        cfg.strategy_args["kv_window"] = W
        got = decode(model, [prompt], cfg)
        assert got.answer[0].tolist() == want, prompt
        assert int(got.nfe[0]) == rounds, prompt
    if W == 1:
        assert changed


@pytest.mark.parametrize("extra", [dict(), dict(block_length=8), dict(temperature=0.8, seed=3)],
                         ids=["one_block", "blocks", "temperature"])
def test_kv_window_ragged_batch_equals_single_runs(models, extra):
    """Rows keep their own window start: one forward per distinct recompute start, each row its
    single run's tokens and forwards."""
    model = models["dream"]
    cfg = GenerationConfig(**{**dict(gen_length=24, block_length=24, strategy="apd", stop_at_eos=False,
                                     strategy_args={"mixture_weight": 0.6, "max_lookahead": 6, "kv_window": 3}),
                              **extra})
    batch = decode(model, PROMPTS, cfg, seeds=[1, 2, 3, 4])
    assert 0 < batch.memory["kv_cache_peak_bytes"] <= batch.memory["kv_cache_bytes"]  # planned, not past the plan
    for row, prompt in enumerate(PROMPTS):
        single = decode(model, [prompt], cfg, seeds=[row + 1])
        assert batch.answer[row].tolist() == single.answer[0].tolist(), row
        assert int(batch.nfe[row]) == int(single.nfe[0]), row


@pytest.mark.parametrize("extra", [dict(), dict(block_length=8), dict(temperature=0.8, seed=3),
                                   dict(stop_at_eos=True, max_lookahead=None), dict(kv_window=2)],
                         ids=["one_block", "blocks", "temperature", "eos_whole_block", "kv_window"])
def test_helper_cache_same_tokens_and_forwards_fewer_helper_tokens(models, extra):
    """helper_cache=True: transformers' cache of the committed prefix gives each row, alone and in
    a ragged batch, the tokens and forwards of the uncached helper, feeding the helper fewer tokens."""
    model = models["dream"]
    fed = []
    hook = model.helper.model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(kwargs["input_ids"].numel()), with_kwargs=True)
    try:
        runs = {}
        for cached in (False, True):
            args = {"mixture_weight": 0.6, "max_lookahead": 6, "helper_cache": cached}
            args.update({k: extra[k] for k in ("max_lookahead", "kv_window") if k in extra})
            options = {k: v for k, v in extra.items() if k not in ("max_lookahead", "kv_window")}
            cfg = GenerationConfig(**{**dict(gen_length=24, block_length=24, strategy="apd", stop_at_eos=False,
                                             strategy_args=args), **options})
            fed.clear()
            runs[cached] = [decode(model, PROMPTS, cfg, seeds=[1, 2, 3, 4]), sum(fed)]
            runs[cached] += [decode(model, [p], cfg, seeds=[row + 1]) for row, p in enumerate(PROMPTS)]
    finally:
        hook.remove()
    (plain, plain_fed, *plain_single), (cached, cached_fed, *cached_single) = runs[False], runs[True]
    assert cached.answer.tolist() == plain.answer.tolist() and cached.nfe.tolist() == plain.nfe.tolist()
    for row, (a, b) in enumerate(zip(plain_single, cached_single)):
        assert b.answer[0].tolist() == a.answer[0].tolist() == plain.answer[row].tolist(), row
        assert int(b.nfe[0]) == int(a.nfe[0]), row
    assert cached_fed < plain_fed


@pytest.mark.parametrize("options, reason", [
    (dict(cache="dual"), "cache='none'"),
    (dict(stopper="prophet"), "stopper='none'"),
    (dict(cfg_scale=1.0), "cfg_scale=0"),
    (dict(policy="threshold"), "no unmasking rule"),
])
def test_refusals_name_the_reason(models, options, reason):
    cfg = _apd(16, 0.7, 4, **options)
    with pytest.raises(ValueError, match=reason):
        check_policies(cfg)
    with pytest.raises(ValueError, match=reason):
        decode(models["dream"], [PROMPTS[0]], cfg)


def test_bad_options_and_missing_helper(tiny_models):
    for args, reason in (({"mixture_weight": 1.5}, "mixture_weight"), ({"max_lookahead": 0}, "max_lookahead"),
                         ({"kv_window": 0}, "kv_window"), ({"kv_window": 2.5}, "kv_window"),
                         ({"helper_cache": "yes"}, "helper_cache")):
        with pytest.raises(ValueError, match=reason):
            check_policies(GenerationConfig(gen_length=8, strategy="apd", strategy_args=args))
    with pytest.raises(ValueError, match="helper=PATH_OR_ID"):
        decode(tiny_models["dream"].model, [PROMPTS[0]], _apd(8, 0.7, 4))


def test_kv_window_refused_on_a_block_causal_model(tmp_path, test_device):
    bd = dllm.load(write_tiny_checkpoint(tmp_path / "bd", "fast_dllm_v2", seed=5, block_size=8),
                   device=test_device, dtype="float32").model
    cfg = _apd(8, 0.7, 4)
    cfg.strategy_args["kv_window"] = 4
    with pytest.raises(ValueError, match="kv_window=None"):
        decode(bd, [PROMPTS[0]], cfg)


# --- guided diffusion (FlashDLM) ------------------------------------------------------------------

def _helper_greedy(model, prompt: list[int], n: int) -> list[int]:
    """The helper's own greedy continuation (transformers' generate), the mask id never chosen."""
    import torch

    helper = model.helper.model
    ids = torch.tensor([prompt], device=model.device)
    with torch.no_grad():
        for _ in range(n):
            logits = helper(ids).logits[0, -1]
            logits[model.mask_token_id] = float("-inf")
            ids = torch.cat([ids, logits.argmax().view(1, 1)], 1)
    return ids[0, len(prompt):].tolist()


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_guided_equals_flashdlm_loop_and_the_helpers_greedy_decode(models, family):
    """Random tiny models rarely agree (one token per round here); the bundled models' test below
    shows rounds of many tokens."""
    model = models[family]
    for prompt in PROMPTS:
        want, rounds = guided_generate(model, model.helper.model, prompt, gen_length=24, eos_id=-1)
        assert want == _helper_greedy(model, prompt, 24)  # speculative decoding: the verifier's own answer
        got = decode(model, [prompt], GenerationConfig(gen_length=24, block_length=24, strategy="guided",
                                                       stop_at_eos=False))
        assert got.answer[0].tolist() == want and int(got.nfe[0]) == rounds, prompt


@pytest.mark.parametrize("options", [dict(cache="none", block_length=8), dict(cache="prefix", block_length=8),
                                     dict(cache="dual", block_length=8), dict(cache="adaptive", block_length=8)],
                         ids=lambda o: o["cache"])
def test_guided_composes_with_caches_and_ragged_batches(models, options):
    """Any cache changes the drafts, never the answer: each row is the helper's greedy decode, in a
    batch as alone."""
    model = models["dream"]
    cfg = GenerationConfig(gen_length=24, strategy="guided", stop_at_eos=False, **options)
    batch = decode(model, PROMPTS, cfg)
    for row, prompt in enumerate(PROMPTS):
        assert batch.answer[row].tolist() == _helper_greedy(model, prompt, 24), row
        single = decode(model, [prompt], cfg)
        assert int(batch.nfe[row]) == int(single.nfe[0]), row


def test_guided_stops_at_end_of_text_as_released(models):
    model = models["dream"]
    eos = model.eos_token_ids[0]
    for prompt in PROMPTS:
        want, rounds = guided_generate(model, model.helper.model, prompt, gen_length=24, eos_id=eos)
        got = decode(model, [prompt], GenerationConfig(gen_length=24, block_length=24, strategy="guided"))
        end = want.index(eos) + 1 if eos in want else len(want)
        assert got.answer[0].tolist()[:end] == want[:end] and int(got.nfe[0]) == rounds, prompt


@pytest.mark.parametrize("options, reason", [
    (dict(temperature=0.7), "temperature=0"), (dict(stopper="prophet"), "stopper='none'"),
    (dict(cfg_scale=1.0), "cfg_scale=0"), (dict(policy="threshold"), "no unmasking rule"),
])
def test_guided_refusals_name_the_reason(models, options, reason):
    cfg = GenerationConfig(gen_length=16, strategy="guided", **options)
    with pytest.raises(ValueError, match=reason):
        check_policies(cfg)
    with pytest.raises(ValueError, match=reason):
        decode(models["dream"], [PROMPTS[0]], cfg)


@pytest.mark.parametrize("kv_window", [None, 2])
def test_reference_loops_make_their_tensors_on_the_model_device(models, kv_window):
    """The released loops and the helper's greedy decode create every tensor on the model's device,
    so they run beside a model on a GPU (DLLM_TEST_DEVICE=cuda). A tensor made without a device
    lands on the default one; under a foreign default (meta) it meets the model's and fails, as a
    CPU tensor meets a CUDA model's."""
    import torch

    model = models["dream"]
    helper = model.helper.model
    runs = [lambda: apd_generate(model, helper, PROMPTS[1], gen_length=12, mixture_weight=0.5, max_lookahead=4,
                                 eos_id=-1, kv_window=kv_window),
            lambda: guided_generate(model, helper, PROMPTS[1], gen_length=6, eos_id=-1),
            lambda: _helper_greedy(model, PROMPTS[1], 4)]
    for run in runs:
        want = run()
        with torch.device("meta"):
            assert run() == want
