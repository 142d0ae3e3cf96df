"""generate(..., regex=, choice=, json_schema=, grammar=): a request's constraint compiled for this
model's vocabulary (once per regex or grammar and vocabulary) and checked against the rest of the
request."""
from __future__ import annotations

from typing import Any

from dllm.api.stops import StopConditions
from dllm.engine.config import GenerationConfig
from dllm.samplers.constraints import ConstraintSpec, RowConstraint, cached_dfa, check_supported, token_bytes


def parse_constraint(regex: Any, choice: Any, json_schema: Any, grammar: Any = None) -> ConstraintSpec | None:
    return ConstraintSpec.parse(regex=regex, choice=choice, json_schema=json_schema, grammar=grammar)


def _spelled(lm) -> tuple[bytes | None, ...]:
    """Each token id's bytes under ``lm``'s tokenizer, read once per model."""
    spelled = getattr(lm, "_token_bytes", None)
    if spelled is None:
        spelled = lm._token_bytes = tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size))
    return spelled


def answer_bound(lm, spec: ConstraintSpec | None) -> int | None:
    """Answer tokens that hold every word of ``spec``'s language over ``lm``'s tokens and its
    end-of-text: the longest word + 1 (None: no constraint, a grammar, or words of any length)."""
    if spec is None or spec.grammar is not None:
        return None
    longest = cached_dfa(spec.to_regex(), _spelled(lm), lm.model.eos_token_ids[0]).longest_word()
    return None if longest is None else longest + 1


def default_max_tokens(lm, spec: ConstraintSpec | None, max_tokens: int | None, length_given: bool,
                       default_length: int) -> int | None:
    """``max_tokens`` of a request that set no answer length (neither ``max_tokens`` nor a
    ``gen_length``): ``answer_bound`` when a constraint has one under ``default_length``, the
    canvas otherwise decoded: a choice between "yes" and "no" decodes 4 positions, not 128 of
    which all but 3 are end-of-text. Unchanged otherwise."""
    if max_tokens is not None or length_given:
        return max_tokens
    bound = answer_bound(lm, spec)
    return bound if bound is not None and bound < default_length else max_tokens


def row_constraint(lm, spec: ConstraintSpec | None, stops: StopConditions, max_tokens: int | None,
                   config: GenerationConfig) -> RowConstraint | None:
    """The constraint each row of ``lm``'s request decodes under (None: free), its word ending
    within ``max_tokens``. A stop would cut a word in the middle, and the decodes the constraint
    does not cover are refused, here, before any model work."""
    if spec is None:
        return None
    if stops.strings or stops.token_ids:
        raise ValueError("stop / stop_token_ids cut the answer where they occur, so a constrained answer "
                         "would end before it is a word of its language; drop the stops (the constraint "
                         "says where the answer ends)")
    check_supported(config)
    spelled = _spelled(lm)
    room = config.gen_length if max_tokens is None else min(max_tokens, config.gen_length)
    if spec.grammar is not None:
        from dllm.samplers.constraints.token_grammar import MAX_GRAMMAR_TOKENS, TokenGrammar, cached_grammar

        dfa = cached_grammar(spec.grammar, spelled, lm.model.eos_token_ids[0])  # a token DFA when regular
        if isinstance(dfa, TokenGrammar):
            if room > MAX_GRAMMAR_TOKENS:
                raise ValueError(f"a recursive grammar is checked by a parse whose cost grows with the cube of the "
                                 f"answer's length, so it takes answers of at most {MAX_GRAMMAR_TOKENS} tokens, not "
                                 f"{room}; lower max_tokens (or gen_length), or use a grammar without recursion, "
                                 "a regex or a json_schema")
            if dfa.shortest_word(cap=room) is None:
                raise ValueError(f"no sentence of the grammar that this model's tokens can write fits in {room} "
                                 "answer tokens; raise max_tokens (or gen_length), or loosen the grammar")
            return RowConstraint(dfa=dfa, limit=max_tokens)
    else:
        dfa = cached_dfa(spec.to_regex(), spelled, lm.model.eos_token_ids[0])
    shortest = dfa.shortest_word()
    if shortest is None:
        raise ValueError(f"no answer this model's tokens can write matches the constraint {dfa.regex[:120]!r}; "
                         "loosen it (tokens that are pieces of a character are never used)")
    if shortest > room:
        raise ValueError(f"the shortest answer of the constraint takes {shortest} tokens, more than the {room} "
                         "the answer may have; raise max_tokens (or gen_length), or loosen the constraint")
    return RowConstraint(dfa=dfa, limit=max_tokens)
