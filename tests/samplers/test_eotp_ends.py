"""EoTP's end per row (dllm/samplers/stoppers/eotp.py), read at the stopper's first call with the
statistics it sees set here: an end-of-text committed this step ends the answer right after the
first one; else the still-masked position that predicts end-of-text most confidently ends it right
after itself, a position committed this step not counting as a prediction. The model's own tokens
and forwards stay; only what the stopper reads is replaced, so each expected end follows from the
positions chosen below (a ragged batch of two rows, answer 16 in blocks of 8)."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import DecodeState, Decoding, RowStart
from dllm.samplers.stoppers.eotp import EndOfTextPrediction

GEN, BLOCK = 16, 8
PROMPTS = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 10, 11, 12, 13]]


def first_call_ends(model, monkeypatch, craft) -> tuple[list[int], dict]:
    """Decode PROMPTS with EoTP; at its first call ``craft(state, stats, commit, view, other)``
    returns (window tokens, answer view) for it to read. -> (the ends it truncated to, what
    ``craft`` noted)."""
    real_call, real_truncate = EndOfTextPrediction.__call__, DecodeState.truncate
    calls, ends, noted = [0], [], {}

    def call(self, state, stats, commit):
        if calls[0] == 0:
            eos = set(state.eos.tolist())
            other = next(i for i in range(model.config.vocab_size) if i not in eos)
            view = state.answer_statistics(stats)
            token, view = craft(state, stats, commit, view, other, noted)
            monkeypatch.setattr(DecodeState, "answer_statistics", lambda s, st: view)
            stats = stats._replace(token=token)
        calls[0] += 1
        try:
            return real_call(self, state, stats, commit)
        finally:
            monkeypatch.setattr(DecodeState, "answer_statistics", real_answer_statistics)

    def truncate(state, end):
        if calls[0] == 1 and not ends:
            ends.extend(end.tolist())
        return real_truncate(state, end)

    real_answer_statistics = DecodeState.answer_statistics
    monkeypatch.setattr(EndOfTextPrediction, "__call__", call)
    monkeypatch.setattr(DecodeState, "truncate", truncate)
    rows = [RowStart(prefix=p, gen_length=GEN, seed=i) for i, p in enumerate(PROMPTS)]
    config = GenerationConfig(gen_length=GEN, block_length=BLOCK, steps=GEN, stopper="eotp", stop_at_eos=False)
    Decoding(model, rows, config).run()
    return ends, noted


def no_eos(tokens, state, other):
    return torch.where(torch.isin(tokens, state.eos), torch.full_like(tokens, other), tokens)


def predicting(view, state, other, where: dict[int, list[tuple[int, float]]]):
    """The view with every token not end-of-text but at ``where[row]``'s (answer position, prob)."""
    token, prob = no_eos(view.token, state, other), view.prob.clone()
    eos = state.eos[0]
    for row, places in where.items():
        for position, p in places:
            assert view.seen[row, position], "the setup needs a forward to have covered the position"
            token[row, position], prob[row, position] = eos, p
    return view._replace(token=token, prob=prob)


@pytest.fixture(scope="module")
def model(tiny_models):
    return tiny_models["llada"].model


def test_the_most_confident_prediction_ends_the_answer_right_after_itself(model, monkeypatch):
    """Masked positions of the second block predict end-of-text: row 0 at 9 (0.6) and 12 (0.9),
    row 1 at 10 (0.8) and 14 (0.7); nothing is committed as end-of-text. The ends: after 12 and
    after 10."""
    def craft(state, stats, commit, view, other, noted):
        noted["P"] = state.canvas.prompt_width
        return no_eos(stats.token, state, other), predicting(view, state, other, {0: [(9, 0.6), (12, 0.9)],
                                                                                   1: [(10, 0.8), (14, 0.7)]})

    ends, noted = first_call_ends(model, monkeypatch, craft)
    assert ends == [noted["P"] + 13, noted["P"] + 11]


def test_a_position_committed_this_step_is_no_prediction(model, monkeypatch):
    """Each row's position committed at this step predicts end-of-text at 0.99 in the view, a
    masked one of the second block (row 0: 11, row 1: 9) at 0.5: the answer ends after the masked one."""
    def craft(state, stats, commit, view, other, noted):
        P, where = state.canvas.prompt_width, {}
        for row, masked in ((0, 11), (1, 9)):
            now = state.bs - P + int(commit[row].int().argmax())
            assert commit[row].any() and now < BLOCK
            where[row] = [(now, 0.99), (masked, 0.5)]
        noted["P"] = P
        return no_eos(stats.token, state, other), predicting(view, state, other, where)

    ends, noted = first_call_ends(model, monkeypatch, craft)
    assert ends == [noted["P"] + 12, noted["P"] + 10]


def test_an_end_of_text_committed_this_step_ends_the_answer_right_after_it(model, monkeypatch):
    """The step's first committed position of each row is read as end-of-text (and a masked one of
    the second block predicts it at 0.99, which a committed end-of-text overrides): the answer
    ends right after the committed one."""
    def craft(state, stats, commit, view, other, noted):
        token = no_eos(stats.token, state, other)
        noted["ends"] = []
        for row in (0, 1):
            first = int(commit[row].int().argmax())
            assert commit[row].any()
            token[row, first] = state.eos[0]
            noted["ends"].append(state.bs + first + 1)
        return token, predicting(view, state, other, {0: [(13, 0.99)], 1: [(13, 0.99)]})

    ends, noted = first_call_ends(model, monkeypatch, craft)
    assert ends == noted["ends"]
