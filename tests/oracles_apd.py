"""APD's released loop (danielmisrael/apd, ``dream/generation_utils.py``: ``apd_sample`` with
``apd_accept_criterion``), batch 1, temperature 0, with or without its diffusion K/V window.

Written from the published code: the canvas is the prompt and ``gen_length`` masks; each round
forwards the diffusion model on the canvas up to ``curr + max_lookahead`` (Dream's right shift
for shifted families), drafts the argmax at every masked position of that window, and runs the
helper (a transformers causal LM) as the released loop does: the first round on the whole draft
without a cache, later rounds on the window's draft only, at its cache positions, over the K/V
of the prompt and the accepted tokens (cropped after each round), the first window position's
logits carried over from the round before. The target is the argmax of ``R * diffusion logits +
(1 - R) * helper logits`` over the helper's vocabulary; the accepted count is the cumulative
product of draft == target with position 0 forced. It stops when no mask is left or an
end-of-text is in the canvas. It shares no code with the engine (the mask token's logit is -inf,
as dllm does).

With ``kv_window`` (W) the diffusion model keeps its K/V as the released loop's cache does: the
first round forwards [0, right) and keeps every K/V; each later round crops the cache to
``left = max(curr - W - num_accept + 1, 0)`` (curr already advanced by the accepted count) and
forwards [left, right) at its positions over the kept K/V of [0, left). Here the cache is the
model's static per-layer buffers (written at ``left``) with keys at or past ``right`` hidden,
which is what the crop-and-append leaves visible.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from dllm.models.visibility import KeyVisibility
from dllm.samplers.strategies.apd_helper_cache import cache_argument
from tests.oracles import _on_model_device


@_on_model_device
def apd_generate(model, helper, prompt: list[int], *, gen_length: int, mixture_weight: float,
                 max_lookahead: int | None, eos_id: int, kv_window: int | None = None) -> list[int]:
    """The answer tokens (masks left where the loop stopped) and the rounds it took."""
    mask_id = model.mask_token_id
    V_h = helper.get_input_embeddings().weight.shape[0]
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    L = x.shape[1]
    curr, prefilling, past, prev_logits, rounds = P, True, None, None, 0
    diffusion_kv, num_accept = None, 0
    while curr < L:
        right = min(curr + max_lookahead, L) if max_lookahead is not None else L
        window = x[:, :right]
        if kv_window is None:
            logits = model(window, torch.arange(right)[None]).double()
        else:
            left = 0 if diffusion_kv is None else max(curr - kv_window - num_accept + 1, 0)
            if diffusion_kv is None:
                diffusion_kv = _kv_buffers(model, L)
            keys = KeyVisibility(valid=(torch.arange(L) < right)[None])
            part = model(x[:, left:right], torch.arange(left, right)[None], keys, diffusion_kv, left).double()
            logits = torch.cat([part.new_zeros(1, left, part.shape[-1]), part], dim=1)  # (1, right, V)
        logits[..., mask_id] = float("-inf")
        if model.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        rounds += 1
        mask_logits = logits[window == mask_id]  # (n, V)
        x0 = mask_logits.argmax(-1)
        diffusion_logits = mask_logits[:, :V_h].unsqueeze(0)
        if prefilling:
            draft = x.clone()[:, :right]
            draft[:, curr:right] = x0
            out = helper(draft, use_cache=True)
            verifier_logits = out.logits[:, curr - 1 : -1].double()
        else:
            draft = x0.clone().unsqueeze(0)
            cache_position = torch.arange(curr, right)
            out = helper(draft, cache_position=cache_position, position_ids=cache_position.unsqueeze(0),
                         use_cache=True, **{cache_argument(helper): past})  # transformers 5.17: past_key_values
            verifier_logits = torch.cat([prev_logits, out.logits[:, :-1].double()], dim=1)
        past = out["cache"] if "cache" in out else out.past_key_values
        if max_lookahead is not None:
            verifier_logits = verifier_logits[:, :max_lookahead]
        prefilling = False
        n = diffusion_logits.shape[1]
        verifier_logits = verifier_logits[..., : diffusion_logits.shape[-1]]
        target = (mixture_weight * diffusion_logits + (1 - mixture_weight) * verifier_logits).argmax(-1)
        accept = draft[:, -n:] == target
        accept[:, 0] = True
        num_accept = min(int(torch.cumprod(accept.long(), -1).sum()), n)
        prev_logits = verifier_logits[:, num_accept if num_accept < verifier_logits.shape[1] else -1].unsqueeze(1)
        _crop_to(past, curr + num_accept)
        x[0, curr : curr + num_accept] = x0[:num_accept]
        curr += num_accept
        if not bool((x == mask_id).any()) or bool((x == eos_id).any()):
            break
    return x[0, P:].tolist(), rounds


def _kv_buffers(model, length: int) -> SimpleNamespace:
    """Zeroed (1, H_kv, length, D) K and V buffers per layer, as the model's cached forward takes."""
    c = model.config
    shape = (1, c.n_kv_heads, length, c.head_dim)
    make = lambda: torch.zeros(shape, dtype=model.dtype, device=model.device)  # noqa: E731
    return SimpleNamespace(layers=[(make(), make()) for _ in range(c.n_layers)])


def _crop_to(past, keep: int) -> None:
    """The released ``crop(curr + num_accept)``: keep the first ``keep`` positions' K/V
    (transformers 5 crops by a negative count of positions to drop)."""
    drop = past.get_seq_length() - keep
    if drop > 0:
        past.crop(-drop)


@_on_model_device
def guided_generate(model, helper, prompt: list[int], *, gen_length: int, eos_id: int) -> tuple[list[int], int]:
    """FlashDLM's guided diffusion with deterministic verification (batch 1): each round the
    diffusion model's argmax at every mask is the draft, the helper's argmax after the clean
    prefix and the draft before each position is the choice; choices are written from the first
    mask up to the first one that differs from its draft, which ends the round; a chosen
    end-of-text ends the decode. Returns the answer and the rounds (diffusion forwards)."""
    mask_id = model.mask_token_id
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    rounds = 0
    while bool((x == mask_id).any()):
        logits = model(x, torch.arange(x.shape[1])[None]).double()
        logits[..., mask_id] = float("-inf")
        if model.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        rounds += 1
        masks = (x[0] == mask_id).nonzero().flatten().tolist()
        drafts = logits[0, masks].argmax(-1).tolist()
        seq = x[0, : masks[0]].tolist() + drafts  # the clean prefix, then the draft
        choice_logits = helper(torch.tensor([seq])).logits[0].double()
        choice_logits[:, mask_id] = float("-inf")
        stop = False
        for k, (pos, draft) in enumerate(zip(masks, drafts)):
            chosen = int(choice_logits[pos - 1].argmax())
            x[0, pos] = chosen
            if chosen == eos_id:
                stop = True
                break
            if chosen != draft:
                break
        if stop:
            break
    return x[0, P:].tolist(), rounds
