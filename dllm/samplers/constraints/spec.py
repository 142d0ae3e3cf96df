"""What a request constrains its answer to: ``regex``, ``choice`` or ``json_schema``, each turned
into one regular expression over the answer's text, or ``grammar`` (Lark EBNF, a context-free
language), checked before any model work."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dllm.samplers.constraints.integer_ranges import check_integer_ranges, fill_holes, with_integer_ranges
from dllm.samplers.constraints.schema_formats import check_formats, with_format_patterns
from dllm.samplers.constraints.schema_normal import normal_form
from dllm.samplers.constraints.schema_refs import ref_errors
from dllm.samplers.constraints.schema_shapes import check_shapes, refuse_first
from dllm.samplers.constraints.schema_support import check_enforceable
from dllm.samplers.constraints.token_dfa import unanchored
from dllm.validation import OptionTypeError


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    """One of: a regex the whole answer must match, a list of allowed answers, a JSON schema
    (a dict) the answer must be an instance of (through outlines-core's schema -> regex), a
    grammar in Lark's EBNF the whole answer must be a sentence of (start rule ``start``)."""

    regex: str | None = None
    choice: tuple[str, ...] | None = None
    json_schema: dict | None = None
    grammar: str | None = None

    @classmethod
    def parse(cls, *, regex: Any = None, choice: Any = None, json_schema: Any = None,
              grammar: Any = None) -> "ConstraintSpec | None":
        """None when nothing is constrained; bad values name the fix."""
        given = [name for name, value in (("regex", regex), ("choice", choice), ("json_schema", json_schema),
                                          ("grammar", grammar)) if value is not None]
        if len(given) > 1:
            raise ValueError(f"give one of regex, choice, json_schema, grammar, not {' and '.join(given)}")
        if not given:
            return None
        if grammar is not None:
            if not isinstance(grammar, str) or not grammar.strip():
                raise OptionTypeError(f"grammar must be a non-empty str in Lark's EBNF, got {grammar!r}")
            from dllm.samplers.constraints.grammar import parse_grammar

            parse_grammar(grammar)  # refused here, before any model work, when it does not parse
            return cls(grammar=grammar)
        if regex is not None:
            if not isinstance(regex, str) or not regex:
                raise OptionTypeError(f"regex must be a non-empty str, got {regex!r}")
            check_regex(regex)
            return cls(regex=regex)
        if choice is not None:
            if isinstance(choice, str) or not isinstance(choice, (list, tuple)) or not choice \
                    or not all(isinstance(c, str) and c for c in choice):
                raise OptionTypeError(f"choice must be a non-empty list of non-empty strings, got {choice!r}")
            return cls(choice=tuple(choice))
        if isinstance(json_schema, str):
            try:
                json_schema = json.loads(json_schema)
            except json.JSONDecodeError as err:
                raise ValueError(f"json_schema is not valid JSON ({err}); pass a dict or a JSON string") from err
        if not isinstance(json_schema, dict):
            raise OptionTypeError(f"json_schema must be a JSON schema object (a dict), got {type(json_schema).__name__}")
        _check_schema(json_schema)
        return cls(json_schema=json_schema)

    def to_regex(self) -> str:
        """The regular expression of the answers this spec allows (a grammar has none)."""
        if self.grammar is not None:
            raise ValueError("a grammar is context-free: compile it with token_grammar.compile_grammar")
        if self.regex is not None:
            return unanchored(self.regex)
        if self.choice is not None:
            return "(" + "|".join(re.escape(c) for c in self.choice) + ")"
        try:
            from outlines_core.json_schema import build_regex_from_schema
        except ImportError as err:  # an optional dependency: say which extra brings it
            raise ImportError("json_schema= needs outlines-core (its schema -> regex step): "
                              "pip install 'dllm[structured]'") from err
        try:
            schema, holes = with_integer_ranges(with_format_patterns(normal_form(self.json_schema)[0]))
            return fill_holes(build_regex_from_schema(json.dumps(schema)), holes)
        except Exception as err:  # noqa: BLE001  the Rust extension's errors are plain exceptions
            raise ValueError(f"json_schema cannot be turned into a regular expression ({err}); "
                             "outlines-core covers types, properties, required, enum, const, items, "
                             "min/maxItems, min/maxLength, pattern, integer and number bounds, format (date, time, date-time, "
                             "email, uri, uuid, ipv4), anyOf, allOf merged exactly, $ref (a recursive one "
                             "written a few levels deep; deeper needs grammar=)") from err


def check_regex(regex: str) -> None:
    """The pattern parses (interegular's parser, the one that compiles it; no DFA built yet)."""
    from dllm.samplers.constraints.token_dfa import _interegular

    try:
        _interegular().parse_pattern(unanchored(regex))
    except Exception as err:  # noqa: BLE001  interegular raises its own parse errors and NotImplementedError
        raise ValueError(f"the regex {regex[:200]!r} cannot be compiled ({type(err).__name__}: {err}); "
                         "use Python's regex syntax without backreferences, lookarounds, \\b or anchors "
                         "inside the pattern (it matches the whole answer)") from err


def _check_schema(schema: dict) -> None:
    """The schema itself must be valid JSON Schema (jsonschema's meta-schema check), with refs the
    regex can follow (schema_refs.py), and once rewritten (schema_normal.py) use only keywords the
    constraint enforces (schema_support.py) in shapes its regex writes rightly (schema_shapes.py)."""
    try:
        import jsonschema
    except ImportError as err:
        raise ImportError("json_schema needs jsonschema: pip install 'dllm[structured]'") from err
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"json_schema is not a valid JSON Schema: {err.message}") from err
    refuse_first(ref_errors(schema))
    schema, places = normal_form(schema)  # the checks see what the regex writes, named by the user's places
    check_enforceable(schema, places)
    check_integer_ranges(schema, places)
    check_shapes(schema, places)
    check_formats(schema, places)


def json_answer_errors(text: str, schema: dict) -> str | None:
    """Why ``text`` is not a JSON instance of ``schema`` (None: it is)."""
    import jsonschema

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return f"not JSON: {err}"
    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    return None if error is None else error.message
