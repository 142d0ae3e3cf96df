"""dllm: a parallel-decoding runtime for masked-diffusion language models.

    model = dllm.load()                      # the bundled trained model, or a checkpoint dir
    out = model.generate("...", gen_length=32, policy="low_confidence")
    out.texts, out.token_ids, out.finish_reasons, out.stats
"""
from dllm.api.model import DiffusionLM, GenerationOutput, load
from dllm.engine.config import GenerationConfig

__all__ = ["DiffusionLM", "GenerationConfig", "GenerationOutput", "load"]
