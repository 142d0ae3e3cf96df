"""Sanity of the block-diffusion oracles (tests/oracles_block.py, fastdllm_v2_batch_sample) on
tiny random checkpoints: deterministic, the official answer lengths, and the absolute block
partition (a prompt ending mid-block decodes differently than blocks counted from the answer)."""
from __future__ import annotations

import pytest
import torch

import dllm
from dllm.models.tiny import write_tiny_checkpoint
from dllm.models.visibility import KeyVisibility, block_causal_spans
from tests.oracles import _probs, fastdllm_v2_batch_sample, fastdllm_v2_generate
from tests.oracles_block import SDAR_STRATEGIES, llada2_generate, llada21_generate, sdar_generate


@pytest.fixture(scope="module")
def models(tmp_path_factory, test_device):
    root = tmp_path_factory.mktemp("tiny_block")
    return {fam: dllm.load(write_tiny_checkpoint(root / fam, fam), device=test_device, dtype="float32").model
            for fam in ("llada2_moe", "sdar", "fast_dllm_v2")}


PROMPT = list(range(5, 15))  # 10 tokens: ends mid-block for blocks of 4 and 8


def _llada2_from_answer(model, prompt, *, gen_length, block_length, steps, threshold):
    """LLaDA2's step rule with blocks counted from the answer start (not the official loop)."""
    mask_id, P = model.mask_token_id, len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long, device=model.device)
    x[0, :P] = torch.tensor(prompt)
    quota = [block_length // steps + (i < block_length % steps) for i in range(steps)]
    with torch.no_grad():
        for s in range(P, P + gen_length, block_length):
            e = s + block_length
            for step in range(steps):
                masked = x[0, s:e] == mask_id
                if not bool(masked.any()):
                    break
                spans = block_causal_spans(0, e, e, prompt_width=P, block_size=block_length)
                logits = model(x[:, :e], torch.arange(e, device=model.device)[None], KeyVisibility(spans=spans)).double()
                logits[..., mask_id] = float("-inf")
                conf, x0 = _probs(logits[0, s:e]).max(-1)
                conf = torch.where(masked, conf, torch.tensor(float("-inf"), dtype=conf.dtype, device=conf.device))
                take = conf > threshold
                if int(take.sum()) < quota[step]:
                    take = torch.zeros_like(masked)
                    take[torch.topk(conf, min(quota[step], int(masked.sum()))).indices] = True
                x[0, s:e] = torch.where(take, x0, x[0, s:e])
    return x[0, P:].tolist()


def test_llada2_deterministic_and_cut(models):
    m = models["llada2_moe"]
    kw = dict(gen_length=20, block_length=8, steps=8, threshold=0.05)
    a = llada2_generate(m, PROMPT, eos_id=None, **kw)
    assert a == llada2_generate(m, PROMPT, eos_id=None, **kw) and len(a) == 20
    assert m.mask_token_id not in a
    eos = a[5]  # any produced token as eos: the answer stops after its first occurrence
    cut = llada2_generate(m, PROMPT, eos_id=eos, **kw)
    assert cut == a[: a.index(eos) + 1]
    early = llada2_generate(m, PROMPT, eos_id=eos, eos_early_stop=True, **kw)
    assert early[-1] == eos and eos not in early[:-1]
    # steps capped at gen_length // minimal_topk: 2 steps of quota 4
    assert llada2_generate(m, PROMPT, eos_id=None, minimal_topk=10, **kw) == \
        llada2_generate(m, PROMPT, eos_id=None, **{**kw, "steps": 2})


def test_llada2_partition_is_absolute(models):
    m = models["llada2_moe"]
    kw = dict(gen_length=16, block_length=8, steps=8, threshold=0.05)
    aligned = list(range(5, 21))  # 16 tokens: both partitions coincide
    assert llada2_generate(m, aligned, eos_id=None, **kw) == _llada2_from_answer(m, aligned, **kw)
    official = llada2_generate(m, PROMPT, eos_id=None, **kw)
    assert official != _llada2_from_answer(m, PROMPT, **kw)


def test_llada21_editing(models):
    m = models["llada2_moe"]
    kw = dict(gen_length=20, block_length=8, threshold=0.05, eos_id=None)
    plain = llada21_generate(m, PROMPT, editing_threshold=1.0, max_post_steps=0, **kw)
    assert plain == llada21_generate(m, PROMPT, editing_threshold=1.0, max_post_steps=0, **kw)
    assert len(plain) == 20 and m.mask_token_id not in plain
    # no edits and num_to_transfer = 1 is LLaDA2.0 with quota 1 a step (steps = block length)
    assert plain == llada2_generate(m, PROMPT, gen_length=20, block_length=8, steps=8, threshold=0.05, eos_id=None)
    edited = llada21_generate(m, PROMPT, editing_threshold=0.05, max_post_steps=4, **kw)
    assert len(edited) == 20 and edited != plain


@pytest.mark.parametrize("strategy", SDAR_STRATEGIES)
def test_sdar_strategies(models, strategy):
    m = models["sdar"]
    kw = dict(gen_length=10, block_length=4, denoising_steps=4, remasking_strategy=strategy,
              confidence_threshold=0.05, eb_threshold=10.0)
    out = sdar_generate(m, PROMPT, **kw)
    assert out == sdar_generate(m, PROMPT, **kw)
    assert len(out) == 12 - 10 + 8 and m.mask_token_id not in out  # canvas 20 = ceil(20 / 4) * 4
    first = out.index(out[2])
    end = (10 + first) // 4 * 4 + 4 - 10  # the end of the block holding the first occurrence
    stop = sdar_generate(m, PROMPT, stop_ids=[out[2]], **kw)  # stops after that block
    assert stop[:end] == out[:end] and stop[end:] == [m.mask_token_id] * (len(out) - end)


def test_v2_unaligned_prompts(models):
    m = models["fast_dllm_v2"]
    bd = m.config.block_size
    kw = dict(gen_length=16, small_block_size=4, threshold=0.02)
    for P in (3, 11):
        out = fastdllm_v2_batch_sample(m, list(range(5, 5 + P)), **kw)
        assert out == fastdllm_v2_batch_sample(m, list(range(5, 5 + P)), **kw)
        assert len(out) == 16 - P % bd + 1 and m.mask_token_id not in out
        assert fastdllm_v2_generate(m, list(range(5, 5 + P)), **kw) == out
    aligned = fastdllm_v2_batch_sample(m, list(range(5, 5 + 2 * bd)), **kw)
    assert len(aligned) == 17 and fastdllm_v2_generate(m, list(range(5, 5 + 2 * bd)), **kw) == aligned[:16]
    # a prompt of exactly one block is never seen by the official loop
    one = fastdllm_v2_batch_sample(m, list(range(5, 5 + bd)), **kw)
    assert one == fastdllm_v2_batch_sample(m, list(range(50, 50 + bd)), **kw)
    assert fastdllm_v2_generate(m, list(range(5, 5 + bd)), **kw) != one[:16]


def test_v2_stop_token(models):
    m = models["fast_dllm_v2"]
    kw = dict(gen_length=16, small_block_size=4, threshold=0.02)
    out = fastdllm_v2_batch_sample(m, PROMPT, **kw)
    stop = out[3]
    cut = fastdllm_v2_batch_sample(m, PROMPT, stop_token=stop, pad_token_id=-1, **kw)
    first = cut.index(stop)
    assert cut[first + 1:] == [-1] * (len(cut) - first - 1) and (len(cut) + len(PROMPT)) % m.config.block_size == 0


def test_sdar_cache_and_partition(models):
    """SDAR's cached loop at quota 1 (static, steps = block) commits what LLaDA2's recomputing
    loop commits with a threshold never met: the same absolute partition, K/V of committed
    blocks as a recompute gives; blocks counted from the answer decode differently."""
    m = models["sdar"]
    ours = sdar_generate(m, PROMPT, gen_length=10, block_length=4, denoising_steps=4,
                         remasking_strategy="low_confidence_static")
    again = llada2_generate(m, PROMPT, gen_length=10, block_length=4, steps=4, threshold=2.0, eos_id=None)
    assert ours[:10] == again
    assert ours[:8] != _llada2_from_answer(m, PROMPT, gen_length=8, block_length=4, steps=4, threshold=2.0)
