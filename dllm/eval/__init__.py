"""lm-evaluation-harness integration: ``python -m dllm.eval`` (lm-eval's flags, model ``dllm``).

The model class lives in ``dllm.eval.lm_eval`` and imports lm-eval (the ``eval`` extra); the
estimator (``likelihood``), the model_args parser, the text helpers and the request records
do not, so they can be used and tested on their own.
"""
