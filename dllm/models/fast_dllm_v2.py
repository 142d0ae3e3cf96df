"""Fast-dLLM v2 block-diffusion checkpoints (Qwen2.5 layout, block-causal attention).

Same tensor names and math as Dream (Qwen2 with q/k/v bias, GQA, logit shift), but attention
is bidirectional inside a block of ``bd_size`` tokens and causal across blocks, and the mask
token is 151665. Its config's ``model_type`` is matched case-insensitively against
MODEL_TYPES (the published checkpoint's remote-code config; not verified against the Hub).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from dllm.models import dream
from dllm.models.config import ArchConfig, block_origin_of

MODEL_TYPES = ("fast_dllm_qwen", "fast_dllm_v2")
DEFAULT_MASK_ID = 151665
DEFAULT_BLOCK_SIZE = 32
LAYER_WEIGHTS = dream.LAYER_WEIGHTS
GLOBAL_WEIGHTS = dream.GLOBAL_WEIGHTS


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    cfg = dream.parse_qwen2_config(raw, family="fast_dllm_v2", default_mask_id=DEFAULT_MASK_ID)
    return dataclasses.replace(cfg, attention="block_causal", block_size=int(raw.get("bd_size", DEFAULT_BLOCK_SIZE)),
                               block_origin=block_origin_of(raw))
