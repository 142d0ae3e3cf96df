"""The JSON-extraction task: samples are fixed by the seed, every record is an instance of the
task's schema, a sentence of its grammar (Lark decides) and stated in its sentence, and field
accuracy counts exact typed fields."""
from __future__ import annotations

import json
import random

from dllm.data.extraction import GRAMMAR, SCHEMA, field_accuracy, generate_extraction
from dllm.samplers.constraints import json_answer_errors

NAMES = ["Ada Lee", "Bo Kim", "Cy Park", "Di Chen"]


def test_samples_are_seeded_valid_and_stated_in_their_text():
    import lark

    parser = lark.Lark(GRAMMAR, parser="earley", lexer="dynamic_complete")
    first = generate_extraction(random.Random(3), NAMES, 30)
    assert first == generate_extraction(random.Random(3), NAMES, 30)
    assert first != generate_extraction(random.Random(4), NAMES, 30)
    for sample in first:
        record, text = sample["answer"], sample["input"]["text"]
        assert json_answer_errors(json.dumps(record), SCHEMA) is None
        parser.parse(json.dumps(record))  # raises when the grammar does not cover the record
        assert record["name"] in text and str(record["age"]) in text and record["city"] in text
        assert ("not a member" in text) == (not record["member"])
        assert text in sample["prompt"]
    assert {s["answer"]["member"] for s in first} == {True, False}


def test_field_accuracy_counts_exact_typed_fields():
    record = {"name": "Ada Lee", "age": 30, "city": "Oslo", "member": True}
    assert field_accuracy(json.dumps(record), record) == 1.0
    assert field_accuracy(json.dumps({**record, "age": "30", "member": 1}), record) == 0.5  # wrong types
    assert field_accuracy('{"name": "Ada Lee"', record) == 0.0  # not JSON
    assert field_accuracy('["Ada Lee"]', record) == 0.0
