"""The architecture every family is parsed into, and the fields the engine reads."""
from __future__ import annotations

from dataclasses import dataclass, field

from dllm.validation import check_value, field_types

ATTENTION_KINDS = ("bidirectional", "block_causal")
# Where a block-causal model's blocks start: "absolute" = at position 0 of prompt + answer (how
# Fast-dLLM v2, LLaDA2 and SDAR were trained and decode: a prompt that ends mid-block shares its
# last block with the first answer tokens); "answer" = at the answer start (dllm's own small
# block-diffusion models). config.json may say which with "dllm_block_origin".
# "prompt" = the whole prompt is one block and answer blocks start at the answer (D2F's students:
# ``create_full_block_attention_mask``).
BLOCK_ORIGINS = ("absolute", "answer", "prompt")
BLOCK_ORIGIN_KEY = "dllm_block_origin"
# A checkpoint of a bidirectional family (LLaDA, Dream) decoded block-causally (a D2F student):
# config.json says so with these keys; ``block_causal_override`` applies them.
ATTENTION_KEY, BLOCK_SIZE_KEY = "dllm_attention", "dllm_block_size"

SCORES = ("softmax", "sigmoid")  # MoE router scores: OLMoE / LLaDA-MoE, LLaDA2
ACTIVATIONS = ("silu", "gelu_tanh")  # expert gate activation: SwiGLU families, DiffusionGemma (GeGLU)


@dataclass(frozen=True, slots=True)
class MoEConfig:
    """Routing and expert sizes of one MoE layer (the family parses its config.json into this)."""

    n_experts: int
    top_k: int
    expert_hidden: int  # moe_intermediate_size
    score: str = "softmax"  # "softmax" (OLMoE / LLaDA-MoE) or "sigmoid" (LLaDA2)
    norm_topk: bool = False  # renormalise the chosen weights to sum 1
    routed_scale: float = 1.0  # routed_scaling_factor
    n_group: int = 1
    topk_group: int = 1
    expert_bias: bool = False  # a selection-only bias (LLaDA2 `expert_bias`)
    shared_hidden: int = 0  # hidden size of the shared expert(s) MLP; 0 = none
    activation: str = "silu"  # of the experts' gate projection: "silu" or "gelu_tanh" (DiffusionGemma)
    expert_scale: bool = False  # a learned per-expert factor on the chosen weights, after renormalising

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"MoE score={self.score!r}; expected one of {SCORES}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"MoE activation={self.activation!r}; expected one of {ACTIVATIONS}")
        for name in ("n_experts", "top_k", "expert_hidden", "n_group", "topk_group"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MoE {name} must be positive, got {getattr(self, name)}")
        if self.shared_hidden < 0:
            raise ValueError(f"MoE shared_hidden must be >= 0, got {self.shared_hidden}")
        if self.n_experts % self.n_group:
            raise ValueError(f"MoE n_experts={self.n_experts} is not a multiple of n_group={self.n_group}")
        if self.topk_group > self.n_group:
            raise ValueError(f"MoE topk_group={self.topk_group} exceeds n_group={self.n_group}")
        eligible = self.topk_group * (self.n_experts // self.n_group)
        if self.top_k > eligible:
            raise ValueError(f"MoE top_k={self.top_k} exceeds the {eligible} experts of the "
                             f"topk_group={self.topk_group} groups a token may use")


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
    block_origin: str = "absolute"  # block-causal models only: see BLOCK_ORIGINS
    head_dim: int = field(default=0)
    qk_norm: bool = False  # per-head RMSNorm on q and k before RoPE (Qwen3 / SDAR, LLaDA2, LLaDA-MoE)
    rotary_dim: int = 0  # leading dims of each head that RoPE rotates; 0 = the whole head
    o_bias: bool = False  # bias on the attention output projection
    moe: MoEConfig | None = None  # routing and expert sizes of the MoE layers
    moe_layers: tuple[int, ...] = ()  # indices of the layers whose MLP is MoE (the rest are dense)

    def __post_init__(self) -> None:
        for name, annotation in field_types(ArchConfig).items():  # e.g. "n_heads": "32" in config.json
            setattr(self, name, check_value(getattr(self, name), annotation, f"{name}"))
        sizes = ("d_model", "n_layers", "n_heads", "n_kv_heads", "mlp_hidden_size", "vocab_size",
                 "max_sequence_length")
        for name in sizes:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.head_dim == 0:
            if self.d_model % self.n_heads:
                raise ValueError(f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}")
            self.head_dim = self.d_model // self.n_heads
        if self.rotary_dim == 0:
            self.rotary_dim = self.head_dim
        if not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(
                f"rotary_dim={self.rotary_dim} must be even and within head_dim={self.head_dim}; "
                "fix partial_rotary_factor / rotary_dim in config.json"
            )
        if (self.moe is None) != (not self.moe_layers):
            raise ValueError("an MoE model needs both its MoE settings and the indices of its MoE layers "
                             f"(got moe={self.moe}, moe_layers={self.moe_layers})")
        if list(self.moe_layers) != sorted(set(self.moe_layers)) or any(
                not 0 <= i < self.n_layers for i in self.moe_layers):
            raise ValueError(f"moe_layers={self.moe_layers} must be distinct increasing layer indices below "
                             f"n_layers={self.n_layers}; fix first_k_dense_replace / moe_layer_freq in config.json")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}; "
                "fix num_key_value_heads / n_kv_heads in config.json"
            )
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention={self.attention!r}; expected one of {ATTENTION_KINDS}")
        if self.block_origin not in BLOCK_ORIGINS:
            raise ValueError(f"{BLOCK_ORIGIN_KEY}={self.block_origin!r} in config.json; expected one of {BLOCK_ORIGINS}")
        if self.attention == "block_causal" and self.block_size <= 0:
            raise ValueError("a block_causal model needs block_size > 0 (bd_size in config.json)")
        special = [("mask_token_id", self.mask_token_id), ("pad_token_id", self.pad_token_id)]
        special += [("eos_token_id", eos) for eos in self.eos_token_ids]
        for name, token in special:
            if not 0 <= token < self.vocab_size:
                raise ValueError(
                    f"{name}={token} is outside the vocabulary (size {self.vocab_size}); "
                    f"set {name} in config.json"
                )
        if not self.eos_token_ids:
            raise ValueError("eos_token_id is empty; set the end-of-text id(s) in config.json")
        if self.mask_token_id in self.eos_token_ids:
            raise ValueError(
                f"mask_token_id={self.mask_token_id} is also an end-of-text id; a committed mask "
                "would end the answer. Set mask_token_id / eos_token_id in config.json to the "
                "tokenizer's mask and end-of-text tokens"
            )


def refuse_unsupported(raw: dict, supported: dict[str, tuple]) -> None:
    """A ValueError naming a config.json key whose value changes the math in a way dllm does not
    compute (an absent key is the family's default): loading such weights would run another model."""
    for key, allowed in supported.items():
        if key in raw and raw[key] not in allowed:
            raise ValueError(f"{key}={raw[key]!r} is not supported (dllm computes {key} = "
                             f"{' or '.join(repr(a) for a in allowed)}, as the published checkpoints set it): this "
                             "checkpoint is another model than its family's; load one with the published config")


def end_and_pad_ids(raw: dict, default_eos: int, default_pad: int | None = None) -> tuple[tuple[int, ...], int]:
    """config.json's end-of-text ids (``eos_token_id``: one id or a list) and pad id
    (``pad_token_id``, ``default_pad`` when absent; the first end-of-text id when that is null)."""
    eos = raw.get("eos_token_id", default_eos)
    eos_ids = tuple(eos) if isinstance(eos, list) else (eos,)
    pad = raw.get("pad_token_id", default_pad)
    return eos_ids, pad if pad is not None else eos_ids[0]


def block_origin_of(raw: dict) -> str:
    """The block origin a block-causal checkpoint's config.json declares (default: absolute)."""
    return str(raw.get(BLOCK_ORIGIN_KEY, "absolute"))


def block_causal_override(raw: dict, cfg: ArchConfig) -> ArchConfig:
    """``cfg`` with the attention config.json asks for by ``dllm_attention`` /
    ``dllm_block_size`` / ``dllm_block_origin`` (default origin "prompt", D2F's), e.g. a D2F
    student saved over a LLaDA or Dream checkpoint; unchanged without ``dllm_attention``."""
    if ATTENTION_KEY not in raw:
        return cfg
    import dataclasses

    attention = raw[ATTENTION_KEY]
    if attention == "bidirectional":
        return dataclasses.replace(cfg, attention=attention)
    if attention != "block_causal" or BLOCK_SIZE_KEY not in raw:
        raise ValueError(f"{ATTENTION_KEY}={attention!r} needs to be 'block_causal' (with {BLOCK_SIZE_KEY}, the "
                         "block size the model was trained with) or 'bidirectional'")
    return dataclasses.replace(cfg, attention="block_causal", block_size=raw[BLOCK_SIZE_KEY],
                               block_origin=str(raw.get(BLOCK_ORIGIN_KEY, "prompt")))
