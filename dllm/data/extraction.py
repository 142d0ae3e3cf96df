"""A JSON-extraction task (issue 40): a sentence about one person, and the record of typed
fields it states, to be answered as a JSON object of a fixed schema.

Each sample is drawn from one ``random.Random``: a name from the waiting-line pool
(``dllm.data.names``), an age, a city and a membership flag, written as one of a few sentence
shapes (fields in varying order). The answer is scored by schema validity (``jsonschema``) and
field accuracy (each field equal to the record's, an unparsable answer scoring none).
"""
from __future__ import annotations

import json
import random

CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Rome", "Seoul")
FIELDS = ("name", "age", "city", "member")

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "city": {"type": "string"}, "member": {"type": "boolean"}},
    "required": list(FIELDS),
    "additionalProperties": False,
}

# the same records as a Lark grammar (keys in schema order, spaces between terminals)
GRAMMAR = r"""
start: "{" "\"name\"" ":" STRING "," "\"age\"" ":" INT "," "\"city\"" ":" STRING "," "\"member\"" ":" BOOL "}"
STRING: /"[^"\\]*"/
INT: /-?(0|[1-9][0-9]*)/
BOOL: "true" | "false"
%ignore " "
"""

PROMPT = ('Extract the person\'s name, age, city and membership from the text as a JSON object '
          'with the keys "name", "age", "city" and "member" (true or false).\nText: {text}')

_SENTENCES = (
    "{name} is {age} years old, lives in {city} and {is_member}.",
    "Living in {city}, {name} ({age}) {is_member}.",
    "{name}, aged {age}, {is_member}; home is {city}.",
)


def make_record(rng: random.Random, names: list[str]) -> dict:
    """One person: ``{"name", "age", "city", "member"}``."""
    return {"name": rng.choice(names), "age": rng.randint(18, 90), "city": rng.choice(CITIES),
            "member": rng.random() < 0.5}


def record_text(record: dict, shape: int) -> str:
    """The sentence of shape ``shape`` (an index of the sentence shapes) stating ``record``."""
    is_member = "is a member" if record["member"] else "is not a member"
    return _SENTENCES[shape].format(is_member=is_member, **record)


def generate_extraction(rng: random.Random, names: list[str], count: int) -> list[dict]:
    """``count`` samples ``{"input": {"text"}, "answer": record, "prompt": str}``."""
    samples = []
    for _ in range(count):
        record = make_record(rng, names)
        text = record_text(record, rng.randrange(len(_SENTENCES)))
        samples.append({"input": {"text": text}, "answer": record, "prompt": PROMPT.format(text=text)})
    return samples


def field_accuracy(answer: str, record: dict) -> float:
    """The share of the record's fields the answer states exactly (0 when it is not a JSON object)."""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError:
        return 0.0
    if not isinstance(value, dict):
        return 0.0
    # bool is an int in Python: compare types too, so "age": true is not 1
    return sum(type(value.get(f)) is type(record[f]) and value.get(f) == record[f] for f in FIELDS) / len(FIELDS)
