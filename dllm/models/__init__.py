"""Model families, checkpoint loading and tiny random checkpoints."""
from dllm.models.config import ArchConfig
from dllm.models.loading import CheckpointError, load_model
from dllm.models.registry import FAMILIES, Family, family_for, register_family
from dllm.models.tokenizer import load_tokenizer
from dllm.models.transformer import DiffusionTransformer

__all__ = [
    "ArchConfig", "CheckpointError", "DiffusionTransformer", "FAMILIES", "Family",
    "family_for", "load_model", "load_tokenizer", "register_family",
]
