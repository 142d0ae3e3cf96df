"""Which constraint a request asks for, and in which field: OpenAI's ``response_format``, or
vLLM's structured-output fields as aliases: ``guided_json`` / ``guided_regex`` / ``guided_choice`` /
``guided_grammar`` and the newer ``structured_outputs: {json, regex, choice, grammar, json_object}``.
A grammar is Lark EBNF (dllm's ``grammar=``). One constraint per request: two fields (or two keys
of ``structured_outputs``) are a 400 naming both, never one silently preferred."""
from __future__ import annotations

from typing import Any

from dllm.serve.response_format import response_grammar, response_schema

# vLLM's field -> dllm's constraint argument
GUIDED = {"guided_json": "json_schema", "guided_regex": "regex", "guided_choice": "choice",
          "guided_grammar": "grammar"}
STRUCTURED_OUTPUTS = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "grammar"}
FIELDS = {*GUIDED, "structured_outputs"}  # request fields this module reads besides response_format


class ConstraintFieldError(ValueError):
    """A bad constraint field (``field``: the request field at fault)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def requested_constraint(body: dict) -> tuple[str, dict[str, Any]] | None:
    """(the field asking, the constraint's keyword argument for ``parse_constraint``), or None
    when the request is free. Shapes are checked here; the values when the constraint is parsed."""
    asked: list[tuple[str, dict[str, Any]]] = []
    value = body.get("response_format")
    try:
        grammar = response_grammar(value)
        schema = None if grammar is not None else response_schema(value)
    except ValueError as err:
        raise ConstraintFieldError(str(err), "response_format") from None
    if grammar is not None:
        asked.append(("response_format", {"grammar": grammar}))
    elif schema is not None:
        asked.append(("response_format", {"json_schema": schema}))
    for field, name in GUIDED.items():
        if body.get(field) is not None:
            asked.append((field, {name: body[field]}))
    asked += _structured_outputs(body.get("structured_outputs"))
    if len(asked) > 1:
        names = " and ".join(field for field, _ in asked)
        raise ConstraintFieldError(f"a request takes one constraint, got {names}; keep one of them",
                                   asked[1][0].split(".")[0])
    return asked[0] if asked else None


def _structured_outputs(value: Any) -> list[tuple[str, dict[str, Any]]]:
    field = "structured_outputs"
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ConstraintFieldError(f"{field} must be an object with one of json, regex, choice, grammar, "
                                   f"json_object; got {type(value).__name__}", field)
    unknown = sorted(set(value) - set(STRUCTURED_OUTPUTS) - {"json_object"})
    if unknown:
        raise ConstraintFieldError(f"{field}.{unknown[0]} is not supported by dllm; use one of json, regex, choice, "
                                   "grammar (Lark EBNF), json_object", field)
    if value.get("json_object") not in (None, False, True):
        raise ConstraintFieldError(f"{field}.json_object must be true or false, got {value['json_object']!r}", field)
    asked = [(f"{field}.{key}", {name: value[key]}) for key, name in STRUCTURED_OUTPUTS.items()
             if value.get(key) is not None]
    if value.get("json_object"):
        asked.append((f"{field}.json_object", {"json_schema": {"type": "object"}}))
    return asked
