"""The only caller of the model: ``model_runner.ModelRunner`` (key visibility, CFG, NFE counts,
which queries get logits), the canvas it reads (left-padded prompts + masks, position ids) and
the forward through ``torch.compile``.

Caches sit above it (they run forwards through it) and the engine above both.
"""
