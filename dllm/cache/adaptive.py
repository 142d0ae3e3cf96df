"""Adaptive KV-cache refresh: the dual cache's window forwards, refreshed where the K/V drifted.

Inside a block the dual cache reuses the K/V of every position outside the window as the
block-start refresh left it; on a bidirectional model those K/V go stale as the window is
committed. This mode keeps the dual window forward and refreshes, inside that same forward, the
part of the context that matters. Two ways to choose it (``select``):

* "read" (the default, ``dllm/cache/read_refresh.py``): measured at run time where the error is.
  On the bundled models the dual cache's loss is the context's last-layer K/V, the prompt's
  (``bench/kv_drift_probe.py``, docs/ARCHITECTURE.md), and which prompt positions the window
  needs fresh differs between checkpoints. So each forward scores every reused key by the
  attention the window's still-masked queries put on it at the last layer, and refreshes the
  fewest keys covering ``cover`` of that mass: those tokens redo layers ``from_layer`` (default
  1) to n - 2 from their inputs cached at the block start, and the window's last layer reads
  their new K/V. The refreshed K/V live for that forward only (the buffers keep the block
  start's), so a forward depends on the block start and the canvas alone: FreeDave stays
  lossless and batch == single. The drift test below gates it (``drift``, default 0: always).
* "window": the first version, below (``scope``, ``ratio``, ``from_layer`` default: the middle
  layer). It chose the context that attends most to the window at the middle layer; that held on
  the first weights and not on the v2 ones, whose prompt bookkeeping drifts from layer 1 and is
  not what attends to the window (docs/ARCHITECTURE.md).

The "window" forward, with the test of Elastic-Cache (arXiv 2510.14973) on hidden states:

* drift test: at each layer from ``from_layer`` on, the window positions whose token did not
  change since their hidden state was cached (the still-masked ones) compare their fresh layer
  input with the cached one; drift = 1 - mean cosine similarity. Their input moved only because
  their context moved, so the same drift is what the reused K/V carry.
* refresh from the drifted layer: when a row's drift reaches ``drift``, the rest of that forward
  (that layer and the deeper ones) recomputes every position of ``scope`` ("all": the canvas;
  "response": the answer, keeping the prompt's K/V) from the layer inputs cached at that layer,
  and writes their K/V and inputs back. Layers below it keep their K/V (Elastic-Cache's
  observation: shallow layers drift least). ``drift=0`` with ``from_layer=0`` recomputes
  everything at every step (the uncached decode); ``drift=inf`` never refreshes (dual).
* candidate states (FreeDave, LoPA) run the same forward on a copy of their row's buffers.
* periodic refreshes (dLLM-Cache, arXiv 2506.06295: long-interval prompt, short-interval
  response): ``prompt_every`` recomputes the canvas, ``response_every`` the answer only, every N
  steps of a block, from layer 0. Every block starts with a full refresh, as the dual cache does.
* token choice (dLLM-Cache's partial refresh, chosen by attention as Elastic-Cache does):
  ``ratio`` < 1 recomputes only that fraction of the scope's tokens, those whose query (from
  their cached layer input) puts the most attention on the window's fresh keys.

Each row decides for itself (batch == single); a row's token-forwards are the query tokens it
really had recomputed, summed over layers and divided by the layer count (a token refreshed
from layer 2 of 4 costs half a token-forward), rounded up per forward. Candidate-state batches
(FreeDave, LoPA) refresh on a copy of their row's buffers, so the canvas' own are unchanged.
Block-causal models keep the dual cache's exact path (their K/V never drifts).

Tensor parallelism: the layer inputs (the residual stream) are whole on every rank, equal after
each all-reduce, so the drift test decides alike on every rank with no exchange of its own; the
partial layers embed and project through the model's all-reducing ``embed_tokens`` /
``Attention.project``, and the attention mass the token choice reads is all-reduced over the
ranks' heads (one (B, N) sum a refreshing layer; "read": one (B, S) sum a forward), so every
rank picks the same tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from dllm.cache.base import register_cache
from dllm.cache.block import BlockCache
from dllm.cache.kv import KVBuffers
from dllm.cache.read_refresh import full_refresh, read_forward, row_wise
from dllm.models.layers import rope_cos_sin
from dllm.runner.model_runner import LastForward, ModelRunner

SCOPES = ("all", "prefix", "prompt", "response")
SELECTS = ("read", "window")
READ_FROM = 1  # select="read": the chosen tokens redo from layer 1 (layer 0's input is their embedding)


@dataclass(frozen=True, slots=True)
class AdaptiveOptions:
    """drift: relative change of a window layer input at which a row refreshes (0 = at every
      step, inf = never, the dual cache);
    from_layer: first layer tested, and so the shallowest one recomputed (None: the middle one);
    scope: the context a drift refresh may recompute: "all" (canvas), "prefix" (everything
      before the block's end; the masked suffix keeps its K/V), "prompt", "response" (answer);
    ratio: fraction of the scope's tokens recomputed: those that attend most to the window;
    prompt_every / response_every: periodic full / answer refresh every N steps (None = off);
    select: "read" (default, ``read_refresh.py``): refresh the reused tokens the window's masked
      queries read at the last layer, the fewest covering ``cover`` of that attention mass, from
      ``from_layer`` (default 1, at most n_layers - 2) up; scope and ratio are then unused.
      "window": the first forward (scope, ratio: the tokens that attend most to the window);
    cover: share (0, 1] of the window's last-layer attention on reused keys that "read" refreshes;
    most: at most this share (0, 1] of the reused tokens a step ("read"; a cost bound)."""

    drift: float = 0.0
    from_layer: int | None = None  # None: 1 for select="read", the middle layer for "window"
    scope: str = "prefix"
    ratio: float = 0.25
    prompt_every: int | None = None
    response_every: int | None = None
    select: str = "read"
    cover: float = 0.9
    most: float = 0.5

    def check(self, n_layers: int | None = None) -> None:
        if not (isinstance(self.drift, (int, float)) and self.drift >= 0) or math.isnan(self.drift):
            raise ValueError(f"drift must be a number >= 0 (0 refreshes always, inf never), got {self.drift!r}")
        if not (isinstance(self.ratio, (int, float)) and 0 < self.ratio <= 1):
            raise ValueError(f"ratio must be a fraction in (0, 1] of the scope's tokens, got {self.ratio!r}")
        if self.select not in SELECTS:
            raise ValueError(f"select must be one of {SELECTS}, got {self.select!r}")
        if not (isinstance(self.cover, (int, float)) and 0 < self.cover <= 1):
            raise ValueError(f"cover must be a share in (0, 1] of the window's attention, got {self.cover!r}")
        if not (isinstance(self.most, (int, float)) and 0 < self.most <= 1):
            raise ValueError(f"most must be a share in (0, 1] of the reused tokens, got {self.most!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")
        for name in ("prompt_every", "response_every"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive number of steps or None, got {value!r}")
        if self.from_layer is not None and (not isinstance(self.from_layer, int) or self.from_layer < 0):
            raise ValueError(f"from_layer must be a layer index >= 0, got {self.from_layer!r}")
        if n_layers is not None and self.from_layer is not None and self.from_layer >= n_layers:
            raise ValueError(f"from_layer={self.from_layer} but the model has {n_layers} layers; "
                             f"choose from_layer < {n_layers}")


class AdaptiveCache:
    def __init__(self, *, block_length: int, sub_block_length: int | None = None, **options) -> None:
        if sub_block_length is not None:
            raise ValueError("cache 'adaptive' refreshes within the block by drift; drop sub_block_length "
                             "or use cache='dual' for sub-blocks")
        self.options = AdaptiveOptions(**options)
        self.options.check()
        self.block_length = block_length
        self.exact = BlockCache("dual", block_length=block_length)  # block-causal models
        self.kv: KVBuffers | None = None
        self.hidden: Tensor | None = None  # (n_layers, B, L, d): each layer's cached input
        self.seen: Tensor | None = None  # (B, L): the token each cached position was computed for
        self._peak = 0  # bytes held at once: buffers plus a candidate copy (dllm.engine.memory plans them)
        self.refreshes = 0  # rows x forwards that recomputed their context (diagnostics)

    @property
    def peak_bytes(self) -> int:
        return self.exact.peak_bytes if self.kv is None else self._peak

    def _held(self, buffers: tuple) -> int:
        kv, hidden, seen = buffers
        return kv.nbytes + hidden.nbytes + seen.nbytes

    def block_logits(self, runner: ModelRunner, tokens: Tensor, bs: int, be: int, step: int,
                     rows: Tensor | None = None, count: Tensor | None = None) -> Tensor:
        model = runner.model
        if model.attention == "block_causal":  # exact already: nothing can drift
            return self.exact.block_logits(runner, tokens, bs, be, step, rows, count)
        if runner.cfg_scale > 0:
            raise ValueError("cfg_scale > 0 is supported with cache='none' only; drop one of them")
        if self.kv is None:
            self.options.check(model.config.n_layers)
            B, L = runner.canvas.batch_size, runner.canvas.length
            self.kv = KVBuffers.allocate(model, B, L)
            self.hidden = torch.zeros(model.config.n_layers, B, L, model.config.d_model,
                                      dtype=model.dtype, device=model.device)
            self.seen = torch.full((B, L), -1, dtype=torch.long, device=model.device)
        shift = int(runner.shift_logits)
        q_lo = bs - shift
        buffers = (self.kv, self.hidden, self.seen)
        held = self._held(buffers)
        if rows is not None:  # candidate states refresh on a copy of their row's buffers
            buffers = (self.kv.select(rows), self.hidden[:, rows], self.seen[rows])
            held += self._held(buffers)
        self._peak = max(self._peak, held)
        B = tokens.shape[0]
        never = model.config.n_layers  # "refresh from layer n_layers" = no refresh
        trigger = torch.full((B,), never, dtype=torch.long, device=tokens.device)
        o, P, end = self.options, runner.canvas.prompt_width, runner.live_end
        scope = {"all": [(0, end)], "prefix": [(0, be)], "prompt": [(0, P)], "response": [(P, end)]}[o.scope]
        if o.select == "read" and not (o.response_every and step % o.response_every == 0 and rows is None):
            return self._read(runner, tokens, buffers, rows, q_lo, be, count,
                              full=rows is None and (step == 0 or bool(o.prompt_every and step % o.prompt_every == 0)))
        if rows is not None:  # candidates come after the canvas' forward of this step: no periodic refresh
            return self._forward(runner, tokens, buffers, rows, scope, q_lo, be, trigger, count)
        if step == 0 or (o.prompt_every and step % o.prompt_every == 0):
            trigger.zero_()  # block start (as the dual cache) or a periodic full refresh
            return self._forward(runner, tokens, buffers, rows, [(0, end)], q_lo, be, trigger, count, select=False)
        if o.response_every and step % o.response_every == 0:
            trigger.zero_()
            return self._forward(runner, tokens, buffers, rows, [(P, end)], q_lo, be, trigger, count, select=False)
        return self._forward(runner, tokens, buffers, rows, scope, q_lo, be, trigger, count)

    def _read(self, runner: ModelRunner, tokens: Tensor, buffers: tuple, rows: Tensor | None, q_lo: int, be: int,
              count: Tensor | None, full: bool) -> Tensor:
        """select="read": the block-start (or periodic) full refresh, else the window forward that
        refreshes the reused tokens the window reads (``read_refresh.py``). Returns its logits."""
        model, o = runner.model, self.options
        kv, hidden, seen = buffers
        n = model.config.n_layers
        start = max(0, min(READ_FROM if o.from_layer is None else o.from_layer, n - 2))
        if full:
            logits, charged = full_refresh(runner, tokens, kv, hidden, rows, q_lo, be, count)
            seen[:, : runner.live_end] = tokens[:, : runner.live_end]
        else:
            unchanged = seen[:, q_lo:be] == tokens[:, q_lo:be]
            gate = lambda fresh, cached: self._drift(fresh, cached, unchanged) >= o.drift  # noqa: E731
            logits, charged = read_forward(runner, tokens, kv, hidden, rows, q_lo, be, count, start=start,
                                           cover=o.cover, most=o.most, gate=gate)
        if runner.keep_last:  # candidate-state forwards do not describe the canvas
            runner.last = None if rows is not None else LastForward(logits, q_lo, charged)
        return logits[:, : be - q_lo - int(runner.shift_logits)]

    def _forward(self, runner: ModelRunner, tokens: Tensor, buffers: tuple, rows: Tensor | None,
                 spans: list[tuple[int, int]], q_lo: int, be: int, trigger: Tensor, count: Tensor | None,
                 select: bool = True) -> Tensor:
        """One forward of the window [q_lo, be); inputs whose ``trigger`` layer is reached (or whose
        drift test fires) recompute the canvas ``spans`` too, from that layer on, in ``buffers``
        (K/V, layer inputs, tokens seen). Returns the window's logits."""
        model, o = runner.model, self.options
        kv, hidden, seen = buffers
        canvas_rows = slice(None) if rows is None else rows
        n_layers, B, device = model.config.n_layers, tokens.shape[0], tokens.device
        from_layer = n_layers // 2 if o.from_layer is None else o.from_layer
        idx, N, w0 = self._query_set(spans, q_lo, be, device)
        win, wpos = slice(w0, w0 + be - q_lo), slice(q_lo, be)  # the window in the query set / canvas
        cos, sin = rope_cos_sin(runner.canvas.positions[canvas_rows][:, idx], model.config.rotary_dim,
                                model.config.rope_theta)
        visible = runner.visibility(0, N, runner.canvas.length, rows)
        unchanged = seen[:, wpos] == tokens[:, wpos]  # (B, W): the still-masked positions
        window = torch.zeros(N, dtype=torch.bool, device=device)
        window[win] = True
        recompute = torch.zeros(B, N, dtype=torch.bool, device=device)  # context recomputed at this layer
        layer_tokens = torch.zeros(B, dtype=torch.long, device=device)
        x_win, x = model.embed_tokens(tokens[:, wpos]), None  # x: the whole query set, once a row refreshes
        for i, layer in enumerate(model.layers):
            if i >= from_layer:  # drift test of rows not refreshing yet
                drifted = self._drift(x_win, hidden[i, :, wpos], unchanged) >= o.drift
                trigger = torch.where((trigger == n_layers) & drifted, i, trigger)
            starting = trigger == i
            if bool(starting.any()) or x is not None:
                cached = model.embed_tokens(tokens[:, idx]) if i == 0 else hidden[i][:, idx]
                # context not recomputed at the layer below reads its cached inputs
                x = cached.clone() if x is None else torch.where(recompute[..., None], x, cached)
                x[:, win] = x_win
                if bool(starting.any()):
                    chosen = ~window  # (N,): every context token of the scope, padding included
                    if o.ratio < 1 and select:
                        candidates = runner.canvas.valid[canvas_rows][:, idx] & ~window
                        mass = self._window_attention(layer, x, cos, sin, visible, kv.layers[i], win, q_lo, be,
                                                      row_by_row=getattr(model, "batch_invariant", False))
                        chosen = self._top(mass, candidates, o.ratio)
                        layer_tokens += torch.where(starting, self._test_cost(model, candidates, runner.canvas.length), 0)
                    recompute = recompute | (starting[:, None] & chosen)
                written = recompute | window
                hidden[i][:, idx] = torch.where(written[..., None], x, cached)
                x = self._layer(layer, x, cos, sin, visible, kv.layers[i], idx, written)
                x_win = x[:, win]
                layer_tokens += written.sum(-1) * n_layers  # in layer-tokens x n_layers (see _test_cost)
            else:  # the window alone, as the dual cache's window forward
                hidden[i][:, wpos] = x_win
                x_win = self._layer(layer, x_win, cos[:, :, win], sin[:, :, win], visible, kv.layers[i], wpos)
                layer_tokens += (be - q_lo) * n_layers
        refreshed = trigger < n_layers
        seen[:, idx] = torch.where(recompute, tokens[:, idx], seen[:, idx])
        seen[:, wpos] = tokens[:, wpos]
        self.refreshes += int(refreshed.sum())
        per_forward = n_layers * n_layers  # layer_tokens counts n_layers units per token and layer
        charged = runner.charge(torch.div(layer_tokens + per_forward - 1, per_forward, rounding_mode="floor"),
                                rows, count)
        logits = model.lm_head(model.norm(x_win))
        if runner.keep_last:  # candidate-state forwards do not describe the canvas
            runner.last = None if rows is not None else LastForward(logits, q_lo, charged)
        return logits[:, : be - q_lo - int(runner.shift_logits)]

    @staticmethod
    def _query_set(spans: list[tuple[int, int]], q_lo: int, be: int, device) -> tuple[slice | Tensor, int, int]:
        """Canvas positions of ``spans`` and the window [q_lo, be): a slice when contiguous (views,
        no copies), else sorted indices; their count and the window's offset among them."""
        lo, hi = min([q_lo] + [a for a, _ in spans]), max([be] + [b for _, b in spans])
        covered = sorted(spans + [(q_lo, be)])
        reach, contiguous = covered[0][1], True
        for a, b in covered[1:]:
            contiguous &= a <= reach
            reach = max(reach, b)
        if contiguous:
            return slice(lo, hi), hi - lo, q_lo - lo
        idx = torch.cat([torch.arange(a, b, device=device) for a, b in covered]).unique()
        return idx, len(idx), int((idx < q_lo).sum())

    @staticmethod
    def _window_attention(layer, x: Tensor, cos: Tensor, sin: Tensor, visible, layer_cache,
                          win: slice, q_lo: int, be: int, row_by_row: bool = False) -> Tensor:
        """(B, N) attention mass each query position puts on the window's fresh keys at this
        layer, from the position's (cached) layer input: the context that reads the window most
        is what the window's change moved most (Elastic-Cache's attention-aware choice)."""
        attn = layer.attn
        h = layer.attn_norm(x)
        q = attn.queries(h, cos, sin)
        k_win = attn.keys_values(h[:, win], cos[:, :, win], sin[:, :, win])[0]
        keys = layer_cache[0].clone()
        keys[:, :, q_lo:be] = k_win
        keys = keys.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)

        def mass_of(q: Tensor, keys: Tensor, valid: Tensor | None) -> Tensor:
            scores = (q.float() @ keys.float().transpose(-1, -2)) / attn.head_dim ** 0.5  # (B, H, N, S)
            if valid is not None:
                scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
            return scores.softmax(-1)[..., q_lo:be].sum(-1)  # (B, H, N): the rank's heads

        mass = row_wise(mass_of, row_by_row, q, keys, visible.valid)
        if attn.tp is None:
            return mass.mean(1)
        return attn.tp.all_reduce(mass.sum(1)) / (attn.n_heads * attn.tp.size)  # every head's mean

    @staticmethod
    def _top(score: Tensor, candidates: Tensor, ratio: float) -> Tensor:
        """(B, N) the ceil(ratio * n) highest-scoring candidates of each row (n: its candidates)."""
        k = torch.ceil(candidates.sum(-1) * ratio).long()  # (B,)
        order = score.masked_fill(~candidates, float("-inf")).argsort(dim=-1, descending=True, stable=True)
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
        return candidates & (rank < k[:, None])

    @staticmethod
    def _test_cost(model, candidates: Tensor, keys: int) -> Tensor:
        """(B,) the selection test's cost in layer-tokens x n_layers: each candidate's query
        projection and scores over the ``keys``, as a share of one layer's multiply-adds."""
        c = model.config
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        layer = c.d_model * (2 * q_dim + 2 * kv_dim) + 3 * c.d_model * c.mlp_hidden_size + 2 * keys * q_dim
        test = c.d_model * q_dim + keys * q_dim
        return torch.ceil(candidates.sum(-1) * c.n_layers * test / layer).long()

    @staticmethod
    def _drift(fresh: Tensor, cached: Tensor, unchanged: Tensor) -> Tensor:
        """(B,) the largest relative change ||fresh - cached|| / ||cached|| of a layer input over
        each row's unchanged window positions (0 if none). The residual stream's common part
        keeps cosine similarities near 1 even where the decode depends on the change."""
        fresh, cached = fresh.float(), cached.float()
        change = (fresh - cached).norm(dim=-1) / cached.norm(dim=-1).clamp(min=torch.finfo(cached.dtype).tiny)
        return torch.where(unchanged, change, torch.zeros_like(change)).amax(-1)

    @staticmethod
    def _layer(layer, x: Tensor, cos: Tensor, sin: Tensor, visible, layer_cache, at: slice | Tensor,
               written: Tensor | None = None) -> Tensor:
        """One transformer block over the queries x (B, T, d) at canvas positions ``at``, writing
        K/V only where ``written`` (B, T) (None: everywhere): context a row keeps stays cached."""
        attn = layer.attn
        h = layer.attn_norm(x)
        Bq, T, _ = h.shape
        q = attn.queries(h, cos, sin)
        k, v = attn.keys_values(h, cos, sin)
        k_buf, v_buf = layer_cache
        if written is not None:
            keep = written[:, None, :, None]
            k, v = torch.where(keep, k, k_buf[:, :, at]), torch.where(keep, v, v_buf[:, :, at])
        k_buf[:, :, at], v_buf[:, :, at] = k, v
        x = x + attn.project(attn.attend(q, k_buf, v_buf, visible).reshape(Bq, T, -1))
        return x + layer.mlp(layer.mlp_norm(x))


@register_cache("adaptive", cache_args=tuple(f.name for f in fields(AdaptiveOptions)))
def adaptive_cache(**options) -> AdaptiveCache:
    return AdaptiveCache(**options)
