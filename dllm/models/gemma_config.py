"""The configuration of DiffusionGemma's text model (``dllm.models.gemma``), parsed from a
checkpoint by ``dllm.models.diffusion_gemma``."""
from __future__ import annotations

from dataclasses import dataclass

from dllm.models.config import MoEConfig
from dllm.validation import check_value, field_types

LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass(kw_only=True, slots=True)
class GemmaConfig:
    """The text model of a DiffusionGemma checkpoint (config.json's ``text_config`` plus
    ``canvas_length``), with the fields the loader and the API read under their dllm names."""

    family: str = "diffusion_gemma"
    d_model: int
    n_layers: int
    n_heads: int
    layer_types: tuple[str, ...]
    head_dim: int  # sliding layers
    n_kv_heads: int  # sliding layers
    global_head_dim: int  # full-attention layers
    global_kv_heads: int  # full-attention layers
    sliding_window: int
    mlp_hidden_size: int
    vocab_size: int
    rope_theta: float  # sliding layers ("default" RoPE)
    global_rope_theta: float  # full layers ("proportional" RoPE)
    global_rotary_factor: float
    rms_norm_eps: float
    max_sequence_length: int
    moe: MoEConfig
    final_logit_softcapping: float | None
    canvas_length: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    image_token_id: int | None = None
    mask_token_id: int | None = None  # uniform-state diffusion has no mask token
    tie_embeddings: bool = True
    moe_layers: tuple[int, ...] = ()
    attention: str = "encoder_denoiser"

    def __post_init__(self) -> None:
        for name, annotation in field_types(GemmaConfig).items():
            setattr(self, name, check_value(getattr(self, name), annotation, name))
        for name in ("d_model", "n_layers", "n_heads", "head_dim", "n_kv_heads", "global_head_dim",
                     "global_kv_heads", "sliding_window", "mlp_hidden_size", "vocab_size", "canvas_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if len(self.layer_types) != self.n_layers or any(t not in LAYER_TYPES for t in self.layer_types):
            raise ValueError(f"layer_types={list(self.layer_types)} must name {self.n_layers} layers, each one of "
                             f"{LAYER_TYPES}; fix text_config.layer_types in config.json")
        for heads, kv in ((self.n_heads, self.n_kv_heads), (self.n_heads, self.global_kv_heads)):
            if heads % kv:
                raise ValueError(f"num_attention_heads={heads} is not a multiple of the K/V heads {kv}; "
                                 "fix text_config in config.json")
        if self.global_head_dim % 2 or self.head_dim % 2:
            raise ValueError(f"head sizes must be even for RoPE, got head_dim={self.head_dim}, "
                             f"global_head_dim={self.global_head_dim}")
        self.moe_layers = tuple(range(self.n_layers))  # every layer has the dense MLP and the experts
        for name, token in [("pad_token_id", self.pad_token_id)] + [("eos_token_id", e) for e in self.eos_token_ids]:
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"{name}={token} is outside the vocabulary (size {self.vocab_size}); "
                                 f"set {name} in config.json")
        if not self.eos_token_ids:
            raise ValueError("eos_token_id is empty; set the end-of-text id(s) in text_config of config.json")

    @property
    def block_size(self) -> int:
        """The model's block: one canvas (the engine's block geometry reads it)."""
        return self.canvas_length

    block_origin = "answer"  # canvases follow the prompt

    def is_sliding(self, i: int) -> bool:
        return self.layer_types[i] == "sliding_attention"

    def layer_heads(self, i: int) -> tuple[int, int]:
        """(head size, K/V heads) of layer i."""
        return (self.head_dim, self.n_kv_heads) if self.is_sliding(i) else (self.global_head_dim, self.global_kv_heads)
