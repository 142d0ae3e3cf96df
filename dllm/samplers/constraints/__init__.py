"""Structured output: each row's answer kept inside a regular language (a regex, a choice, a JSON
schema) or a context-free one (a Lark grammar) by masking the step's candidates and filtering its
commits by completability of the whole canvas (see canvas.py; cfg_canvas.py for grammars). The
token DFA (token_dfa.py) or token grammar (token_grammar.py) is built once per constraint."""
from dllm.samplers.constraints.rows import CanvasConstraints, RowConstraint
from dllm.samplers.constraints.spec import ConstraintSpec, json_answer_errors
from dllm.samplers.constraints.support import check_supported
from dllm.samplers.constraints.token_dfa import TableTooLarge, TokenDFA, cached_dfa, compile_regex
from dllm.samplers.constraints.token_grammar import TokenGrammar, cached_grammar, compile_grammar
from dllm.samplers.constraints.vocabulary import token_bytes

__all__ = ["CanvasConstraints", "ConstraintSpec", "RowConstraint", "TableTooLarge", "TokenDFA", "TokenGrammar", "cached_dfa",
           "cached_grammar", "check_supported", "compile_grammar", "compile_regex", "json_answer_errors", "token_bytes"]
