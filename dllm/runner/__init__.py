"""The only caller of the model: ``model_runner.ModelRunner`` (key visibility, CFG, NFE counts,
which queries get logits), the canvas it reads (left-padded prompts + masks, position ids), the
forward through ``torch.compile`` and the forwards replayed from CUDA graphs (``graphs.py``).

Caches sit above it (they run forwards through it) and the engine above both.
"""
