"""The architecture every family is parsed into, and the fields the engine reads."""
from __future__ import annotations

from dataclasses import dataclass, field

ATTENTION_KINDS = ("bidirectional", "block_causal")


@dataclass(kw_only=True, slots=True)
class ArchConfig:
    """Family-independent description of a masked-diffusion transformer."""

    family: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden_size: int
    vocab_size: int  # rows of the embedding and the LM head (LLaDA: embedding_size)
    rope_theta: float
    rms_norm_eps: float
    max_sequence_length: int
    mask_token_id: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    qkv_bias: bool = False
    rope_full_precision: bool = True
    tie_embeddings: bool = False
    shift_logits: bool = False
    attention: str = "bidirectional"
    block_size: int = 0  # block-causal models only
    head_dim: int = field(default=0)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            self.head_dim = self.d_model // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}; "
                "fix num_key_value_heads / n_kv_heads in config.json"
            )
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention={self.attention!r}; expected one of {ATTENTION_KINDS}")
        if self.attention == "block_causal" and self.block_size <= 0:
            raise ValueError("a block_causal model needs block_size > 0 (bd_size in config.json)")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(
                f"mask_token_id={self.mask_token_id} is outside the vocabulary "
                f"(size {self.vocab_size}); set mask_token_id in config.json"
            )
