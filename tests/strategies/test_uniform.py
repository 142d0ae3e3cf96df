"""strategy="uniform" (DiffusionGemma's uniform-state decoding) in the engine's loop.

Parity mode (``draws="generator"``) reproduces transformers' ``generate`` token for token on a
tiny checkpoint written by its own classes; each piece of the default mode's step (schedule,
entropy-bound acceptance, re-noise, stopper) equals the reference's given the same canvas and
draws; the default mode's counter-based draws make a row decode alike alone and in a ragged
batch. Skipped with the reason when the installed transformers has no ``diffusion_gemma``."""
from __future__ import annotations

import pytest
import torch

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import decode
from dllm.models import load_model
from dllm.samplers.noise import RowNoise
from dllm.kernels import confidence_stats
from dllm.samplers import RuleInput, make_rule
from dllm.samplers.uniform_state import CounterDraws, StableConfident, scheduled_temperature, token_entropy
from tests.models.gemma_tiny import CANVAS, reference_classes, write_reference

STEPS = 5
PROMPT = [2, 7, 9, 11, 40, 50, 60, 70, 80, 90, 100]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """The reference read back from its files, and dllm's model. Weights drawn with std 0.05:
    with the logit tests' 0.15 the tiny model is so high-gain that self-conditioning grows float
    rounding 1000-fold in four steps, and argmax near-ties then flip even between transformers'
    own in-memory and reloaded copies of one checkpoint."""
    out = tmp_path_factory.mktemp("uniform_gemma")
    write_reference(out, seed=3, std=0.05)
    _, model_cls = reference_classes()
    ref = model_cls.from_pretrained(out).eval()
    ref.path = out
    return ref, load_model(out)


CANVASES = 2  # the second canvas reads the first through the encoder (and the prompt's last
# sliding_window - 1 positions in sliding layers: the prompt is longer than the window)


def _config(entropy_bound: float = 0.1, **strategy_args) -> GenerationConfig:
    return GenerationConfig(gen_length=CANVASES * CANVAS, block_length=CANVAS, steps=CANVASES * STEPS,
                            strategy="uniform", cache="encoder", policy="eb_sampler",
                            policy_args={"gamma": entropy_bound}, seed=5, strategy_args=strategy_args)


def _until_eos(ids: list[int]) -> list[int]:
    return ids[: ids.index(1) + 1] if 1 in ids else ids


@pytest.mark.parametrize("options", [
    dict(),  # transformers' defaults: the schedule 0.8 -> 0.4, bound 0.1, stability 1, confidence 0.005
    dict(stability_threshold=0, confidence_threshold=6.0),  # every canvas stops after its first step
    dict(t_min=0.1, t_max=1.5, entropy_bound=2.0, stability_threshold=2, confidence_threshold=6.0),
])
def test_parity_mode_reproduces_transformers_generate(gemma, options):
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    ref, model = gemma
    args = {"t_min": 0.4, "t_max": 0.8, "entropy_bound": 0.1, "stability_threshold": 1,
            "confidence_threshold": 0.005, **options}
    torch.manual_seed(5)
    with torch.no_grad():
        out = ref.generate(torch.tensor([PROMPT]), max_new_tokens=CANVASES * CANVAS, max_denoising_steps=STEPS,
                           t_min=args["t_min"], t_max=args["t_max"],
                           sampler_config=EntropyBoundSamplerConfig(entropy_bound=args["entropy_bound"]),
                           stability_threshold=args["stability_threshold"],
                           confidence_threshold=args["confidence_threshold"], eos_token_id=1, pad_token_id=0)
    result = decode(model, [PROMPT], _config(draws="generator", **args))
    expected = _until_eos(out.sequences[0, len(PROMPT):].tolist())
    assert _until_eos(result.answer[0].tolist())[: len(expected)] == expected
    canvases = -(-len(expected) // CANVAS)
    # denoiser forwards: the reference's tokens per forward over the canvases it decoded
    assert int(result.nfe[0]) == round(canvases * CANVAS / float(out.tokens_per_forward[0]))


def test_default_mode_rows_decode_alike_alone_and_in_a_ragged_batch(gemma):
    _, model = gemma
    short = [2, 7, 9]
    config = _config()
    alone = decode(model, [short], config, seeds=[11]).answer
    batch = decode(model, [PROMPT, short, PROMPT], config, seeds=[5, 11, 6]).answer
    assert torch.equal(batch[1], alone[0])
    assert not torch.equal(batch[0], batch[2])  # another seed, other draws


def test_step_pieces_equal_the_reference_given_the_same_canvas_and_draws():
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        EntropyBoundSampler, EntropyBoundSamplerConfig, LinearTemperatureScheduleLogitsProcessor,
        StableAndConfidentStoppingCriteria,
    )

    gen = torch.Generator().manual_seed(0)
    B, W, V = 3, 8, 50
    noise = RowNoise(seed=torch.tensor([1, 2, 3]), clock=torch.tensor([0, 4, 9]), positions=torch.arange(W))
    draws = CounterDraws()
    canvas = draws.canvas(noise, V)
    schedule = LinearTemperatureScheduleLogitsProcessor(t_min=0.4, t_max=0.8, max_denoising_steps=STEPS)
    stopper = StableConfident(stability=2, confidence=3.5)
    ref_stopper = StableAndConfidentStoppingCriteria(stability_threshold=2, confidence_threshold=3.5)
    for remaining in range(STEPS, 0, -1):
        logits = torch.randn(B, W, V, generator=gen) * 3
        tempered = logits / scheduled_temperature(remaining, STEPS, 0.4, 0.8)
        torch.testing.assert_close(tempered, schedule(None, logits, cur_step=torch.tensor(remaining)))
        sampled, fresh = draws.sample(noise, tempered), draws.renoise(noise, V)
        sampler = EntropyBoundSampler(EntropyBoundSamplerConfig(entropy_bound=1.5), W, V, STEPS)
        sampler.initialize_canvas = lambda batch_size, device: fresh  # the same re-noise draws
        accepted = sampler.accept_canvas(canvas, sampled, tempered, remaining)
        expected = sampler.renoise_canvas(accepted, remaining)
        stats = confidence_stats(tempered.reshape(B * W, V)).reshape(B, W)
        accept = make_rule("eb_sampler", {"gamma": 1.5})(RuleInput(
            stats=stats, eligible=torch.ones(B, W, dtype=torch.bool), step=0, num_steps=STEPS,
            block_masks=torch.full((B,), W)))  # the rule over every canvas position
        assert torch.equal(accept, sampler.accepted_token_mask)
        assert 0 < int(accept.sum()) < B * W
        new_canvas = torch.where(accept, sampled, fresh)
        assert torch.equal(new_canvas, expected)
        argmax = tempered.argmax(-1) if remaining > 2 else torch.zeros(B, W, dtype=torch.long)  # stable at the end
        assert torch.equal(stopper(argmax, token_entropy(tempered)), ref_stopper(argmax, tempered))
        canvas = new_canvas
        noise = RowNoise(seed=noise.seed, clock=noise.clock + 1, positions=noise.positions)


def test_counter_sampling_follows_the_softmax():
    logits = torch.tensor([[[0.0, 1.0, 2.0, -1.0]]]).expand(1, 4000, 4)
    noise = RowNoise(seed=torch.tensor([7]), clock=torch.tensor([0]), positions=torch.arange(4000))
    counts = torch.bincount(CounterDraws().sample(noise, logits).flatten(), minlength=4).float() / 4000
    torch.testing.assert_close(counts, logits[0, 0].softmax(-1), atol=0.025, rtol=0)


def test_the_defaults_become_uniform_state_decoding(gemma):
    """strategy 'plain' and cache 'none' (the defaults) mean the uniform strategy and the encoder
    cache for a uniform-state model."""
    _, model = gemma
    plain = GenerationConfig(gen_length=2 * CANVAS, block_length=CANVAS, steps=2 * STEPS, seed=5)
    explicit = GenerationConfig(gen_length=2 * CANVAS, block_length=CANVAS, steps=2 * STEPS, seed=5,
                                strategy="uniform", cache="encoder")
    assert torch.equal(decode(model, [PROMPT], plain).answer, decode(model, [PROMPT], explicit).answer)


@pytest.mark.parametrize("options, match", [
    (dict(strategy="freedave"), "strategy 'freedave': mask-based"),
    (dict(cache="dual"), "cache 'dual': mask-based"),
    (dict(policy="threshold"), "policy 'threshold': mask-based.*acceptance is policy 'eb_sampler'"),
    (dict(stopper="sched"), "stopper 'sched': mask-based.*stability_threshold"),
    (dict(temperature=1.0), "temperature / top_k / top_p: the temperatures are strategy_args' t_min / t_max"),
    (dict(cfg_scale=1.0), "cfg_scale"),
    (dict(block_length=2 * CANVAS), f"canvases of {CANVAS} tokens .*set block_length={CANVAS}"),
    (dict(edit_threshold=0.9, strategy="uniform"), r"token editing \(edit_threshold\) runs with strategy 'plain'"),
    (dict(strategy="uniform", strategy_args={"draws": "gumbel"}), "draws='gumbel'; expected one of"),
    (dict(policy="threshhold"), r"unknown policy 'threshhold' \(did you mean 'threshold'\?\); known: \[.*'eb_sampler'"),  # a typo, not mask-based
    (dict(cache="encodr"), r"unknown cache 'encodr' \(did you mean 'encoder'\?\); known: \[.*'encoder'"),
])
def test_what_cannot_apply_is_refused_with_the_reason(gemma, options, match):
    _, model = gemma
    with pytest.raises(ValueError, match=match):
        decode(model, [PROMPT], GenerationConfig(**{"gen_length": 2 * CANVAS, "block_length": CANVAS,
                                                     "steps": 2 * STEPS, **options}))


def test_uniform_state_options_on_a_mask_model_and_image_prompts_are_refused(gemma, tiny_models):
    _, model = gemma
    with pytest.raises(ValueError, match="decode uniform-state models .*this model is mask-based"):
        decode(tiny_models["llada"].model, [[5, 6, 7]],
               GenerationConfig(gen_length=8, block_length=8, steps=8, strategy="uniform", cache="encoder"))
    with pytest.raises(ValueError, match="image token .*text model only"):
        decode(model, [[2, 5, 9]], _config())  # id 5 is the tiny checkpoint's image token


def test_stream_gives_generate_s_tokens_canvas_by_canvas(gemma):
    """``stream`` drives the same loop: its last update's ids are ``generate``'s, and each
    canvas arrives whole, in the round its denoising stops."""
    import dllm

    lm = dllm.load(gemma[0].path, device="cpu", dtype="float32")
    options = dict(gen_length=2 * CANVAS, block_length=CANVAS, steps=2 * 3, seed=7, chat=False)
    expected = lm.generate("the quick fox", **options).token_ids[0]
    updates = list(lm.stream("the quick fox", **options))
    assert updates[-1].finished and updates[-1].final_ids == expected
    commits = [sorted(u.committed) for u in updates if u.committed]
    assert commits and all(c == list(range(c[0], c[0] + CANVAS)) and c[0] % CANVAS == 0 for c in commits)


def test_memory_plan_counts_each_layer_s_k_v_and_the_cache_stays_within_it(gemma):
    _, model = gemma
    cfg = model.config
    result = decode(model, [PROMPT, [2, 7]], _config())
    length = len(PROMPT) + CANVASES * CANVAS
    per_position = sum(2 * kv * dim * 4 for dim, kv in (cfg.layer_heads(i) for i in range(cfg.n_layers)))
    assert result.memory["kv_cache_bytes"] == 2 * length * per_position
    assert 0 < result.memory["kv_cache_peak_bytes"] <= result.memory["kv_cache_bytes"]


def test_default_mode_is_transformers_generate_given_the_same_draws(gemma, monkeypatch):
    """transformers' generate with its three draws (canvas, sampled tokens, re-noise) replaced by
    dllm's counter-based ones, keyed as dllm keys them (the row's seed, its steps so far, the
    answer position), gives the default mode's tokens: every step's logic is the reference's."""
    from transformers.models.diffusion_gemma import generation_diffusion_gemma as reference

    ref, model = gemma
    seed, vocab, draws = 9, model.config.vocab_size, CounterDraws()
    clock = {"steps": 0, "window": -1}

    def noise() -> RowNoise:
        positions = clock["window"] * CANVAS + torch.arange(CANVAS)
        return RowNoise(seed=torch.tensor([seed]), clock=torch.tensor([clock["steps"]]), positions=positions)

    def initialize_canvas(self, batch_size, device):  # a canvas's start: the next window
        clock["window"] += 1
        return draws.canvas(noise(), vocab)

    def renoise_canvas(self, accepted, cur_step):
        fresh = draws.renoise(noise(), vocab)
        clock["steps"] += 1  # the step's last draw
        return torch.where(~self.accepted_token_mask, fresh, accepted)

    def multinomial(probs, num_samples):
        return draws.sample(noise(), probs.log().view(1, CANVAS, -1)).view(-1, 1)

    monkeypatch.setattr(reference.EntropyBoundSampler, "initialize_canvas", initialize_canvas)
    monkeypatch.setattr(reference.EntropyBoundSampler, "renoise_canvas", renoise_canvas)
    monkeypatch.setattr(reference.torch, "multinomial", multinomial)
    with torch.no_grad():
        out = ref.generate(torch.tensor([PROMPT]), max_new_tokens=CANVASES * CANVAS, max_denoising_steps=STEPS,
                           t_min=0.4, t_max=0.8, sampler_config=reference.EntropyBoundSamplerConfig(entropy_bound=0.1),
                           stability_threshold=1, confidence_threshold=0.005, eos_token_id=1, pad_token_id=0)
    monkeypatch.undo()
    expected = _until_eos(out.sequences[0, len(PROMPT):].tolist())
    result = decode(model, [PROMPT], _config(), seeds=[seed])
    assert _until_eos(result.answer[0].tolist())[: len(expected)] == expected
