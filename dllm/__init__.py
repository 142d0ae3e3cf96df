"""dllm: a parallel-decoding runtime for masked-diffusion language models.

    model = dllm.load()                      # the bundled trained model, or a checkpoint dir
    out = model.generate("...", gen_length=32, policy="low_confidence")
    out.texts, out.token_ids, out.finish_reasons, out.stats
"""
from dllm.api import DiffusionLM, GenerationOutput, load
from dllm.config import GenerationConfig

__all__ = ["DiffusionLM", "GenerationConfig", "GenerationOutput", "load"]
