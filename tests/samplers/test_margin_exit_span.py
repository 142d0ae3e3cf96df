"""SchED and Prophet exit on the mean top-2 logit margin over a row's answer positions that a
forward has seen (dllm/samplers/stoppers/span.py): a block-causal row's lead (its prompt tail at
the start of its answer region) and the positions no forward has reached are outside that mean,
and Prophet's ``start`` / ``length`` count from the row's answer start. The margins are set here
(the model's own tokens and forwards stay), so each expected exit follows from them alone."""
from __future__ import annotations

import pytest
import torch

from dllm import GenerationConfig
from dllm.engine.decoding import DecodeState, Decoding, RowStart
from tests.block_causal_tiny import tiny_block_causal

GEN, BLOCK = 8, 4
STOPPERS = {"sched": {"tau_high": 1.0, "tau_low": 1.0}, "prophet": {"thresholds": [1.0, 1.0, 1.0], "length": None}}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_block_causal(tmp_path_factory.mktemp("margin_exit"), "fast_dllm_v2")  # blocks of 4 from position 0


def prompts(mask: int) -> list[list[int]]:
    """Leads of 2, 0 and 3 (prompt tails at the start of the answer region)."""
    return [[9, 10, 11, 12, 30, mask], [9, 10, 11, 12], [9, 10, 11, 12, 13, 14, 15]]


def run(model, monkeypatch, margins, stopper: str | None, **stopper_args):
    """Decode ``prompts`` with the answer view's margins replaced by ``margins(state, view)`` (B, G)."""
    real = DecodeState.answer_statistics

    def crafted(state, stats):
        view = real(state, stats)
        return view._replace(margin=margins(state, view).to(view.margin.dtype))

    monkeypatch.setattr(DecodeState, "answer_statistics", crafted)
    extra = {} if stopper is None else dict(stopper=stopper, stopper_args={**STOPPERS[stopper], **stopper_args})
    rows = [RowStart(prefix=p, gen_length=GEN, seed=i) for i, p in enumerate(prompts(model.mask_token_id))]
    decoding = Decoding(model, rows, GenerationConfig(gen_length=GEN, block_length=BLOCK, stop_at_eos=False, **extra))
    assert decoding.state.lead.tolist() == [2, 0, 3]
    return decoding.run()


def region_index(state) -> torch.Tensor:
    """(B, G) each answer-region position's index from its row's answer start (negative in the lead)."""
    return torch.arange(state.config.gen_length, device=state.lead.device)[None, :] - state.lead[:, None]


@pytest.mark.parametrize("stopper", ["sched", "prophet"])
def test_a_certain_lead_does_not_make_a_row_exit(model, monkeypatch, stopper):
    """Margins of 1e6 at a row's prompt tail and 0 over its answer: the answer's mean stays below
    tau = 1, so no row exits and the decode is the one without a stopper."""
    plain = run(model, monkeypatch, lambda state, view: torch.zeros_like(view.margin), None)
    stopped = run(model, monkeypatch, lambda state, view: torch.where(region_index(state) < 0, 1e6, 0.0), stopper)
    assert torch.equal(stopped.answer, plain.answer) and torch.equal(stopped.nfe, plain.nfe)


@pytest.mark.parametrize("stopper", ["sched", "prophet"])
def test_an_unseen_position_does_not_dilute_the_mean(model, monkeypatch, stopper):
    """Margins of 2 where a forward has been, 0 (the buffer's start) where none has: the mean over
    the seen answer is 2 >= tau = 1, so every row exits at its first forward and then takes one
    forward per window of its answer region (lead + 8 answer positions in blocks of 4)."""
    out = run(model, monkeypatch, lambda state, view: torch.where(view.seen, 2.0, 0.0), stopper)
    assert out.nfe.tolist() == [-(-(lead + GEN) // BLOCK) for lead in (2, 0, 3)]
    assert model.mask_token_id not in out.answer.flatten().tolist()


def test_prophets_window_counts_from_the_answer_start(model, monkeypatch):
    """Prophet's ``start=1, length=2`` averages answer positions 1 and 2 of each row, after its
    lead: margins of 2 there and -1e6 everywhere else make every row exit at its first forward
    (a window counted from the region's start would take in the lead or miss the 2s)."""
    def margins(state, view):
        idx = region_index(state)
        return torch.where((idx >= 1) & (idx < 3), 2.0, -1e6)

    out = run(model, monkeypatch, margins, "prophet", start=1, length=2)
    assert out.nfe.tolist() == [-(-(lead + GEN) // BLOCK) for lead in (2, 0, 3)]


def test_scheds_masked_span_averages_the_masks_left(model, monkeypatch):
    """SchED's ``span="masked"`` averages over the answer's masks left, ``"answer"`` over every
    seen answer position. From the second forward on, margins of 2 at masks and -1e6 at committed
    positions: the masked span exits there (fewer forwards, every mask filled), the answer span,
    which holds a committed token from then on, never does (the decode without a stopper)."""
    def margins(state, view):
        late = (state.runner.nfe >= 2)[:, None]
        return torch.where(late & state.answer_masks(), 2.0, -1e6)

    plain = run(model, monkeypatch, margins, None)
    answer = run(model, monkeypatch, margins, "sched", span="answer")
    masked = run(model, monkeypatch, margins, "sched", span="masked")
    assert torch.equal(answer.answer, plain.answer) and torch.equal(answer.nfe, plain.nfe)
    assert bool((masked.nfe < plain.nfe).all()) and model.mask_token_id not in masked.answer.flatten().tolist()
