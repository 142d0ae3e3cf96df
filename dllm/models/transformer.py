"""The one transformer every family builds: embeddings, blocks, final norm, LM head.

Implements the model contract the engine relies on:
``forward(input_ids, position_ids, visible=None, cache=None, cache_write=0, logits_for=None,
head_rows=None) -> logits`` plus
the attributes ``mask_token_id``, ``eos_token_ids``, ``shift_logits``, ``attention``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

import torch
from torch import Tensor, nn

from dllm.models.config import ArchConfig
from dllm.models.layers import Block, RMSNorm, rope_cos_sin
from dllm.models.moe import MoEMLP
from dllm.models.visibility import KeyVisibility

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard


class LayerCaches(Protocol):
    """Anything holding one preallocated (k_buf, v_buf) pair per layer."""

    layers: Sequence[tuple[Tensor, Tensor]]


class DiffusionTransformer(nn.Module):
    def __init__(self, cfg: ArchConfig, tp: TensorShard | None = None) -> None:
        """``tp``: this rank's tensor-parallel shard, with ``cfg`` its ``local_config`` (the
        rank's heads and MLP units; ``dllm.parallel.tensor_plan``): the embedding and the LM
        head hold the rank's vocabulary rows (the logits are its shard), MoE layers its experts."""
        super().__init__()
        self.config = cfg
        self.tensor_parallel = tp
        vocab = cfg.vocab_size if tp is None else tp.part(cfg.vocab_size)
        self.embed = nn.Embedding(vocab, cfg.d_model)
        self.layers = nn.ModuleList(
            Block(cfg, MoEMLP(cfg.d_model, cfg.moe, tp) if i in cfg.moe_layers else None, tp)
            for i in range(cfg.n_layers)
        )
        self.norm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, vocab, bias=False)

    # attributes the engine reads; nothing else in the runtime looks at the family
    @property
    def mask_token_id(self) -> int:
        return self.config.mask_token_id

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.config.eos_token_ids

    @property
    def shift_logits(self) -> bool:
        return self.config.shift_logits

    @property
    def attention(self) -> str:
        return self.config.attention

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def embed_tokens(self, ids: Tensor) -> Tensor:
        """(B, T) token ids -> (B, T, d_model): the lookup, or under tensor parallelism the
        vocabulary-split lookup and its all-reduce (the adaptive cache embeds through it too)."""
        tp = self.tensor_parallel
        return self.embed(ids) if tp is None else tp.embed(self.embed, ids)

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        visible: KeyVisibility | None = None,
        cache: LayerCaches | None = None,
        cache_write: int | Tensor = 0,
        logits_for: tuple[int, int] | Tensor | None = None,
        head_rows: Tensor | None = None,
    ) -> Tensor:
        """input_ids, position_ids: (B, T); ``visible``: which of the S keys each query sees
        (key validity (B, S) and block-causal spans; None = every key, every query).

        With ``cache``, the window's K/V are written at ``cache_write`` of each layer's buffer (an
        offset, or the window's (T,) buffer positions as a tensor) and S is the buffer length;
        without it S == T. Returns logits (B, T, vocab) unshifted: the engine applies the family's
        logit shift.

        ``logits_for=(lo, hi)``: only queries [lo, hi) need logits; the others skip the last
        block's output projection and MLP, the final norm and the LM head (the head is a large
        share of a small model's forward and the engine reads only the decision window; every
        query's K/V is still written). The result is then (B, hi - lo, vocab). A (W,) long tensor
        of query indices instead gives (B, W, vocab) (a replayed CUDA graph: the range as data).
        ``head_rows`` (B, hi - lo) bool: of those, the queries whose logits are read; the others
        skip the same work too and their logits are left at zero (the engine passes it on a CPU,
        where these FLOPs are time).
        """
        cos, sin = rope_cos_sin(position_ids, self.config.rotary_dim, self.config.rope_theta)
        x = self.embed_tokens(input_ids)  # (B, T, d_model)
        if isinstance(logits_for, Tensor):  # (W,) query indices as data: one replayed graph serves every window
            if head_rows is not None:
                raise ValueError("head_rows needs logits_for as a (lo, hi) range")
            rows: Tensor | slice | None = logits_for
        else:
            lo, hi = (0, input_ids.shape[1]) if logits_for is None else logits_for
            rows = None if logits_for is None else slice(lo, hi)
        if head_rows is not None:  # the last block computes outputs only where the head reads
            rows = torch.zeros(input_ids.shape, dtype=torch.bool, device=input_ids.device)
            rows[:, lo:hi] = head_rows
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x = layer(x, cos, sin, visible, layer_cache, cache_write, rows if i == last else None)
        if head_rows is None:
            return self.lm_head(self.norm(x))
        logits = x.new_zeros(input_ids.shape[0], hi - lo, self.lm_head.out_features)
        logits[head_rows] = self.lm_head(self.norm(x))
        return logits
