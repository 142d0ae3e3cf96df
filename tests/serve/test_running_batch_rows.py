"""RunningBatch driven by hand, one round at a time: a row whose answer ends with a block leaves
the canvas at that block's boundary (it costs no forwards after), the cost model's shapes leave
it out from there, and the row that goes on carries its finished block into its prompt."""
from __future__ import annotations

from dllm import GenerationConfig
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
