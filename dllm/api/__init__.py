"""The user-facing layer: a loaded model (``model.DiffusionLM``), what a request asks for
(prompts, stops, n, max_tokens, seeds) and what comes back (outputs, stream updates).

It maps a request onto a ``GenerationConfig`` and drives ``dllm.engine``; nothing below
imports it.
"""
