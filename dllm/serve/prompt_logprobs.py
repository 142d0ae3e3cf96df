"""The prompt tokens' log-probabilities, for ``echo`` with ``logprobs`` on /v1/completions.

OpenAI and vLLM give an echoed prompt's tokens their log-probabilities too, the first token's
null (nothing precedes it). Here they come from one forward of the request's canvas (the prompt,
then the answer's ``gen_length`` positions masked, as the decode starts; with ``max_tokens`` 0 the
prompt alone, as no answer follows it): the log-softmax at
each prompt position of the token there, the model's own distribution (no temperature, top-k,
top-p or guidance). Dream-layout models (``shift_logits``) read position i's logit from output
i - 1; LLaDA-layout ones from output i. The forward runs on the server's parse threads, not in
the scheduler: it is one row of the prompt's canvas, which ``memory_budget_mb`` was checked for
(under ``graphs.CAPTURE_LOCK``, so it never runs while the scheduler captures a CUDA graph).
"""
from __future__ import annotations

import math

import torch

from dllm import kernels
from dllm.engine.logprobs import TokenLogprob
from dllm.runner.canvas import build_canvas
from dllm.runner.graphs import CAPTURE_LOCK
from dllm.runner.model_runner import ModelRunner


def prompt_logprobs(model, prompt_ids: list[int], gen_length: int, top: int) -> list[TokenLogprob]:
    """One entry per token of ``prompt_ids`` under ``model`` (a DiffusionLM's transformer) with
    ``gen_length`` masked answer positions after it: the first NaN with no alternatives, each
    other the token's logprob and the ``top`` most likely tokens there."""
    if getattr(model, "tensor_parallel", None) is not None:
        raise ValueError("prompt logprobs (echo with logprobs) are not available on a tensor-parallel model; "
                         "drop echo or logprobs")
    first = TokenLogprob(math.nan, [])
    if len(prompt_ids) < 2:
        return [first][: len(prompt_ids)]
    canvas = build_canvas([prompt_ids], gen_length=gen_length, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device=model.device)
    shift, length = int(model.shift_logits), len(prompt_ids)
    # CAPTURE_LOCK: a CUDA graph the scheduler captures meanwhile would be invalidated by this
    # thread's allocations and host reads (cuda_graphs=True); uncontended otherwise
    with CAPTURE_LOCK, torch.inference_mode():
        logits = ModelRunner(model, canvas).forward(canvas.tokens, 0, logits_for=(1 - shift, length - shift))
        logp = kernels.log_softmax(logits[0])  # row j: the distribution of token j + 1
        chosen = logp.gather(-1, canvas.tokens[0, 1:length, None])[:, 0].tolist()
        values, ids = logp.topk(min(top, logp.shape[-1]), dim=-1) if top else (None, None)
    alternatives = ([list(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())] if top
                    else [[] for _ in chosen])
    return [first] + [TokenLogprob(c, a) for c, a in zip(chosen, alternatives)]
