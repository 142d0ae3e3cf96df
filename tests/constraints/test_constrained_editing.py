"""Token editing (LLaDA2.1's edit_threshold) under a constraint: a rewrite of a decided token goes
through the commit filter, so a constrained row edits and still ends a word, and a ragged batch
with a constraint per row equals its single runs."""
from __future__ import annotations

import re

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.samplers.constraints import RowConstraint, compile_regex, token_bytes

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13], [100, 3]]
NAMES = r"\[\"[A-Z][a-z]{1,6}\"(, \"[A-Z][a-z]{1,6}\")*\]"
YESNO = r"(yes|no)( (yes|no))*"


def test_edits_keep_a_word_and_rows_decode_as_alone(tiny_models):
    lm = tiny_models["llada"]
    spelled, eos = tuple(token_bytes(lm.tokenizer, lm.model.config.vocab_size)), lm.model.eos_token_ids[0]
    constraints = [RowConstraint(dfa=compile_regex(NAMES, spelled, eos)), None,
                   RowConstraint(dfa=compile_regex(YESNO, spelled, eos), limit=11)]
    cfg = GenerationConfig(gen_length=16, block_length=8, policy="threshold", policy_args={"tau": 0.3},
                           edit_threshold=0.05, max_post_steps=4)
    batch = decode(lm.model, PROMPTS, cfg, constraints=constraints)
    assert int(batch.edits[0]) > 0  # the constrained row rewrote decided tokens
    texts = lm.to_output(batch).texts
    assert re.fullmatch(NAMES, texts[0]) and re.fullmatch(YESNO, texts[2]), texts
    for row, prompt in enumerate(PROMPTS):
        alone = decode(lm.model, [prompt], cfg, constraints=[constraints[row]])
        assert batch.answer[row].tolist() == alone.answer[0].tolist()
