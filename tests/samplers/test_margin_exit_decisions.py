"""SchED's and Prophet's exit decision, hand-computed on crafted margins (the paper's and the
official code's definitions in dllm/samplers/stoppers/sched.py and prophet.py): a row exits when
the mean top-2 logit margin over its region reaches tau(t / T), t its own forwards so far. The
stopper is driven directly on a stand-in state (no model), so each expected decision follows from
the numbers here alone: the threshold compare, which statistic is averaged, the schedule's
direction, each row's own progress and margin, and rows that are done."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dllm.kernels.confidence_stats import TokenStats, confidence_stats_torch
from dllm.runner.model_runner import LastForward
from dllm.samplers.base import make_stopper
from dllm.samplers.stoppers.prophet import prophet_threshold
from dllm.samplers.stoppers.span import AnswerStats, AnswerView

G = 4  # answer length; the window is answer positions [0, 2)


class StandIn:
    """The DecodeState surface a margin exit reads: answer statistics, masks, window, progress."""

    def __init__(self, margin, nfe, steps, *, prob=0.5, active=None, masks=None, seen=None, end=G):
        margin = torch.tensor(margin, dtype=torch.float32)
        B = margin.shape[0]
        self.stats = AnswerStats(token=torch.full((B, G), 7), prob=torch.full((B, G), prob),
                                 margin=margin,
                                 seen=torch.ones(B, G, dtype=torch.bool) if seen is None else torch.tensor(seen))
        self.masks = torch.ones(B, G, dtype=torch.bool) if masks is None else torch.tensor(masks)
        active = torch.ones(B, dtype=torch.bool) if active is None else torch.tensor(active)
        self.runner = SimpleNamespace(nfe=torch.tensor(nfe), active=active)
        self.config = SimpleNamespace(steps=steps, gen_length=G)
        self.canvas = SimpleNamespace(prompt_width=3)
        self.bs, self.be = 3, 5
        self.end = torch.full((B,), 3 + end)
        self.lead = self.lead_mask = None
        self.filled = torch.zeros(B, G, dtype=torch.bool)

    def answer_statistics(self, stats):
        return self.stats

    def answer_masks(self):
        return self.masks.clone()

    def eligible(self):
        return self.masks[:, :2].clone()

    def commit_answer(self, mask, token, scores=None):
        mask = mask & self.masks & self.runner.active[:, None]  # as DecodeState: active rows' masks
        self.filled |= mask
        self.masks &= ~mask


def exits(stopper, state) -> list[bool]:
    """Whether each row exited at this forward: every mask it had is committed or filled."""
    masks = state.masks.clone()
    commit = stopper(state, None, torch.zeros_like(state.eligible()))
    done = state.filled.clone()
    done[:, :2] |= commit
    return [bool(row) for row in (done | ~masks).all(-1) & masks.any(-1)]


def constant(tau: float, **args):
    return make_stopper("sched", {"schedule": "linear", "tau_high": tau, "tau_low": tau, **args})


def test_a_margin_equal_to_tau_exits():
    """tau = 2 at every progress: a mean margin of exactly 2 exits ("reaches"), 2 less a bit does not."""
    state = StandIn([[2.0] * G, [1.999] * G], nfe=[1, 1], steps=8)
    assert exits(constant(2.0), state) == [True, False]


def test_the_signal_is_the_top2_logit_margin_not_the_top1_probability():
    """Margin 3 with probability 0.5 exits at tau 1; margin 0.5 with probability 0.99 does not."""
    assert exits(constant(1.0), StandIn([[3.0] * G], nfe=[1], steps=8, prob=0.5)) == [True]
    assert exits(constant(1.0), StandIn([[0.5] * G], nfe=[1], steps=8, prob=0.99)) == [False]


def test_each_row_reads_its_own_mean_margin():
    """Row 0's mean margin is (10 + 10 + 10 + 10) / 4 = 10 >= 3, row 1's is (0 + 0 + 4 + 0) / 4 = 1
    < 3: only row 0 exits (a batch-wide mean, 5.5, would take row 1 out with it)."""
    state = StandIn([[10.0] * G, [0.0, 0.0, 4.0, 0.0]], nfe=[2, 2], steps=8)
    assert exits(constant(3.0), state) == [True, False]


def test_the_schedule_falls_with_each_rows_own_progress():
    """Linear 7.5 -> 2.5 over T = 10. Row 0 at its 1st forward: tau = 7.5 - 5 * 0.1 = 7.0 > 4, no
    exit; row 1 at its 8th: tau = 7.5 - 5 * 0.8 = 3.5 <= 3.75, exit. Progress counted from the
    other end (tau 3.0 for row 0), without this forward (tau 4.0 for row 1) or shared by the batch
    (row 0 at 0.8) each changes one decision."""
    state = StandIn([[4.0] * G, [3.75] * G], nfe=[1, 8], steps=10)
    stopper = make_stopper("sched", {"schedule": "linear", "tau_high": 7.5, "tau_low": 2.5})
    assert exits(stopper, state) == [False, True]


def test_a_done_row_does_not_exit():
    """A row that is no longer active (its end found) keeps masks and a high margin: it neither
    exits nor gets anything committed, while the active row beside it does."""
    state = StandIn([[9.0] * G, [9.0] * G], nfe=[3, 3], steps=8, active=[False, True])
    stopper = constant(1.0)
    commit = stopper(state, None, torch.zeros(2, 2, dtype=torch.bool))
    assert stopper.exited.tolist() == [False, True]
    assert commit.tolist() == [[False, False], [True, True]]
    assert state.filled.tolist() == [[False] * G, [False, False, True, True]]


def test_a_row_without_masks_in_the_window_does_not_exit():
    """A row whose window holds no mask had no forward for it this step (its block is done, the
    next one not started): its stale margins do not make it exit."""
    state = StandIn([[9.0] * G, [9.0] * G], nfe=[3, 3], steps=8,
                    masks=[[False, False, True, True], [True, True, True, True]])
    stopper = constant(1.0)
    stopper(state, None, torch.zeros(2, 2, dtype=torch.bool))
    assert stopper.exited.tolist() == [False, True]
    assert state.filled[0].tolist() == [False] * G


def test_an_empty_region_never_reaches_tau():
    """Prophet's positions 2 and 3 not seen by any forward yet (a block-causal row's later block):
    no mean to compare, so no exit even at tau 0 (an empty mean read as 0 would reach it)."""
    stopper = make_stopper("prophet", {"start": 2, "length": 2, "thresholds": [0.0, 0.0, 0.0]})
    state = StandIn([[5.0] * G], nfe=[1], steps=8, seen=[[True, True, False, False]])
    stopper(state, None, torch.zeros(1, 2, dtype=torch.bool))
    assert stopper.exited.tolist() == [False]


def test_an_exit_fills_only_the_positions_a_forward_has_seen():
    """An exit commits the window and fills the seen masks outside it; an unseen position has no
    argmax yet and keeps its mask for its own window's first forward."""
    state = StandIn([[5.0] * G], nfe=[1], steps=8, seen=[[True, True, True, False]])
    commit = constant(1.0)(state, None, torch.zeros(1, 2, dtype=torch.bool))
    assert commit.tolist() == [[True, True]]
    assert state.filled.tolist() == [[False, False, True, False]]


def test_the_mean_stops_at_the_rows_end():
    """A row whose answer ends after 3 positions (a shorter ragged row, an EoTP cut): margins
    (2, 2, 2) over its answer reach tau 2; the fill after its end (margin -100) is not answer."""
    state = StandIn([[2.0, 2.0, 2.0, -100.0]], nfe=[1], steps=8, end=3, masks=[[True, True, True, False]])
    assert exits(constant(2.0), state) == [True]


def test_the_answer_view_keeps_each_rows_own_forwards():
    """``AnswerView`` folds a forward into the rows it was charged to, and this step's window into
    the rows it was for (active, with a mask in the window). Answer position j's logits: 5 + j on
    token 2, 1 on token 4, 0 elsewhere: margin 4 + j. Row 0 took the forward and the step; row 1
    (active, its window done) and row 2 (finished) took neither and keep nothing."""
    P, B, V = 2, 3, 5
    logits = torch.zeros(B, G, V)
    logits[:, :, 2] = 5.0 + torch.arange(G)
    logits[:, :, 4] = 1.0
    runner = SimpleNamespace(last=LastForward(logits, P, torch.tensor([True, False, False])), shift_logits=False,
                             active=torch.tensor([True, True, False]))
    window = torch.tensor([[True, True], [False, False], [True, True]])
    state = SimpleNamespace(canvas=SimpleNamespace(prompt_width=P, length=P + G, batch_size=B), runner=runner,
                            bs=P, be=P + 2, eligible=lambda: window, row_statistics=confidence_stats_torch)
    step = TokenStats(token=torch.full((B, 2), 7), prob=torch.full((B, 2), 0.9), margin_prob=torch.zeros(B, 2),
                      margin_logit=torch.full((B, 2), 50.0), entropy=torch.zeros(B, 2))
    view = AnswerView(B, G, mask_id=99, device=torch.device("cpu")).update(state, step)
    assert view.margin.tolist() == [[4.0, 5.0, 6.0, 7.0], [0.0] * G, [0.0] * G]
    assert view.token.tolist() == [[7, 7, 2, 2], [99] * G, [99] * G]  # the window: the step's token
    assert view.seen.tolist() == [[True] * G, [False] * G, [False] * G]


@pytest.mark.parametrize("t, want", [(32, 7.5), (33, 5.0), (66, 5.0), (67, 2.5)])
def test_prophets_stair_steps_at_a_third_and_two_thirds(t, want):
    """The official ``global_step / total_steps < 0.33`` (then < 0.67): progress 0.33 exactly is
    already the middle threshold, 0.67 the late one."""
    assert float(prophet_threshold(torch.tensor(t / 100))) == want
    stopper = make_stopper("prophet", {"length": None})
    assert float(stopper.threshold(StandIn([[0.0] * G], nfe=[t], steps=100))) == want


def test_prophets_threshold_starts_high():
    """At its 1st of 10 forwards (progress 0.1) Prophet asks 7.5: a margin of 3 does not exit;
    at its 9th (0.9) it asks 2.5 and the same margin exits."""
    stopper = make_stopper("prophet", {"length": None})
    assert exits(stopper, StandIn([[3.0] * G], nfe=[1], steps=10)) == [False]
    assert exits(make_stopper("prophet", {"length": None}), StandIn([[3.0] * G], nfe=[9], steps=10)) == [True]


def test_prophets_window_is_start_plus_length_positions():
    """start=1, length=2 averages answer positions 1 and 2 only: margins (-100, 4, 0, -100) give
    (4 + 0) / 2 = 2 >= 2, an exit; position 2 alone (0), or 1 to 3 (-32), or 0 to 2 (-32) do not."""
    stopper = make_stopper("prophet", {"start": 1, "length": 2, "thresholds": [2.0, 2.0, 2.0]})
    assert exits(stopper, StandIn([[-100.0, 4.0, 0.0, -100.0]], nfe=[1], steps=8)) == [True]
