"""Structured output: each row's answer kept inside a regular language (a regex, a choice, a JSON
schema) by masking the step's candidates and filtering its commits by completability of the
whole canvas (see canvas.py). The token DFA is built once per constraint (token_dfa.py)."""
from dllm.samplers.constraints.rows import CanvasConstraints, RowConstraint
from dllm.samplers.constraints.spec import ConstraintSpec, json_answer_errors
from dllm.samplers.constraints.support import check_supported
from dllm.samplers.constraints.token_dfa import TokenDFA, cached_dfa, compile_regex
from dllm.samplers.constraints.vocabulary import token_bytes

__all__ = ["CanvasConstraints", "ConstraintSpec", "RowConstraint", "TokenDFA", "cached_dfa", "check_supported",
           "compile_regex", "json_answer_errors", "token_bytes"]
