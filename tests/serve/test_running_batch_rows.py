"""RunningBatch driven by hand, one round at a time: a row whose answer ends with a block leaves
the canvas at that block's boundary (it costs no forwards after), the cost model's shapes leave
it out from there, and the row that goes on carries its finished block into its prompt."""
from __future__ import annotations

from dllm import GenerationConfig
from dllm.engine.decoding import decode
from dllm.serve.protocol import ServeRequest
from dllm.serve.running_batch import RowProgress, RunningBatch, batch_key


def _row(rid: str, prompt: list[int], gen_length: int) -> RowProgress:
    config = GenerationConfig(gen_length=gen_length, block_length=4, policy="low_confidence")
    return RowProgress(request=ServeRequest(request_id=rid, prompt_ids=prompt, config=config, seed=3),
                       on_update=lambda update: None, submitted=0.0)


def test_a_row_done_at_a_block_boundary_leaves_the_canvas(tiny_models):
    model = tiny_models["llada"].model
    short, long = _row("short", [5, 6, 7], 4), _row("long", [9], 12)
    config = long.request.config
    key, joinable = batch_key(config, model)
    batch = RunningBatch(model, [short, long], config, key, joinable)
    assert batch.shapes(0) == [(3, 4), (1, 12)]
    # after one block only ``long`` still decodes: 1 prompt token + 4 finished, 8 positions left
    assert batch.shapes(1) == [(5, 8)]
    while not batch.at_boundary():
        batch.step()
    assert short.finished and not long.finished
    batch.next_block([])  # the finished row leaves; the batch is rebuilt around the other
    assert batch.canvas_size()[0] == 1 and batch.rows == [long]
    assert len(long.prefix) == 5 and long.remaining == 8 and long.done_answer == long.prefix[1:]
    assert batch.shapes() == [(5, 8)]


def test_a_cancelled_row_counts_the_tokens_it_sent_and_stops_costing_forwards(tiny_models):
    model = tiny_models["llada"].model
    kept, gone = _row("kept", [5, 6, 7], 8), _row("gone", [9], 8)
    config = kept.request.config
    batch = RunningBatch(model, [kept, gone], config, *batch_key(config, model))
    sent = []
    for _ in range(2):  # a round of each block: not every position of ``gone`` is final yet
        sent += [u.final_ids for row, u in batch.step() if row is gone]
    gone.cancelled = True
    (row, update), = batch.cancel_marked()
    sent.append(update.final_ids)
    assert row is gone and update.finished and update.finish_reason == "cancelled"
    tokens = sum(len(ids) for ids in sent)
    assert tokens < 8 and update.stats["tokens"] == tokens
    nfe = update.stats["nfe"]
    while not batch.done:  # the other row decodes on; the cancelled one is charged nothing more
        batch.step()
        if batch.at_boundary():
            batch.next_block([])
    assert int(gone.counters["nfe"]) == nfe and kept.finished


def test_a_row_ended_by_an_end_of_text_counts_it_and_stops_there(tiny_models):
    """Take a token of a row's answer as its end-of-text: the row ends "eos" with its tokens
    counted up to and including that token's first place."""
    model = tiny_models["llada"].model
    config = _row("alone", [5, 6, 7], 8).request.config
    answer = decode(model, [[5, 6, 7]], config, seeds=[3]).answer[0].tolist()  # its single run
    k = 2
    first = answer.index(answer[k])  # the token's first place in the answer
    again = _row("again", [5, 6, 7], 8)
    batch = RunningBatch(model, [again], config, *batch_key(config, model))
    batch.eos = {answer[k]}
    ends = []
    while not ends:
        ends = [u for _, u in batch.step() if u.finished]
    assert ends[0].finish_reason == "eos" and ends[0].stats["tokens"] == first + 1


def test_a_resumed_rows_commits_and_logprobs_are_its_single_runs(tiny_models):
    """Commits and logprobs a row reports after a rebuild are at its own answer positions: each
    position committed once, one logprob per final token, equal to its single run's."""
    model = tiny_models["llada"].model
    short, long = _row("short", [5, 6, 7], 4), _row("long", [9], 12)
    long.request.top_logprobs = 1
    config = long.request.config
    batch = RunningBatch(model, [short, long], config, *batch_key(config, model))
    got, positions = [], []
    while not batch.done:
        for row, update in batch.step():
            if row is long:
                got += update.logprobs or []
                positions += list(update.committed)
        if batch.at_boundary():
            batch.next_block([])
    assert len(long.done_answer) == 4  # it went on in a batch rebuilt after its first block
    assert sorted(positions) == list(range(12))  # commits named by their place in its whole answer
    alone = decode(model, [[9]], config, seeds=[3], logprobs=1).logprobs.read(0, 0, 12, 1)
    assert len(got) == 12
    for mine, single in zip(got, alone):
        assert mine.top[0][0] == single.top[0][0] and abs(mine.logprob - single.logprob) < 1e-4
