"""Unmasking rules: which masked positions of the window one forward's logits commit."""
from dllm.samplers.rules import (  # noqa: F401  (registers)
    dream_topk, eb_sampler, entropy_threshold, factor, learn2pd, llada_topk, sequential, threshold,
)
