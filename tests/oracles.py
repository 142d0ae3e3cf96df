"""Plain re-implementations of the official decode loops (batch 1, T = 0).

Written from the published code (LLaDA ``generate.py``; Dream ``_sample``; Fast-dLLM's Dream
block loop and v2 ``batch_sample``), with the mask token's logit set to -inf as dllm does. They
share no code with the engine: the cached loops call the model's forward with their own K/V
buffers and attention masks.
"""
from __future__ import annotations

import functools

import torch

from dllm.models.visibility import KeyVisibility


def _on_model_device(loop):
    """No autograd, and every tensor the loop creates on the model's device (the suite may run
    on a GPU: DLLM_TEST_DEVICE)."""
    @functools.wraps(loop)
    def run(model, *args, **kwargs):
        with torch.no_grad(), torch.device(model.device):
            return loop(model, *args, **kwargs)
    return run


def _logits(model, x):
    pos = torch.arange(x.shape[1])[None]
    logits = model(x, pos).double()
    logits[..., model.mask_token_id] = float("-inf")
    return logits


@_on_model_device
def llada_generate(model, prompt, *, steps, gen_length, block_length, remasking="low_confidence",
                   logprobs=None):
    """LLaDA's ``generate``. ``logprobs``: a dict this fills with each answer position's
    log-softmax (V,) under the forward that committed it (the mask token excluded, as sampled)."""
    mask_id = model.mask_token_id
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    num_blocks = gen_length // block_length
    spb = steps // num_blocks
    for b in range(num_blocks):
        block = x[:, P + b * block_length : P + (b + 1) * block_length] == mask_id
        m = block.sum(-1, keepdim=True)
        ntt = torch.zeros(1, spb, dtype=torch.long) + m // spb
        ntt[:, : int(m % spb)] += 1
        for i in range(spb):
            mask_index = x == mask_id
            logits = _logits(model, x)
            x0 = logits.argmax(-1)
            if remasking == "low_confidence":
                p = logits.softmax(-1)
                x0_p = torch.gather(p, -1, x0[..., None])[..., 0]
            else:
                raise ValueError(remasking)
            x0_p[:, P + (b + 1) * block_length :] = float("-inf")
            x0 = torch.where(mask_index, x0, x)
            conf = torch.where(mask_index, x0_p, torch.tensor(float("-inf"), dtype=x0_p.dtype))
            k = int(ntt[0, i])
            if k > 0:
                _, sel = torch.topk(conf[0], k=k)
                x[0, sel] = x0[0, sel]
                if logprobs is not None:
                    logprobs.update((j - P, logits[0, j].log_softmax(-1)) for j in sel.tolist())
    return x[0, P:].tolist()


@_on_model_device
def dream_generate(model, prompt, *, steps, gen_length, alg, eps=1e-3):
    mask_id = model.mask_token_id
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    ts = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = x == mask_id
        logits = _logits(model, x)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # Dream's right shift
        masked_logits = logits[mask_index]
        t, s = ts[i], ts[i + 1]
        p = masked_logits.softmax(-1)
        conf, x0 = p.max(-1)
        if alg == "topk_margin":
            top2 = p.topk(2, dim=-1).values
            conf = top2[:, 0] - top2[:, 1]
        elif alg == "entropy":
            conf = (p * torch.log(p.clamp_min(1e-300))).sum(-1)
        elif alg != "maskgit_plus":
            raise ValueError(alg)
        n = mask_index.sum()
        k = int(n * (1 - s / t)) if i < steps - 1 else int(n)
        full_conf = torch.full(x.shape, float("-inf"), dtype=torch.float64)
        full_conf[mask_index] = conf
        if k > 0:
            _, sel = torch.topk(full_conf[0], k)
            cand = torch.full_like(x, mask_id)
            cand[mask_index] = x0
            x[0, sel] = cand[0, sel]
    return x[0, P:].tolist()


# --- Fast-dLLM's own loops (NVlabs/Fast-dLLM), batch 1, temperature 0 -------------------------


def _probs(logits):
    """Softmax over the vocabulary (float64 logits with the mask token already at -inf)."""
    return logits.softmax(-1)


class _LayerCache:
    """Per-layer full-length K/V buffers: the model writes a window's K/V at its offset."""

    def __init__(self, model, length):
        shape = (1, model.config.n_kv_heads, length, model.config.head_dim)
        self.layers = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(model.config.n_layers)]


def _forward(model, x, start, end, cache, block_size=None):
    """Logits (float64, mask token -inf) of x[:, start:end] against ``cache`` (written at start).
    ``block_size``: block-causal attention with blocks counted from position 0 (each query's
    block and the earlier ones are visible), given to the model as per-block key lengths."""
    pos = torch.arange(start, end)[None]
    visible = None
    if block_size is not None:
        spans = [(q - start, min(q - q % block_size + block_size, end) - start, q - q % block_size + block_size)
                 for q in range(start, end) if q == start or q % block_size == 0]
        visible = KeyVisibility(spans=tuple(spans))
    logits = model(x[:, start:end], pos, visible, cache, start).double()
    logits[..., model.mask_token_id] = float("-inf")
    return logits


@_on_model_device
def fastdllm_dream_generate(model, prompt, *, gen_length, block_length, threshold, dual_cache, refill="block"):
    """Fast-dLLM's Dream block loop (``dream/model/generation_utils_block.py``, ``_sample`` with
    ``alg="confidence_threshold"``). Per block: a full forward fills the cache and commits the
    block's first position by argmax; then each step forwards x[s:] (prefix) or x[s:e] (dual,
    K/V of [s, e) replaced) with the window's own right shift, and commits the most confident
    masked block position plus every one with probability >= threshold.

    ``refill``: "block" (the official loop), "step" (the cache refilled from the current canvas
    before every step, so each cached step is a full forward's window) or "none" (no K/V cache:
    full forwards, read at the window). "step" and "none" agree token for token unless the
    cached forward (the K/V write and the attention over the buffers) is wrong."""
    mask_id = model.mask_token_id
    P, L = len(prompt), len(prompt) + gen_length
    x = torch.full((1, L), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    for b in range(gen_length // block_length):
        s, e = P + b * block_length, P + (b + 1) * block_length
        cache = None if refill == "none" else _LayerCache(model, L)
        logits = _forward(model, x, 0, L, cache)
        x[0, s] = logits[0, s - 1].argmax()  # Dream's shift: position s reads output s - 1
        while True:
            end = e if dual_cache else L
            if refill == "step":
                _forward(model, x, 0, L, cache)
            if refill == "none":
                logits = _forward(model, x, 0, L, None)[:, s:end]
            else:
                logits = _forward(model, x, s, end, cache)
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)[0, :block_length]
            masked = x[0, s:e] == mask_id
            conf, x0 = _probs(logits).max(-1)
            conf = torch.where(masked, conf, torch.tensor(float("-inf"), dtype=conf.dtype))
            chosen, order = conf.sort(descending=True)
            take = torch.zeros_like(masked)
            n = int(masked.sum())
            take[order[:1]] = n > 0
            take[order[1:n]] = chosen[1:n] >= threshold
            x[0, s:e] = torch.where(take, x0, x[0, s:e])
            if not bool((x[0, s:e] == mask_id).any()):
                break
    return x[0, P:].tolist()


@_on_model_device
def fastdllm_v2_batch_sample(model, prompt, *, gen_length, small_block_size, threshold, stop_token=None,
                             pad_token_id=None, official_one_block=True, use_cache=True):
    """Fast-dLLM v2's ``batch_sample`` (``v2/generation_functions.py``) at batch 1 without the
    sub-block cache (``use_block_cache=False``); the decode block is the model's ``bd_size``.

    Blocks are absolute (position // bd). A prompt longer than one block has its whole blocks
    [0, P // bd * bd) prefilled (block-causal, K/V kept); only when P is a multiple of bd does
    that prefill's last output commit the first answer token by argmax. A shorter prompt is not
    prefilled: its block (prompt + masks) is the first decode block. A prompt of exactly one
    block is not prefilled either (the official test is ``min_len > block_size``): the first
    answer block is decoded without the prompt, at positions from 0, and the prompt is never
    seen (``official_one_block=False`` prefills it instead, as for longer aligned prompts).
    Blocks P // bd .. P // bd + gen_length // bd - 1 are decoded sub-block by sub-block: forward
    the whole block against the cache, shift right by one, commit the sub-block's most confident
    mask plus every mask with probability > threshold. A finished block is forwarded once more
    to store its K/V, and its last output commits the next position by argmax.

    ``stop_token``: a row finishes when a step commits it (not when the argmax after a block
    does); its block is still completed, then everything after the first stop_token at or after
    P becomes ``pad_token_id``, the block is not stored and the loop ends.

    Returns the official row from P on: up to the end of the last decoded block plus the argmax
    token after it (gen_length - P % bd + 1 tokens, P < bd: gen_length - P + 1), or up to the end
    of the block where the row finished (padded after the stop token).

    ``use_cache=False``: every forward recomputes the view from its start (block-causal, no K/V
    kept), which a block-causal model's cache must reproduce exactly."""
    mask_id, bd = model.mask_token_id, model.config.block_size
    P = len(prompt)
    first_block, last_block = P // bd, P // bd + gen_length // bd
    x = torch.full((1, last_block * bd + 1), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    cache = _LayerCache(model, x.shape[1])
    base = 0  # canvas positions the model never sees (a one-block prompt, officially)
    if P > bd or (P == bd and not official_one_block):
        logits = _forward(model, x, 0, P // bd * bd, cache if use_cache else None, bd)
        if P % bd == 0:
            x[0, P] = logits[0, -1].argmax()
    else:
        base = P // bd * bd
    view = x[:, base:]

    def forward(start, end):
        if use_cache:
            return _forward(model, view, start, end, cache, bd)
        return _forward(model, view, 0, end, None, bd)[:, start:]

    for s in range(first_block * bd, last_block * bd, bd):
        finished = False
        for sub in range(s, s + bd, small_block_size):
            while bool((x[0, sub : sub + small_block_size] == mask_id).any()):
                logits = forward(s - base, s - base + bd)
                logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)[0, sub - s : sub - s + small_block_size]
                masked = x[0, sub : sub + small_block_size] == mask_id
                conf, x0 = _probs(logits).max(-1)
                conf = torch.where(masked, conf, torch.tensor(float("-inf"), dtype=conf.dtype))
                take = (conf > threshold) & masked
                take[conf.argmax()] = True
                x[0, sub : sub + small_block_size] = torch.where(take, x0, x[0, sub : sub + small_block_size])
                finished |= stop_token is not None and bool((x0[take] == stop_token).any())
        if finished:
            stop = P + int((x[0, P : s + bd] == stop_token).nonzero()[0, 0])
            x[0, stop + 1 : s + bd] = pad_token_id
            return x[0, P : s + bd].tolist()
        logits = forward(s - base, s - base + bd)  # the block commit
        x[0, s + bd] = logits[0, -1].argmax()
    return x[0, P:].tolist()


def fastdllm_v2_generate(model, prompt, *, gen_length, small_block_size, threshold, use_cache=True):
    """``fastdllm_v2_batch_sample`` without a stop token, cut to gen_length (the official row
    also holds the argmax token after the last block). Any prompt length; a prompt of exactly
    one block is prefilled (the official loop ignores it: ``fastdllm_v2_batch_sample``)."""
    return fastdllm_v2_batch_sample(model, prompt, gen_length=gen_length, small_block_size=small_block_size,
                                    threshold=threshold, official_one_block=False, use_cache=use_cache)[:gen_length]


@_on_model_device
def dream_threshold_generate(model, prompt, *, steps, gen_length, threshold):
    """Dream's official ``alg="confidence_threshold"`` (``_sample``, no cache, one block): a step
    takes the most confident mask plus those >= threshold among its budget, masks // steps plus
    the budget earlier steps left; each token rejected at the last step adds a step (with no
    new budget). The official loop runs out its steps even when nothing is left to commit."""
    mask_id = model.mask_token_id
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    per_step, left, i = gen_length // steps, 0, 0
    while i < steps:
        masked = x[0] == mask_id
        logits = _logits(model, x)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)[0]
        conf, x0 = _probs(logits).max(-1)
        conf = torch.where(masked, conf, torch.tensor(float("-inf"), dtype=conf.dtype))
        budget = per_step + left
        left = 0
        chosen, order = conf.topk(budget)
        take = torch.zeros_like(masked)
        take[order[:1]] = True
        last = i == steps - 1
        for k in range(1, budget):
            if chosen[k] < threshold:
                left += 1
                if last:  # no new budget, and one more step per token left
                    per_step = 0
                    steps += 1
            else:
                take[order[k]] = True
        x[0] = torch.where(take & masked, x0, x[0])
        i += 1
    return x[0, P:].tolist()
