"""Caches are exact where they must be, save real compute, and keep batch == single."""
from __future__ import annotations

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3], [55, 66, 77, 88, 99]]
BLOCK = [dict(cache="prefix"), dict(cache="dual"), dict(cache="adaptive"),
         dict(cache="adaptive", cache_args={"drift": 0.02, "from_layer": 0, "cover": 0.5}),
         dict(cache="adaptive", cache_args={"select": "window", "drift": 0.02, "scope": "all", "ratio": 0.5,
                                            "from_layer": 0})]
SUB_BLOCK = [dict(cache="dual", sub_block_length=4), dict(cache="prefix", sub_block_length=4)]
CACHED = BLOCK + SUB_BLOCK
# cache_args that refresh everything at every step: the uncached decode, token for token
EVERY_STEP = {"prefix": {"refresh_every": 1}, "dual": {"refresh_every": 1},
              "adaptive": {"select": "window", "drift": 0.0, "from_layer": 0, "scope": "all", "ratio": 1.0}}


def _every_step(options: dict) -> dict:
    return {**options, "cache_args": EVERY_STEP[options["cache"]]}


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("bd"), "fast_dllm_v2", seed=5, block_size=8)
    return dllm.load(path).model


def _answers(model, prompts, **options):
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, **options)
    return decode(model, prompts, cfg)


def test_block_causal_family_loads(block_causal):
    assert block_causal.attention == "block_causal" and block_causal.config.block_size == 8
    assert block_causal.shift_logits


@pytest.mark.parametrize("options", BLOCK)  # sub-block reuse of the block's own K/V is approximate
@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "batch4"])
def test_block_causal_cache_is_exact(block_causal, options, prompts):
    plain = _answers(block_causal, prompts)
    cached = _answers(block_causal, prompts, **options)
    assert cached.answer.tolist() == plain.answer.tolist()
    assert (cached.nfe == plain.nfe).all()  # the block commit rides on the next block's refresh
    assert (cached.token_forwards < plain.token_forwards).all()


# stoppers that read the whole answer, and strategies that forward candidate states
ANSWER_WIDE = {"sched": dict(policy="threshold", policy_args={"tau": 0.9}, stopper="sched"),
               "sched-late": dict(policy="threshold", policy_args={"tau": 0.9}, stopper="sched",
                                  stopper_args={"tau_high": 2.0, "tau_low": 0.5}),
               "eotp": dict(policy="threshold", policy_args={"tau": 0.9}, stopper="eotp"),
               "freedave": dict(strategy="freedave", strategy_args={"num_drafts": 2}),
               "lopa": dict(policy="threshold", policy_args={"tau": 0.9}, strategy="lopa")}


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("name", list(ANSWER_WIDE))
def test_block_causal_cache_is_exact_for_answer_wide_stoppers_and_strategies(block_causal, cache, name):
    """Later model blocks are invisible to the window, so the uncached forward ends where the
    window's model block ends, as the cached ones do: stoppers that read the whole answer see
    the same positions in every mode, and the decodes are identical."""
    plain = _answers(block_causal, PROMPTS, **ANSWER_WIDE[name])
    cached = _answers(block_causal, PROMPTS, cache=cache, **ANSWER_WIDE[name])
    assert cached.answer.tolist() == plain.answer.tolist()
    assert cached.order.tolist() == plain.order.tolist()
    assert cached.nfe.tolist() == plain.nfe.tolist()


@pytest.mark.parametrize("options", SUB_BLOCK)
def test_block_causal_sub_blocks_refreshed_every_step_are_exact(block_causal, options):
    plain = _answers(block_causal, PROMPTS, sub_block_length=4)
    cached = _answers(block_causal, PROMPTS, cache_args={"refresh_every": 1}, **options)
    assert cached.answer.tolist() == plain.answer.tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("options", CACHED)
@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "batch4"])
def test_refresh_every_step_equals_no_cache(tiny_models, family, options, prompts):
    model = tiny_models[family].model
    plain = _answers(model, prompts, sub_block_length=options.get("sub_block_length"))
    cached = _answers(model, prompts, **_every_step(options))
    assert cached.answer.tolist() == plain.answer.tolist()


@pytest.mark.parametrize("select", ["read", "window"])
@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "batch4"])
def test_adaptive_without_refresh_equals_dual(tiny_models, family, prompts, select):
    """drift=inf: the drift test never fires, so only the block-start refresh is left."""
    model = tiny_models[family].model
    dual = _answers(model, prompts, cache="dual", policy="threshold", policy_args={"tau": 0.3})
    adaptive = _answers(model, prompts, cache="adaptive", cache_args={"drift": float("inf"), "select": select},
                        policy="threshold", policy_args={"tau": 0.3})
    assert adaptive.answer.tolist() == dual.answer.tolist()
    assert adaptive.token_forwards.tolist() == dual.token_forwards.tolist()


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_adaptive_charges_the_tokens_it_recomputes(tiny_models, family):
    """Refreshing more of the context costs more token-forwards, and never more than uncached."""
    model = tiny_models[family].model
    cost = lambda **args: _answers(model, PROMPTS[1:2], cache="adaptive",  # noqa: E731
                                   cache_args={"select": "window", **args}).token_forwards[0]
    never, quarter, half = cost(drift=float("inf")), cost(ratio=0.25), cost(ratio=0.5)
    middle, every = cost(ratio=1.0, scope="all"), cost(ratio=1.0, scope="all", from_layer=0)
    plain = _answers(model, PROMPTS[1:2]).token_forwards[0]
    assert never < quarter < half < middle < every == plain


@pytest.mark.parametrize("args, message", [
    ({"ratio": 0}, "ratio must be a fraction"), ({"scope": "suffix"}, "scope must be one of"),
    ({"drift": -1}, "drift must be a number"), ({"from_layer": 9}, "choose from_layer < 2"),
    ({"response_every": 0}, "response_every must be a positive"), ({"select": "all"}, "select must be one of"),
    ({"cover": 0}, "cover must be a share"), ({"cover": 1.5}, "cover must be a share"),
    ({"most": 0}, "most must be a share"),
])
def test_adaptive_rejects_bad_options(tiny_models, args, message):
    with pytest.raises(ValueError, match=message):
        tiny_models["llada"].generate("hi", gen_length=8, cache="adaptive", cache_args=args)


def test_adaptive_takes_no_sub_blocks(tiny_models):
    with pytest.raises(ValueError, match="drop sub_block_length"):
        tiny_models["llada"].generate("hi", gen_length=8, block_length=8, cache="adaptive", sub_block_length=4)


@pytest.mark.parametrize("family,policy", [("llada", "low_confidence"), ("dream", "entropy")])
@pytest.mark.parametrize("options", CACHED)
def test_cached_batch_equals_single_runs(tiny_models, family, policy, options):
    model = tiny_models[family].model
    batch = _answers(model, PROMPTS, policy=policy, **options)
    for row, prompt in enumerate(PROMPTS):
        single = _answers(model, [prompt], policy=policy, **options)
        assert batch.answer[row].tolist() == single.answer[0].tolist()
        assert int(batch.nfe[row]) == int(single.nfe[0])  # token-forwards include the batch's padding


@pytest.mark.parametrize("options", CACHED)
def test_cache_saves_token_forwards(tiny_models, options):
    model = tiny_models["llada"].model
    plain = _answers(model, PROMPTS[:1], sub_block_length=options.get("sub_block_length"))
    cached = _answers(model, PROMPTS[:1], **options)
    assert int(cached.nfe[0]) == int(plain.nfe[0])
    assert int(cached.token_forwards[0]) < int(plain.token_forwards[0])


def test_unknown_cache_option(tiny_models):
    with pytest.raises(ValueError, match=r"cache 'dual' has no option\(s\) \['bogus'\]; its cache_args: \["):
        tiny_models["llada"].generate("hi", gen_length=8, cache="dual", cache_args={"bogus": 1})


@pytest.mark.parametrize("every", [0, -2])
def test_refresh_every_must_be_a_positive_number_of_steps(tiny_models, every):
    """0 would read as "off" (never refresh) rather than the refusal the option documents."""
    with pytest.raises(ValueError, match="refresh_every must be a positive number of steps"):
        tiny_models["llada"].generate("hi", gen_length=8, cache="dual", cache_args={"refresh_every": every})


def test_cli_cache_args_reach_the_config():
    from dllm.cli import build_parser
    from dllm.cli.options import generation_config

    args = build_parser().parse_args(["generate", "hi", "--cache", "dual", "--sub-block-length", "4",
                                      "--block-length", "8", "--gen-length", "16",
                                      "--cache-arg", "refresh_every=2"])
    config = generation_config(args)
    assert (config.cache, config.sub_block_length, config.cache_args) == ("dual", 4, {"refresh_every": 2})


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_window_forward_over_an_unchanged_canvas_equals_the_full_forward(tiny_models, family, mode):
    """The cached window path (a non-refresh step) reads the K/V written by the refresh at the right
    positions: with nothing committed in between, its logits equal an uncached forward's."""
    from dllm.cache import make_cache
    from dllm.runner.canvas import build_canvas
    from dllm.runner.model_runner import ModelRunner

    model = tiny_models[family].model
    canvas = build_canvas([[5, 6, 7, 8, 9], [10, 11]], gen_length=16, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device=model.device)
    runner, cache = ModelRunner(model, canvas), make_cache(mode, block_length=8)
    P = canvas.prompt_width
    canvas.tokens[:, P : P + 8] = torch.arange(20, 28)  # a committed first block
    full = runner.forward(canvas.tokens, 0)
    shift = int(runner.shift_logits)
    expected = full[:, P + 8 - shift : P + 16 - shift]
    refresh = cache.block_logits(runner, canvas.tokens, P + 8, P + 16, 0)
    window = cache.block_logits(runner, canvas.tokens, P + 8, P + 16, 1)
    torch.testing.assert_close(refresh, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(window, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def llada_moe(tmp_path_factory):
    """Per-head q/k norm, partial RoPE and MoE MLPs: what the adaptive cache's partial layers
    must build exactly as the model's own forward does."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("llada_moe"), "llada_moe", seed=6)
    return dllm.load(path, dtype="float32").model


def test_adaptive_partial_layers_match_the_model_on_qk_norm_partial_rope_moe(llada_moe):
    plain = _answers(llada_moe, PROMPTS)
    everything = _answers(llada_moe, PROMPTS, cache="adaptive", cache_args=EVERY_STEP["adaptive"])
    assert everything.answer.tolist() == plain.answer.tolist()
    dual = _answers(llada_moe, PROMPTS, cache="dual", policy="threshold", policy_args={"tau": 0.3})
    adaptive = _answers(llada_moe, PROMPTS, cache="adaptive", cache_args={"drift": float("inf")},
                        policy="threshold", policy_args={"tau": 0.3})
    assert adaptive.answer.tolist() == dual.answer.tolist()
