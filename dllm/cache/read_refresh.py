"""The adaptive cache's default forward: refresh the reused tokens the window reads.

Why: the dual cache's loss sits in the deepest layers' K/V of the context, the prompt above all
(``bench/kv_drift_probe.py``; docs/ARCHITECTURE.md, caches, "Why the first version stopped
working"): the model keeps bookkeeping about the answer in prompt positions, and the window
reads it at the last layer. Which positions matter depends on the weights: on one checkpoint
the context that attends most to the window is what the window reads, on another it is not. So
the tokens are chosen by what is measured in this forward, at the layer where the error is: the
attention the window's still-masked queries put on each reused key of the last layer.

One forward, per row:

1. the window runs layers ``0 .. n-2`` against the cache, as the dual cache's window forward;
2. at the last layer its queries score every reused key (the heads' mean attention from the
   masked queries); the refreshed set is the smallest one covering ``cover`` of that mass
   (few tokens where the reading is concentrated, more where it is spread), capped at ``most``
   of the reused tokens (a cost bound: where the reading is flat, on random weights say,
   covering it would take nearly every token and cost an uncached forward);
3. those tokens redo layers ``a .. n-2`` from their layer-``a`` inputs cached at the block start
   (their layer-``a`` K/V are unchanged, so layer ``a`` computes queries only), with new K/V from
   layer ``a + 1`` on, the last layer's included;
4. the window's last layer attends over the refreshed keys.

Chosen tokens are gathered, and only the rows that refresh run (a row choosing fewer than the
most pads with fillers whose results are dropped), so the work is the window plus the chosen
tokens, never the whole context. The new K/V go to copies used by this forward's last layer:
the buffers keep the block start's, so a forward depends on the block start and the canvas
alone (FreeDave stays lossless; rows decide alone, batch == single).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from dllm.models.layers import rope_cos_sin
from dllm.models.visibility import KeyVisibility
from dllm.runner.model_runner import ModelRunner, head_rows_pay_off


def full_refresh(runner: ModelRunner, tokens: Tensor, kv, hidden: Tensor, rows: Tensor | None,
                 q_lo: int, be: int, count: Tensor | None) -> tuple[Tensor, Tensor]:
    """The block-start refresh: the model's own layers over the live canvas, writing every
    layer's K/V and input (``hidden``); logits of the window [q_lo, be) and the rows charged."""
    model, E = runner.model, runner.live_end
    positions = runner.canvas.positions if rows is None else runner.canvas.positions[rows]
    cos, sin = rope_cos_sin(positions[:, :E], model.config.rotary_dim, model.config.rope_theta)
    visible = runner.visibility(0, E, E, rows)
    x, last = model.embed_tokens(tokens[:, :E]), len(model.layers) - 1
    for i, layer in enumerate(model.layers):
        hidden[i][:, :E] = x
        x = layer(x, cos, sin, visible, kv.layers[i], 0, slice(q_lo, be) if i == last else None)
    charged = runner.charge(torch.full((tokens.shape[0],), E, dtype=torch.long, device=tokens.device), rows, count)
    return model.lm_head(model.norm(x)), charged


def read_forward(runner: ModelRunner, tokens: Tensor, kv, hidden: Tensor, rows: Tensor | None, q_lo: int,
                 be: int, count: Tensor | None, *, start: int, cover: float, most: float,
                 gate: Callable[[Tensor, Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """Window logits (B, be - q_lo, V) and the rows charged. ``start``: the layer a the chosen
    tokens redo from; ``gate(fresh, cached)``: (B,) bool, the rows whose window input at layer a
    moved enough from the cached one to refresh (the drift test)."""
    model = runner.model
    n, B, W, device = model.config.n_layers, tokens.shape[0], be - q_lo, tokens.device
    positions = runner.canvas.positions if rows is None else runner.canvas.positions[rows]
    cos, sin = rope_cos_sin(positions[:, q_lo:be], model.config.rotary_dim, model.config.rope_theta)
    visible = runner.visibility(q_lo, W, runner.canvas.length, rows)
    x = model.embed_tokens(tokens[:, q_lo:be])
    refresh = torch.zeros(B, dtype=torch.bool, device=device)
    for i, layer in enumerate(model.layers[:-1]):
        if i == start:  # the drift test, against the block start's input
            refresh = gate(x, hidden[i][:, q_lo:be])
        x = layer(x, cos, sin, visible, kv.layers[i], q_lo)
    last = model.layers[-1]
    h = last.attn_norm(x)
    q = last.attn.queries(h, cos, sin)
    k_buf, v_buf = kv.layers[-1]
    k_buf[:, :, q_lo:be], v_buf[:, :, q_lo:be] = last.attn.keys_values(h, cos, sin)
    chosen = 0
    if start < n - 1 and bool(refresh.any()):
        shift = int(runner.shift_logits)
        deciding = torch.zeros(B, W, dtype=torch.bool, device=device)  # queries whose logits decide a mask
        deciding[:, : W - shift] = tokens[:, q_lo + shift : be] == model.mask_token_id
        read = _read_mass(last.attn, q, k_buf, visible, deciding & refresh[:, None],  # (B, S)
                          row_by_row=getattr(model, "batch_invariant", False))
        reused = torch.ones_like(read, dtype=torch.bool)
        reused[:, q_lo:be] = False
        reused[:, runner.live_end:] = False
        if visible.valid is not None:
            reused &= visible.valid
        slots, take = _covering(read, reused, cover, most)
        if slots is not None:
            moving, k_r, v_r = _refresh_tokens(model, kv, hidden, slots, take, positions, visible, start)
            k_buf, v_buf = k_buf.index_copy(0, moving, k_r), v_buf.index_copy(0, moving, v_r)  # this forward's
            chosen = take.sum(-1)
    heads = last.attn.attend(q, k_buf, v_buf, visible).reshape(B, W, -1)
    cost = W * n + chosen * (n - start) if isinstance(chosen, Tensor) else torch.full((B,), W * n, device=device)
    charged = runner.charge(torch.div(cost + n - 1, n, rounding_mode="floor").long(), rows, count)
    need = _read_rows(runner, rows, B, W)
    if need is None:
        x = x + last.attn.project(heads)
        return model.lm_head(model.norm(x + last.mlp(last.mlp_norm(x)))), charged
    x = x[need] + last.attn.project(heads[need])  # only the outputs the step reads (as the model's head_rows)
    logits = x.new_zeros(B, W, model.lm_head.out_features)
    logits[need] = model.lm_head(model.norm(x + last.mlp(last.mlp_norm(x))))
    return logits, charged


def _read_rows(runner: ModelRunner, rows: Tensor | None, B: int, W: int) -> Tensor | None:
    """(B, W) bool: the window queries whose logits the step reads, when skipping the others pays
    (the runner's ``head_rows`` rule: CPU, canvas forwards, no answer-wide stopper); else None."""
    need = runner.head_rows
    shift = int(runner.shift_logits)
    if need is None or rows is not None or runner.keep_last or not head_rows_pay_off(need.device):
        return None
    if need.shape != (B, W - shift):
        return None
    return torch.cat([need, need.new_zeros(B, shift)], dim=1) if shift else need


def _read_mass(attn, q: Tensor, k_buf: Tensor, visible, deciding: Tensor, row_by_row: bool = False) -> Tensor:
    """(B, S) attention mass the deciding queries (B, W) put on each key, heads' mean (under
    tensor parallelism all-reduced over the ranks' heads, so every rank chooses alike).
    ``row_by_row`` (``load(batch_invariant=True)``): each row's scores, softmax and sums computed
    alone, so on a GPU their reduction order is its batch-1 run's whatever the batch."""
    keys = k_buf.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)

    def mass_of(q: Tensor, keys: Tensor, valid: Tensor | None, deciding: Tensor) -> Tensor:
        scores = (q.float() @ keys.float().transpose(-1, -2)) / attn.head_dim ** 0.5  # (B, H, W, S)
        if valid is not None:
            scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        return (scores.softmax(-1) * deciding[:, None, :, None]).sum(2)  # (B, H, S)

    mass = row_wise(mass_of, row_by_row, q, keys, visible.valid, deciding)
    if attn.tp is None:
        return mass.mean(1)
    return attn.tp.all_reduce(mass.sum(1)) / (attn.n_heads * attn.tp.size)


def row_wise(fn: Callable[..., Tensor], row_by_row: bool, *tensors: Tensor | None) -> Tensor:
    """``fn(*tensors)``, or with ``row_by_row`` the concatenation of fn over each row's slices
    (batch-1 shapes: torch chooses a reduction's layout from the whole shape on a GPU)."""
    if not row_by_row:
        return fn(*tensors)
    rows = next(t for t in tensors if t is not None).shape[0]
    return torch.cat([fn(*(None if t is None else t[b : b + 1] for t in tensors)) for b in range(rows)])


def _covering(mass: Tensor, candidates: Tensor, cover: float, most: float) -> tuple[Tensor | None, Tensor]:
    """Per row, the fewest candidates whose mass reaches ``cover`` of the row's candidate mass, at
    most ``most`` of the candidates (the best-read ones):
    (B, K) canvas positions (K: the batch's largest such set; each row's first ones, by mass,
    then fillers) and (B, K) bool, True on the row's own choices. (None, _) when nobody refreshes."""
    mass = mass.masked_fill(~candidates, 0.0)
    ordered, order = mass.sort(dim=-1, descending=True, stable=True)
    before = ordered.cumsum(-1) - ordered  # mass of the better-read candidates
    take = (before < cover * mass.sum(-1, keepdim=True)) & (ordered > 0)
    take &= torch.arange(take.shape[1], device=take.device) < torch.ceil(candidates.sum(-1, keepdim=True) * most)
    K = int(take.sum(-1).max())
    if K == 0:
        return None, take
    return order[:, :K], take[:, :K]


def _refresh_tokens(model, kv, hidden: Tensor, slots: Tensor, take: Tensor, positions: Tensor, visible,
                    start: int) -> tuple[Tensor, Tensor, Tensor]:
    """Tokens at ``slots`` (B, K) redo layers ``start .. n-2`` from their cached layer-``start``
    input, with new K/V from layer ``start + 1`` on where ``take`` (at ``start`` they are the
    cached ones). Only the rows that refresh run, on copies of their K/V: the buffers keep the
    block start's, so a forward depends on the block start and the canvas alone, never on
    earlier steps' choices. Returns those rows (R,) and their last layer's K/V (R, H_kv, S, D)."""
    moving = take.any(-1).nonzero().squeeze(-1)  # (R,)
    slots, take = slots[moving], take[moving]
    R, K = slots.shape
    cos, sin = rope_cos_sin(positions[moving].gather(1, slots), model.config.rotary_dim, model.config.rope_theta)
    if visible.valid is not None:
        visible = KeyVisibility(valid=visible.valid[moving])
    x = hidden[start][moving].gather(1, slots[..., None].expand(R, K, hidden.shape[-1]))
    rows, keep = torch.arange(R, device=slots.device)[:, None].expand(R, K), take[..., None, None]
    for i in range(start, len(model.layers)):
        layer = model.layers[i]
        h = layer.attn_norm(x)
        k_r, v_r = kv.layers[i][0].index_select(0, moving), kv.layers[i][1].index_select(0, moving)
        if i > start:
            k, v = layer.attn.keys_values(h, cos, sin)  # (R, H_kv, K, D)
            k_r[rows, :, slots] = torch.where(keep, k.transpose(1, 2), k_r[rows, :, slots])
            v_r[rows, :, slots] = torch.where(keep, v.transpose(1, 2), v_r[rows, :, slots])
        if i == len(model.layers) - 1:  # nobody reads the last layer's outputs of the context
            return moving, k_r, v_r
        q = layer.attn.queries(h, cos, sin)
        x = x + layer.attn.project(layer.attn.attend(q, k_r, v_r, visible).reshape(R, K, -1))
        x = x + layer.mlp(layer.mlp_norm(x))
    raise AssertionError("start must be below the last layer")
