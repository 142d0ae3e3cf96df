"""DiffusionGemma (``DiffusionGemmaForBlockDiffusion``): uniform-state block diffusion on Gemma-4
text layers, an encoder over the prefix and a denoiser over each canvas that share every weight.

Layout (transformers' ``models/diffusion_gemma``, as ``save_pretrained`` writes it): config.json
holds ``text_config`` (the layers), ``vision_config`` and ``canvas_length``; the shared layers are
stored once under ``model.decoder.layers.{i}`` (the encoder's are tied to them), the encoder
keeps only its own ``layer_scalar`` buffers, the LM head is tied to ``model.decoder.
embed_tokens``, and ``model.decoder.self_conditioning`` is the denoiser's alone. Each layer has
sliding-window or full attention (``layer_types``): full layers have their own head size and
K/V head count (``per_layer_config``), no ``v_proj`` (values are the keys before their norm) and
"proportional" RoPE (a NeoX rotation over the whole head whose frequencies past
``partial_rotary_factor`` are zero); a dense GeGLU MLP and a mixture of experts run side by side
(``experts.gate_up_proj`` fuses gate and up as (E, 2I, d); dllm splits it at load).

Text only: the vision tower's tensors are skipped at load (``IGNORED_WEIGHTS``, and the loader
says so), prompts holding the image token are refused. ``use_bidirectional_attention="all"``
(a bidirectional encoder) is refused: the text encoder of the released model is causal.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dllm.models.config import MoEConfig, end_and_pad_ids
from dllm.models.gemma import DiffusionGemma
from dllm.models.gemma_config import GemmaConfig
from dllm.models.sources import Source, inner_of, one

if TYPE_CHECKING:
    from dllm.parallel.tensor_plan import TensorShard

MODEL_TYPES = ("diffusion_gemma",)
ARCHITECTURES = ("DiffusionGemmaForBlockDiffusion",)
LAYOUT_MARKERS = (r"model\.decoder\.embed_tokens\.weight", r"model\.decoder\.self_conditioning\.pre_norm\.weight")
IGNORED_WEIGHTS = (r"model\.encoder\.vision_tower\..*", r"model\.encoder\.embed_vision\..*")

_D, _E = "model.decoder.layers.{i}.", "layers.{i}."
LAYER_WEIGHTS = {
    **{f"{_D}{n}.weight": f"{_E}{n}.weight" for n in (
        "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm",
        "post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2",
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")},
    f"{_D}router.proj.weight": f"{_E}moe.router.weight",
    f"{_D}router.scale": f"{_E}router_scale",
    f"{_D}router.per_expert_scale": f"{_E}moe.expert_scale",
    f"{_D}experts.down_proj": f"{_E}moe.down_proj",
    f"{_D}layer_scalar": f"{_E}layer_scalar",
    "model.encoder.language_model.layers.{i}.layer_scalar": f"{_E}encoder_layer_scalar",
}
GLOBAL_WEIGHTS = {
    "model.decoder.embed_tokens.weight": "embed.weight",
    "model.decoder.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
    **{f"model.decoder.self_conditioning.{n}.weight": f"self_conditioning.{n}.weight"
       for n in ("pre_norm", "gate_proj", "up_proj", "down_proj")},
}


def layer_sources(cfg: GemmaConfig, i: int) -> dict[str, Source]:
    """Gate and up as the two halves of the fused experts' ``gate_up_proj`` (E, 2I, d); the value
    projection where the layer has one (sliding layers)."""
    p, m, inter = f"model.decoder.layers.{i}.", f"layers.{i}.", cfg.moe.expert_hidden
    out = {f"{m}moe.gate_proj": inner_of(f"{p}experts.gate_up_proj", 0, inter),
           f"{m}moe.up_proj": inner_of(f"{p}experts.gate_up_proj", inter, 2 * inter)}
    if cfg.is_sliding(i):
        out[f"{m}self_attn.v_proj.weight"] = one(f"{p}self_attn.v_proj.weight")
    return out


def _refuse_unsupported(text: dict[str, Any]) -> None:
    if text.get("use_bidirectional_attention") == "all":
        raise ValueError("use_bidirectional_attention='all' (a bidirectional encoder) is not supported; "
                         "DiffusionGemma's text encoder is causal (None or 'vision')")
    if text.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(f"hidden_activation={text['hidden_activation']!r} is not supported (DiffusionGemma "
                         "uses 'gelu_pytorch_tanh')")
    if text.get("attention_bias"):
        raise ValueError("attention_bias=true is not supported (DiffusionGemma has no attention biases)")
    if not text.get("num_experts") or not text.get("top_k_experts"):
        raise ValueError("text_config needs num_experts and top_k_experts (every DiffusionGemma layer has experts)")
    for layer_type, params in (text.get("rope_parameters") or {}).items():
        expected = "default" if layer_type == "sliding_attention" else "proportional"
        if params.get("rope_type", expected) != expected or params.get("factor", 1.0) != 1.0:
            raise ValueError(f"rope_parameters[{layer_type!r}]={params} is not supported; dllm reads "
                             f"rope_type {expected!r} without a scaling factor")


def _full_layer_heads(text: dict[str, Any], full: list[int]) -> tuple[int, int]:
    """(head size, K/V heads) of the full-attention layers, read as transformers' config class
    reads them: from ``per_layer_config`` when given (a key it lacks is the layer's base value),
    else from Gemma-4's ``global_head_dim`` (512) and ``num_global_key_value_heads`` (the base K/V
    heads when absent)."""
    head_dim, kv_heads = text.get("head_dim", 256), text.get("num_key_value_heads", 4)
    if "per_layer_config" not in text:
        return text.get("global_head_dim", 512), text.get("num_global_key_value_heads") or kv_heads
    per_layer = text["per_layer_config"] or {}
    layers = [per_layer.get(str(i)) or per_layer.get(i) or {} for i in full]
    dims = {layer.get("head_dim", head_dim) for layer in layers} or {head_dim}
    kv = {layer.get("num_key_value_heads", kv_heads) for layer in layers} or {kv_heads}
    if len(dims) > 1 or len(kv) > 1:
        raise ValueError(f"per_layer_config gives the full-attention layers different head sizes {sorted(dims)} "
                         f"or K/V heads {sorted(kv)}; dllm computes one of each for every full-attention layer, "
                         "so this checkpoint cannot be loaded: use one whose full-attention layers share them")
    return dims.pop(), kv.pop()


def parse_config(raw: dict[str, Any]) -> GemmaConfig:
    """config.json of a DiffusionGemma checkpoint -> GemmaConfig (defaults: transformers' config
    classes)."""
    text = raw["text_config"]
    _refuse_unsupported(text)
    n_layers = text["num_hidden_layers"]
    layer_types = text.get("layer_types") or [
        "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n_layers)]
    layer_types = list(layer_types)
    if layer_types:
        layer_types[-1] = "full_attention"  # transformers forces it (with a warning)
    full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    kv_heads = text.get("num_key_value_heads", 4)
    global_dim, global_kv = _full_layer_heads(text, full)
    rope = text.get("rope_parameters") or {}
    sliding_rope = rope.get("sliding_attention") or {"rope_theta": 10_000.0}
    full_rope = rope.get("full_attention") or {"partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}
    eos_ids, pad_id = end_and_pad_ids(text, 1, default_pad=0)
    moe = MoEConfig(n_experts=text["num_experts"], top_k=text["top_k_experts"],
                    expert_hidden=text["moe_intermediate_size"], norm_topk=True, activation="gelu_tanh",
                    expert_scale=True)
    return GemmaConfig(
        d_model=text.get("hidden_size", 2304),
        n_layers=n_layers,
        n_heads=text.get("num_attention_heads", 8),
        layer_types=tuple(layer_types),
        head_dim=text.get("head_dim", 256),
        n_kv_heads=kv_heads,
        global_head_dim=global_dim,
        global_kv_heads=global_kv,
        sliding_window=text.get("sliding_window", 512),
        mlp_hidden_size=text.get("intermediate_size", 9216),
        vocab_size=text.get("vocab_size", 262_144),
        rope_theta=float(sliding_rope.get("rope_theta", 10_000.0)),
        global_rope_theta=float(full_rope.get("rope_theta", 1_000_000.0)),
        global_rotary_factor=float(full_rope.get("partial_rotary_factor", 1.0)),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        max_sequence_length=text.get("max_position_embeddings", 131_072),
        moe=moe,
        final_logit_softcapping=text.get("final_logit_softcapping", 30.0),
        canvas_length=raw.get("canvas_length", 256),
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        image_token_id=raw.get("image_token_id"),
        tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
    )


def build_model(cfg: GemmaConfig, tp: TensorShard | None = None) -> DiffusionGemma:
    """The family's module (not the shared DiffusionTransformer: an encoder and a denoiser);
    ``tp``: one rank's shard of it (``dllm.parallel.tensor_plan.GEMMA_PLAN``)."""
    return DiffusionGemma(cfg, tp)
