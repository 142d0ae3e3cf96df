"""Plain re-implementations of the official LLaDA and Dream decode loops (batch 1, T = 0).

Written from the published pseudo-code (LLaDA ``generate.py``; Dream ``_sample``), with the
mask token's logit set to -inf as dllm does. They share no code with the engine.
"""
from __future__ import annotations

import torch


def _logits(model, x):
    pos = torch.arange(x.shape[1])[None]
    logits = model(x, pos).double()
    logits[..., model.mask_token_id] = float("-inf")
    return logits


@torch.no_grad()
def llada_generate(model, prompt, *, steps, gen_length, block_length, remasking="low_confidence"):
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
    return x[0, P:].tolist()


@torch.no_grad()
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
