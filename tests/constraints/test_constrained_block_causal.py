"""Constraints on block-causal families, on the bundled trained models: the block decode of
dllm-waitingline-bd and the pipelined mode (D2F) of dllm-waitingline-d2f, greedy and sampled,
plain and LoPA, keep every answer a word (json.loads + jsonschema and Python's re decide), and a
ragged batch with a constraint per row (one free) equals its single runs."""
from __future__ import annotations

import re

import pytest

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart
from dllm.samplers.constraints import ConstraintSpec, RowConstraint, compile_regex, json_answer_errors, token_bytes

NAMES = {"type": "array", "items": {"type": "string"}, "minItems": 1}
YESNO = r"(yes|no)( (yes|no))*"
PROMPTS = ["Sort these names: Bob Smith, Alice Jones.", "Reverse: Eve Black.", "Sort: Carol White, Al Green."]
PIPELINED = dict(block_add_threshold=0.1, decoded_token_threshold=0.95, policy="low_confidence",
                 policy_args={"tau": 0.9})


@pytest.fixture(scope="module")
def bundled():
    return {name: dllm.load(f"dllm-waitingline-{name}", device="cpu", dtype="float32") for name in ("bd", "d2f")}


def _rows(lm) -> list[RowStart]:
    """Three ragged rows: a JSON array of strings, free, yes / no words ending within 12 tokens."""
    spelled = tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size))
    eos = lm.model.eos_token_ids[0]
    constraints = [RowConstraint(dfa=compile_regex(ConstraintSpec(json_schema=NAMES).to_regex(), spelled, eos)), None,
                   RowConstraint(dfa=compile_regex(YESNO, spelled, eos), limit=12)]
    return [RowStart(prefix=lm.encode(p), gen_length=g, seed=s, constraint=c)
            for p, g, s, c in zip(PROMPTS, (32, 16, 24), (1, 2, 3), constraints)]


@pytest.mark.parametrize("name, options, alone", [
    ("bd", dict(cache="dual"), (0, 2)),
    ("d2f", dict(PIPELINED, temperature=0.7, seed=3), (0, 2)),
    ("d2f", dict(PIPELINED, cache="dual", strategy="lopa", strategy_args={"branches": 2}), (2,)),
], ids=["bd-block", "d2f-pipelined-T0.7", "d2f-pipelined-lopa"])
def test_words_and_rows_as_alone(bundled, name, options, alone):
    lm = bundled[name]
    rows = _rows(lm)
    config = GenerationConfig(gen_length=32, block_length=8, **options)
    batch = Decoding(lm.model, rows, config).run()
    texts = lm.to_output(batch).texts
    assert json_answer_errors(texts[0], NAMES) is None, texts[0]
    assert re.fullmatch(YESNO, texts[2]), texts[2]
    for i in alone:  # constrained rows' single runs
        row = rows[i]
        single = Decoding(lm.model, [row], config).run()
        assert batch.answer[i, : row.gen_length].tolist() == single.answer[0, : row.gen_length].tolist(), i
