"""A plain re-implementation of D2F's pipelined decode loop (batch 1, T = 0).

Written from the published code, read, not copied: ``_generate_block_single`` of
zhijie-group/Discrete-Diffusion-Forcing ``D2F-eval/eval_llada.py`` (LLaDA) and ``eval_dream.py``
(Dream: logits shifted by one). Blocks carry D2F's states (active -> to_cache -> in_cache) and
flags (is_complete) exactly as the loop keeps them; what differs is only how the logits are
computed: every step forwards the whole sequence with D2F's attention mask
(``create_full_block_attention_mask``: the prompt is one block, answer blocks of block_size from
the prompt's end, each seeing the prompt, earlier blocks and itself) instead of the official K/V
cache, which a block-causal mask makes equal. Confidences are softmax probabilities in float64
with the mask token's logit at -inf (as dllm; the official code keeps it in the softmax), ties of
the top-1 pick go to the lower position. Shares no code with the engine.
"""
from __future__ import annotations

import torch

from dllm.models.visibility import KeyVisibility
from tests.oracles import _on_model_device


def d2f_logits(model, x, prompt_length: int, block_size: int):
    """(1, T, V) float64 logits of x under D2F's mask (Dream: position i reads output i - 1)."""
    T = x.shape[1]
    spans = [(0, prompt_length, prompt_length)]
    for start in range(prompt_length, T, block_size):
        end = min(start + block_size, T)
        spans.append((start, end, end))
    logits = model(x, torch.arange(T)[None], KeyVisibility(spans=tuple(spans))).double()
    logits[..., model.mask_token_id] = float("-inf")
    if model.shift_logits:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return logits


def _decoded_share(block) -> float:
    return (block["total"] - block["masks"]) / block["total"]


@_on_model_device
def d2f_generate(model, prompt, *, gen_length, block_size, block_add_threshold, decoded_token_threshold,
                 skip_threshold, eos_id=None):
    """D2F's ``_generate_block_single``; returns x[P:] (only the blocks the loop added)."""
    mask_id = model.mask_token_id
    P = len(prompt)
    x = torch.tensor([prompt])
    blocks = [dict(start=0, end=P, total=P, masks=0, state="to_cache", complete=True)]
    current = 0  # active blocks
    eos_detected = False
    for _ in range(10_000):
        if len(blocks) - 1 < gen_length // block_size and not eos_detected:
            if _decoded_share(blocks[-1]) >= block_add_threshold:
                x = torch.cat([x, torch.full((1, block_size), mask_id)], dim=1)
                blocks.append(dict(start=x.shape[1] - block_size, end=x.shape[1], total=block_size,
                                   masks=block_size, state="active", complete=False))
                current += 1
        for i, block in enumerate(blocks):  # _update_block_completion_states
            if _decoded_share(block) >= decoded_token_threshold and i + 1 < len(blocks):
                blocks[i + 1]["complete"] = True
        if not bool((x == mask_id).any()) and current == 0:
            break
        if not any(b["state"] in ("to_cache", "active") for b in blocks):
            break
        logits = d2f_logits(model, x, P, block_size)
        for block in blocks:
            if block["state"] == "to_cache":
                block["state"] = "in_cache"
        finished = []
        for i, block in enumerate(blocks):
            if block["state"] != "active":
                continue
            s, e = block["start"], block["end"]
            where = torch.nonzero(x[0, s:e] == mask_id).flatten()
            if where.numel():
                conf, token = logits[0, s + where].softmax(-1).max(-1)
                high = torch.nonzero(conf > skip_threshold).flatten()
                if block["complete"] and high.numel() == 0:
                    high = conf.argmax()[None]
                x[0, s + where[high]] = token[high]
                block["masks"] -= high.numel()
                if eos_id is not None and bool((token[high] == eos_id).any()):
                    eos_detected = True
            if not bool((x[0, s:e] == mask_id).any()):
                finished.append(i)
        for i in finished:
            if blocks[i]["state"] == "active" and all(blocks[j]["state"] != "active" for j in range(i)):
                blocks[i]["state"] = "to_cache"
                current -= 1
    else:
        raise RuntimeError("d2f oracle: no end after 10000 steps")
    return x[0, P:].tolist()
