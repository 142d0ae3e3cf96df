"""Plain re-implementations of the official block-diffusion decode loops (batch 1, T = 0).

Written from the published code, read, not copied:

* LLaDA2.0 ``LLaDA2MoeModelLM.generate`` (HF remote code ``modeling_llada2_moe.py``, read in the
  ZHZisZZ/dllm mirror ``dllm/pipelines/llada2/models/`` and inclusionAI/dFactory
  ``models/llada2_moe/``);
* LLaDA2.1's editing ``generate`` (ZHZisZZ/dllm ``dllm/pipelines/llada21/models/``; SGLang
  ``srt/dllm/algorithm/joint_threshold.py`` is the same rule at num_to_transfer 1);
* SDAR ``block_diffusion_generate`` (JetAstra/SDAR ``generate.py``; Gen-Verse/dLLM-RL copy).

Fast-dLLM v2's ``batch_sample`` lives in tests/oracles.py beside the other Fast-dLLM loops.

Temperature 0 throughout: the token is the argmax and its confidence the softmax probability
over the whole vocabulary (float64), with the mask token's logit set to -inf as dllm does (the
official code leaves it in; a model that never predicts its mask token decodes the same). Every
loop counts blocks of absolute positions from 0, so a prompt that ends mid-block has the rest of
its last block decoded together with the first answer tokens. They share no code with the
engine: they call the model's forward with ``KeyVisibility`` spans (tests/oracles.py ``_forward``).
"""
from __future__ import annotations

import torch

from tests.oracles import _LayerCache, _forward, _on_model_device, _probs

_NEG = float("-inf")


def _even_schedule(block_length: int, steps: int) -> list[int]:
    """block_length split over steps, the remainder on the first steps (LLaDA's schedule)."""
    if steps <= 0:
        return []
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def _argmax_conf(logits):
    """(confidence, token) per row: softmax over the vocabulary, its max and argmax."""
    return _probs(logits).max(-1)


def _answer_cut(x, P, gen_length, eos_id):
    """x[P : P + gen_length], cut after its first eos (kept) when there is one."""
    ans = x[0, P : P + gen_length].tolist()
    if eos_id is not None and eos_id in ans:
        ans = ans[: ans.index(eos_id) + 1]
    return ans


# --- LLaDA2.0 ------------------------------------------------------------------------------------


@_on_model_device
def llada2_generate(model, prompt, *, gen_length, block_length=32, steps=32, threshold=0.95,
                    minimal_topk=1, eos_early_stop=False, eos_id=None):
    """LLaDA2.0 ``generate`` (no cache: each step recomputes x[:window_end] block-causally).

    Returns the answer as the official code does: x[P : P + gen_length] cut after its first
    ``eos_id`` (kept), or the full gen_length when there is none (never padded: positions of a
    block the loop did not reach stay ``mask_token_id``). With ``eos_early_stop`` the in-block
    return is x[P : first_eos + 1] where first_eos is the first eos of the whole canvas up to
    the window end (a prompt holding eos gives []; an eos in the last block's overflow past
    P + gen_length makes the answer longer than gen_length), as the official code does."""
    mask_id = model.mask_token_id
    P = len(prompt)
    steps = min(steps, gen_length // minimal_topk)
    n_blocks = -(-(P + gen_length) // block_length)
    x = torch.full((1, n_blocks * block_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    quota = _even_schedule(block_length, steps)
    for b in range(P // block_length, n_blocks):
        s, e = b * block_length, (b + 1) * block_length
        for step in range(steps):
            masked = x[0, s:e] == mask_id
            if not bool(masked.any()):
                break
            conf, x0 = _argmax_conf(_forward(model, x, 0, e, None, block_length)[0, s:e])
            conf = torch.where(masked, conf, torch.tensor(_NEG, dtype=conf.dtype))
            high = conf > threshold
            take = torch.zeros_like(masked)
            if int(high.sum()) >= quota[step]:
                take = high
            else:
                take[torch.topk(conf, min(quota[step], int(masked.sum()))).indices] = True
            x[0, s:e] = torch.where(take, x0, x[0, s:e])
            if eos_early_stop and bool((x0[take] == eos_id).any()):
                first = int((x[0, :e] == eos_id).nonzero()[0, 0])
                if bool((x[0, P:first] != mask_id).all()):
                    return x[0, P : first + 1].tolist()
        if eos_id is not None and bool((x[0, P:e] == eos_id).any()):
            break
    return _answer_cut(x, P, gen_length, eos_id)


# --- LLaDA2.1 (token editing) --------------------------------------------------------------------


@_on_model_device
def llada21_generate(model, prompt, *, gen_length, block_length=32, threshold=0.95,
                     editing_threshold=0.9, max_post_steps=16, num_to_transfer=1,
                     eos_early_stop=False, eos_id=None, edits=None):
    """LLaDA2.1 ``generate`` with token editing (no cache; ``steps`` / ``minimal_topk`` of the
    official signature are computed there but never used, so they are not taken here).

    Per block, until it ends: one forward of x[:window_end]; masks: every one above
    ``threshold`` if at least ``num_to_transfer`` are, else the top min(num_to_transfer,
    masks); edits: every already decoded, non-prompt position of this block whose argmax
    differs from its token with probability above ``editing_threshold``. Returns what the
    official code returns: x[P : P + gen_length] cut after its first eos (kept). ``edits``: a
    list this appends each edit's answer position to (a position rewritten twice, twice)."""
    assert num_to_transfer >= 1, "the official loop never ends when no mask passes and the quota is 0"
    mask_id = model.mask_token_id
    P = len(prompt)
    n_blocks = -(-(P + gen_length) // block_length)
    x = torch.full((1, n_blocks * block_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    for b in range(P // block_length, n_blocks):
        s, e = b * block_length, (b + 1) * block_length
        is_prompt = torch.arange(s, e) < P
        post_steps = 0
        while True:
            old = x[0, s:e].clone()
            masked = old == mask_id
            if not bool(masked.any()):
                post_steps += 1
            if post_steps > max_post_steps:
                break
            conf, x0 = _argmax_conf(_forward(model, x, 0, e, None, block_length)[0, s:e])
            take = torch.zeros_like(masked)
            if bool(masked.any()):
                mconf = torch.where(masked, conf, torch.tensor(_NEG, dtype=conf.dtype))
                high = mconf > threshold
                if int(high.sum()) >= num_to_transfer:
                    take = high
                else:
                    take[torch.topk(mconf, min(num_to_transfer, int(masked.sum()))).indices] = True
            edit = ~masked & ~is_prompt & (conf > editing_threshold) & (x0 != old)
            x[0, s:e] = torch.where(take | edit, x0, old)
            if edits is not None:
                edits += [s + int(i) - P for i in edit.nonzero()[:, 0]]
            if not bool(masked.any()) and not bool(edit.any()):
                break
        if eos_early_stop:
            done = x[0, P:e]
            if not bool((done == mask_id).any()) and bool((done == eos_id).any()):
                break
    return _answer_cut(x, P, gen_length, eos_id)


# --- SDAR / TraDo --------------------------------------------------------------------------------


SDAR_STRATEGIES = ("low_confidence_static", "low_confidence_dynamic", "sequential", "entropy_bounded")


@_on_model_device
def sdar_generate(model, prompt, *, gen_length, block_length=4, denoising_steps=4,
                  remasking_strategy="low_confidence_dynamic", confidence_threshold=0.85,
                  eb_threshold=0.35, stop_ids=None):
    """SDAR ``block_diffusion_generate`` with its KV cache of committed blocks.

    Prefill: the whole prompt blocks [0, P // bl * bl), block-causal, K/V stored. Then each
    block from P // bl: up to denoising_steps + 1 passes; a pass with no mask left re-runs the
    block to store its K/V and ends it; otherwise forward the block against the cache (it sees
    the cache and itself), take argmax / softmax confidence, commit by the strategy.
    ``entropy_bounded`` is the intended rule (the JetEngine scheduler's: per-position entropy
    of the vocabulary distribution); the ``generate.py`` branch as written cannot run.

    Returns x[P:] of the official canvas, as ``generate.py`` returns the whole canvas: length
    ceil((P + gen_length) / bl) * bl - P (the last block's overflow is kept), no eos cut;
    blocks after the one where a ``stop_ids`` token appeared stay ``mask_token_id``."""
    if remasking_strategy not in SDAR_STRATEGIES:
        raise ValueError(remasking_strategy)
    mask_id, bl = model.mask_token_id, block_length
    P = len(prompt)
    n_blocks = -(-(P + gen_length) // bl)
    L = n_blocks * bl
    x = torch.full((1, L), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    cache = _LayerCache(model, L)
    head = P // bl * bl
    if head > 0:
        _forward(model, x, 0, head, cache, bl)
    quota = _even_schedule(bl, denoising_steps)
    for b in range(P // bl, n_blocks):
        s, e = b * bl, (b + 1) * bl
        for step in range(denoising_steps + 1):
            masked = x[0, s:e] == mask_id
            if not bool(masked.any()):
                _forward(model, x, s, e, cache, bl)  # store the finished block's K/V
                break
            probs = _probs(_forward(model, x, s, e, cache, bl)[0])
            conf, x0 = probs.max(-1)
            mconf = torch.where(masked, conf, torch.tensor(_NEG, dtype=conf.dtype))
            take = torch.zeros_like(masked)
            if remasking_strategy == "sequential":
                first = int(masked.nonzero()[0, 0])
                take[first : first + quota[step]] = True
            elif remasking_strategy == "low_confidence_static":
                take[torch.topk(mconf, quota[step]).indices] = True
            elif remasking_strategy == "low_confidence_dynamic":
                high = mconf > confidence_threshold
                if int(high.sum()) >= quota[step]:
                    take = high
                else:
                    take[torch.topk(mconf, quota[step]).indices] = True
            else:  # entropy_bounded
                where = masked.nonzero()[:, 0]
                p = probs[where].clamp_min(1e-12)
                ent = -(p * p.log()).sum(-1)
                ent_sorted, order = torch.sort(ent)
                k = int(torch.searchsorted(ent_sorted.cumsum(0), torch.tensor(eb_threshold, dtype=ent.dtype)))
                take[where[order[: max(1, k)]]] = True
            # topk with a quota above the masks left also takes non-mask positions (-inf
            # confidence) and rewrites them with their argmax, as the official code does
            x[0, s:e] = torch.where(take, x0, x[0, s:e])
        else:
            raise NotImplementedError("denoising_steps + 1 passes all decoded, so the official loop never "
                                      "stored this block's K/V (entropy_bounded, denoising_steps < masks)")
        if stop_ids is not None and any(bool((x[0, P:] == t).any()) for t in stop_ids):
            break
    return x[0, P:].tolist()
