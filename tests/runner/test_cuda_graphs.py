"""``GenerationConfig(cuda_graphs=True)``: forwards replayed from graphs captured once per shape.

No CUDA here: the capture backend is swapped for ``EmulatedGraph``, which re-runs the recorded
forward on the same static buffers and writes one static output. That checks what the graph
runner adds to a decode (keys, batch padding to buckets, static inputs, the cache's K/V living
in a leased static slot the graph writes in place, capture paid once) against the eager decode,
token for token; the capture itself runs in the GPU check."""
from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch

import dllm
from dllm import GenerationConfig
from dllm.engine.decoding import Decoding, RowStart, decode
from dllm.models.tiny import write_tiny_checkpoint
from dllm.runner import graphs

RAGGED = [[5, 17, 42], [7, 8, 9, 10, 11], [100, 3, 9]]  # 3 rows: the bucket of 4, one padding row
EVEN = [[5, 17, 42, 4], [7, 8, 9, 10]]  # no padding: keys unmasked
BASE = dict(gen_length=16, block_length=8, steps=8, policy="threshold", policy_args={"tau": 0.3})


@pytest.fixture()
def emulated(monkeypatch, test_device):
    """Graphs emulated on CPU (real captures when the suite runs on CUDA), and a fresh graph
    runner per model for this test."""
    if test_device == "cpu":
        monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    return graphs


def _padding(prompts, gen_length=BASE["gen_length"]) -> int:
    """Columns a replayed decode's canvas adds before the prompts (its length is a captured one)."""
    length = max(len(p) for p in prompts) + gen_length
    return graphs.canvas_length(length, 10_000) - length


def _same(eager, replayed, prompt_forwards=0, padding=0) -> None:
    """Same tokens, order and forwards; the replayed decode's forwards over the prompt region
    (``prompt_forwards`` per row) also computed its ``padding`` columns."""
    assert torch.equal(eager.answer, replayed.answer)
    assert torch.equal(eager.order, replayed.order)
    assert torch.equal(eager.nfe, replayed.nfe)
    assert torch.equal(eager.token_forwards + padding * torch.as_tensor(prompt_forwards), replayed.token_forwards)


CACHES = [dict(cache="none"), dict(cache="prefix"), dict(cache="dual"),
          dict(cache="dual", sub_block_length=4), dict(cache="prefix", sub_block_length=4)]


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("options", CACHES, ids=["none", "prefix", "dual", "dual-sub", "prefix-sub"])
def test_replayed_decode_equals_eager(tiny_models, emulated, family, options):
    model = tiny_models[family].model
    for prompts in (RAGGED, EVEN):
        config = dict(BASE, **options)
        eager = decode(model, prompts, GenerationConfig(**config))
        replayed = decode(model, prompts, GenerationConfig(**config, cuda_graphs=True))
        # uncached forwards all cover the prompt; cached decodes refresh the canvas once a block
        blocks = config["gen_length"] // config["block_length"]
        _same(eager, replayed, eager.nfe if options["cache"] == "none" else blocks, _padding(prompts))
    stats = graphs.graph_stats(model)
    assert stats["eager_forwards"] == 0  # every forward of these decodes ran from a graph
    assert 0 < stats["captures"] < stats["replays"]  # a window's later steps replay its graph


def test_capture_is_paid_once_and_the_slot_is_reused(tiny_models, emulated):
    model = tiny_models["llada"].model
    config = GenerationConfig(**BASE, cache="dual", cuda_graphs=True)
    first = decode(model, RAGGED, config)
    after_first = graphs.graph_stats(model)
    again = decode(model, RAGGED, config)
    four = decode(model, RAGGED + [[1, 2, 3, 4, 5]], config)  # 4 rows: the same bucket, slot and graphs
    stats = graphs.graph_stats(model)
    _same(first, again)
    _same(decode(model, RAGGED + [[1, 2, 3, 4, 5]], GenerationConfig(**BASE, cache="dual")), four, 2, _padding(RAGGED))
    assert stats["captures"] == after_first["captures"]  # nothing captured after the first decode
    assert stats["kv_slots"] == 1 and stats["replays"] > 2 * after_first["replays"]


def test_decodes_alive_together_lease_their_own_slots(tiny_models, emulated):
    """Two decodes stepped in turn (as the server's running batches may be): each holds its own
    static K/V, and each equals its decode alone."""
    model = tiny_models["llada"].model
    config = GenerationConfig(**BASE, cache="dual", cuda_graphs=True)
    rows = [RowStart(prefix=p, gen_length=config.gen_length) for p in RAGGED]
    a, b = Decoding(model, rows[:2], config), Decoding(model, rows[1:], config)
    while not (a.done and b.done):
        for run in (a, b):
            if not run.done:
                run.step()
    assert graphs.graph_stats(model)["kv_slots"] == 2
    eager = GenerationConfig(**BASE, cache="dual")
    _same(decode(model, RAGGED[:2], eager), a.result(), 2, _padding(RAGGED[:2]))  # a refresh per block
    _same(decode(model, RAGGED[1:], eager), b.result(), 2, _padding(RAGGED[1:]))


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("strategy", ["freedave", "lopa"])
def test_candidate_forwards_replay_from_a_candidate_slot(tiny_models, emulated, strategy, family):
    """FreeDave's drafts and LoPA's branches forward row-selected copies of the K/V: the copy is
    written into a static slot of the candidates' bucket, leased once per decode, so candidate
    forwards replay too. Tokens, order and forwards equal eager's; a second decode captures
    nothing new."""
    model = tiny_models[family].model
    config = dict(BASE, cache="dual", strategy=strategy, gen_length=32, steps=16, temperature=0.7)
    eager = decode(model, RAGGED, GenerationConfig(**config))
    refreshes = _refreshes(model, config)  # candidate forwards cover the window only
    replayed = decode(model, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    _same(eager, replayed, refreshes, _padding(RAGGED, 32))
    stats = graphs.graph_stats(model)
    assert stats["replays"] > 0 and stats["eager_forwards"] == 0
    assert any(key.rows > 4 for key in graphs.graph_runner(model).graphs)  # candidates: more rows than the batch
    _same(eager, decode(model, RAGGED, GenerationConfig(**config, cuda_graphs=True)), refreshes, _padding(RAGGED, 32))
    assert graphs.graph_stats(model)["captures"] == stats["captures"]


def _refreshes(model, config) -> torch.Tensor:
    """Per row, the canvas forwards that started at position 0 in an eager decode (the cache
    refreshes a row was charged), counted at the runner."""
    import dllm.runner.model_runner as model_runner

    counts = []
    real = model_runner.ModelRunner.forward

    def forward(self, tokens, q_start, **kw):
        logits = real(self, tokens, q_start, **kw)
        if q_start == 0 and kw.get("rows") is None:
            counts.append(self.active.long().clone())
        return logits

    model_runner.ModelRunner.forward = forward
    try:
        decode(model, RAGGED, GenerationConfig(**config))
    finally:
        model_runner.ModelRunner.forward = real
    return torch.stack(counts).sum(0)


@pytest.fixture(scope="module")
def block_causal(tmp_path_factory, test_device):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("bd_graphs"), "fast_dllm_v2", seed=5, block_size=8)
    return dllm.load(path, device=test_device, dtype="float32").model


@pytest.mark.parametrize("options", [dict(cache="dual"), dict(cache="none"),
                                     dict(cache="dual", block_add_threshold=0.5)],
                         ids=["dual", "none", "pipelined"])
def test_block_causal_replayed_decode_equals_eager(block_causal, emulated, options):
    config = dict(BASE, **options)
    eager = decode(block_causal, RAGGED, GenerationConfig(**config))
    replayed = decode(block_causal, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    if options["cache"] == "none":  # each forward widened to the captured canvas (1 + 24 -> 64 columns)
        assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
        assert torch.equal(replayed.token_forwards, eager.nfe * graphs.canvas_length(25, 10_000))
        assert torch.all(eager.token_forwards < replayed.token_forwards)
    else:
        # Blocks count from position 0 here: each prompt (shorter than a block of 8) leads its answer
        # region (5 + 16 tokens: 3 blocks) and the engine's prompt is the canvas' one kept column. The
        # caches compute the prompt's K/V once (later forwards start at the exact K/V's end).
        _same(eager, replayed, 1, _padding([[0]], gen_length=24))
    assert graphs.graph_stats(block_causal)["eager_forwards"] == 0


@pytest.mark.parametrize("stopper", [{}, dict(stopper="sched", stopper_args={"tau_high": 0.5, "tau_low": 0.2})],
                         ids=["plain", "sched"])  # SchED's low taus exit mid-decode on this random model
def test_uncached_block_causal_forwards_replay_a_graph_per_captured_length(block_causal, emulated, stopper):
    """An uncached block-causal forward covers the canvas up to the window's model block; under
    graphs it is widened with masks to a captured length (no earlier query sees them), so 16
    blocks of 8 capture a graph per 64 columns (3), not one per block, with the eager tokens and
    forwards, SchED's answer-wide margins (which must not read the widened queries) included."""
    config = dict(BASE, cache="none", gen_length=128, steps=64, **stopper)
    eager = decode(block_causal, RAGGED, GenerationConfig(**config))
    replayed = decode(block_causal, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
    assert graphs.graph_stats(block_causal)["captures"] == 3  # canvas 1 + 128 -> 192: ends 64, 128, 192



def test_a_widened_forward_stops_at_a_context_that_caps_the_canvas(tmp_path, emulated, test_device):
    """A model context of 40 caps the captured canvas (1 + 24 answer columns -> 40, not 64), and
    an uncached block-causal forward is widened to a captured length within it, never past the
    canvas: the eager tokens and forwards, 40 columns computed a forward."""
    path = write_tiny_checkpoint(tmp_path / "ctx40", "fast_dllm_v2", seed=5, block_size=8, max_len=40)
    model = dllm.load(path, device=test_device, dtype="float32").model
    config = dict(BASE, cache="none")
    eager = decode(model, RAGGED, GenerationConfig(**config))
    replayed = decode(model, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
    assert torch.equal(replayed.token_forwards, eager.nfe * 40)

def test_block_causal_spans_replay_as_data(block_causal, emulated):
    """A block-causal query sees the keys up to its block's end, which moves with the block: the
    graphs take each query's key end as data (a dense-masked attention over the canvas), so a
    dual-cache decode of 6 blocks captures its refresh and window forwards once, not per block,
    and gives the eager decode's tokens (ragged, sampled)."""
    prompts = [[5, 17, 42, 9, 33, 12, 7, 19, 4, 4], [7, 8, 9, 10, 11], [100, 3, 9]]
    config = dict(BASE, cache="dual", gen_length=48, steps=24, temperature=0.8)
    eager = decode(block_causal, prompts, GenerationConfig(**config))
    replayed = decode(block_causal, prompts, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
    stats = graphs.graph_stats(block_causal)
    assert stats["captures"] == 2 and stats["replays"] == int(eager.nfe.max()) > 12


def test_block_causal_spans_stay_shapes_under_the_batch_invariant_attention(tmp_path, emulated, test_device):
    """``invariant_attention`` runs per key prefix (its fixed key split is the point), so under
    ``make_batch_invariant`` the spans stay in the graph key (a graph per block) rather than
    turning into a dense-masked SDPA that would drop the kernel."""
    from dllm.models.batch_invariant import make_batch_invariant

    path = write_tiny_checkpoint(tmp_path, "fast_dllm_v2", seed=5, block_size=8)
    model = dllm.load(path, device=test_device, dtype="float32").model
    make_batch_invariant(model)
    config = dict(BASE, cache="dual", gen_length=32, steps=16)
    eager = decode(model, RAGGED, GenerationConfig(**config))
    replayed = decode(model, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer)
    keys = list(graphs.graph_runner(model).graphs)
    assert keys and not any(key.key_ends for key in keys) and all(key.spans for key in keys)


@pytest.mark.parametrize("options", [dict(cache="dual"), dict(cache="prefix"), dict(cache="none"),
                                     dict(cache="dual", strategy="lopa"), dict(cache="dual", strategy="freedave")],
                         ids=["dual", "prefix", "none", "lopa", "freedave"])
def test_sdar_replayed_decode_equals_eager(tmp_path_factory, emulated, test_device, options):
    """SDAR (model blocks of 4, blocks counted from position 0): sampled, ragged, 4 blocks."""
    path = tmp_path_factory.getbasetemp() / "sdar_graphs"
    if not path.exists():
        write_tiny_checkpoint(path, "sdar", seed=5, block_size=4)
    model = dllm.load(path, device=test_device, dtype="float32").model
    prompts = [[5, 17, 42, 9, 33, 12, 7, 19, 4, 4], [7, 8, 9, 10, 11], [100, 3, 9]]
    config = dict(BASE, gen_length=32, steps=16, temperature=0.8, **options)
    eager = decode(model, prompts, GenerationConfig(**config))
    replayed = decode(model, prompts, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
    assert graphs.graph_stats(model)["eager_forwards"] == 0


def test_pipelined_lopa_writes_candidates_back_when_replayed(block_causal, emulated):
    """D2F with LoPA: candidate forwards replay from the candidates' slot and their final blocks'
    K/V is written back into the rows; tokens and forwards equal eager's."""
    config = dict(BASE, cache="dual", strategy="lopa", block_add_threshold=0.1, gen_length=32, steps=16)
    eager = decode(block_causal, RAGGED, GenerationConfig(**config))
    replayed = decode(block_causal, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.nfe, replayed.nfe)
    assert graphs.graph_stats(block_causal)["eager_forwards"] == 0


def test_buckets():
    assert [graphs.bucket(n) for n in (1, 2, 3, 5, 9, 33, 256, 300)] == [1, 2, 4, 8, 12, 48, 256, 300]


def test_refused_where_it_cannot_replay(tiny_models):
    model = tiny_models["llada"].model
    if model.device.type != "cuda":
        with pytest.raises(ValueError, match="cuda_graphs=False"):
            decode(model, RAGGED, GenerationConfig(**BASE, cuda_graphs=True))
    with pytest.raises(ValueError, match="pick one"):
        GenerationConfig(**BASE, cuda_graphs=True, compile=True)
    with pytest.raises(ValueError, match="cache='dual'"):
        GenerationConfig(**BASE, cuda_graphs=True, cache="adaptive")


@pytest.mark.parametrize("command", [["generate", "hi"], ["serve"], ["chat"]])
def test_the_commands_refuse_cuda_graphs_off_cuda_before_loading(monkeypatch, capsys, command):
    from dllm.cli import main

    def load(*args, **kwargs):
        raise AssertionError("the model was loaded before the option was checked")

    monkeypatch.setattr("dllm.load", load)
    assert main([command[0], "--cuda-graphs", "--device", "cpu", *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "--cuda-graphs: CUDA graphs need a CUDA device" in err and "--device cuda" in err


def test_module_hooks_do_not_run_in_replays_and_replay_hooks_do(tiny_models, emulated):
    """A CUDA graph replays kernels, not Python: module hooks would fire at capture only, so the
    captured function bypasses them (the emulation would otherwise run them at every replay and
    hide that), and ``replay_hooks`` bracket each replay instead."""
    model = tiny_models["llada"].model
    seen, replays = [], []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    runner = graphs.graph_runner(model)
    runner.replay_hooks.append(lambda rows, queries, keys: (lambda: replays.append((rows, queries, keys))))
    try:
        decode(model, RAGGED, GenerationConfig(**BASE, cache="dual", cuda_graphs=True))
    finally:
        handle.remove()
    assert seen == []
    assert len(replays) == graphs.graph_stats(model)["replays"] > 0
    assert {rows for rows, _, _ in replays} == {3}  # the caller's rows, not the bucket's


def test_graphs_and_slots_stay_bounded_over_many_shapes(tiny_models, emulated):
    """A server sees canvases of many lengths: past its bounds the runner drops the least recently
    used graphs and free slots (capturing again when a shape comes back), never a leased slot."""
    model = tiny_models["llada"].model
    runner = graphs.graph_runner(model)
    runner.max_graphs, runner.max_slots = 6, 2
    config = dict(BASE, cache="dual")
    for length in (3, 70, 130, 200, 3):  # canvases of 64, 128, 192, 256, then 64 again
        prompts = [[5 + i % 200 for i in range(length)], [9, 8]]
        _same(decode(model, prompts, GenerationConfig(**config)),
              decode(model, prompts, GenerationConfig(**config, cuda_graphs=True)), 2, _padding(prompts))
        stats = graphs.graph_stats(model)
        assert stats["kv_slots"] <= 2 and len(runner.graphs) <= 6
    assert stats["evicted_slots"] >= 3 and stats["evicted_graphs"] > 0
    rows = [RowStart(prefix=[5, 6, 7 + i], gen_length=16) for i in range(3)]
    alive = [Decoding(model, rows[:1], GenerationConfig(**config, cuda_graphs=True)) for _ in range(3)]
    for run in alive:
        run.step()  # three live decodes hold three leased slots: none is taken from under them
    assert graphs.graph_stats(model)["kv_slots"] == 3


def test_one_graph_serves_the_window_of_every_block(tiny_models, emulated):
    """The window's K/V write offset is data: a dual-cache decode of 4 blocks captures the
    refresh forward and the window forward once each, and replays them at every block."""
    model = tiny_models["llada"].model
    config = dict(BASE, cache="dual", gen_length=32, steps=32)  # a token per step: 8 windows a block
    eager = decode(model, RAGGED, GenerationConfig(**config))
    replayed = decode(model, RAGGED, GenerationConfig(**config, cuda_graphs=True))
    _same(eager, replayed, 4, _padding(RAGGED, 32))
    stats = graphs.graph_stats(model)
    assert stats["captures"] == 2 and stats["replays"] == int(eager.nfe.max()) == 32


def test_prompts_of_one_captured_length_share_the_slot_and_graphs(tiny_models, emulated):
    """The canvas is left-padded to a captured length (graphs.canvas_length): with 16 answer
    tokens, prompts of 3 to 48 tokens decode on one canvas of 64, one K/V slot and one set of
    graphs; 49 tokens take the next length. Tokens equal the eager decode's at every length."""
    model = tiny_models["llada"].model
    config = dict(BASE, cache="dual")
    captures = []
    for length in (3, 17, 40, 48, 49):
        prompts = [[5 + i % 200 for i in range(length)], [9, 8]]
        _same(decode(model, prompts, GenerationConfig(**config)),
              decode(model, prompts, GenerationConfig(**config, cuda_graphs=True)), 2, _padding(prompts))
        captures.append(graphs.graph_stats(model)["captures"])
    assert captures[0] == captures[1] == captures[2] == captures[3] < captures[4]
    assert graphs.graph_stats(model)["kv_slots"] == 2


def test_a_batch_rebuilt_at_a_block_boundary_keeps_its_canvas_length(tiny_models, emulated):
    """A server rebuilds its running batch where a block ends (rows join): each live row resumes
    with its finished blocks in its prompt and as many answer positions fewer. The canvas length
    is bucketed whole, so the rebuilt decode reuses the slot and every graph; its tokens equal the
    eager decode's resumed alike."""
    model = tiny_models["llada"].model
    config = GenerationConfig(**dict(BASE, cache="dual", gen_length=32, steps=16))
    first = decode(model, RAGGED, dataclasses.replace(config, cuda_graphs=True))  # canvas 5 + 32 -> 64
    captures = graphs.graph_stats(model)["captures"]
    # two rows carry their first block (4 steps) into their prompts, a new row joins: canvas 13 + 24 -> 64
    resumed = [RowStart(prefix=p + first.answer[i, :8].tolist(), gen_length=24, answer_offset=8, steps_before=4)
               for i, p in enumerate(RAGGED[:2])] + [RowStart(prefix=[1, 2, 3], gen_length=24)]
    replayed = Decoding(model, resumed, dataclasses.replace(config, cuda_graphs=True)).run()
    eager = Decoding(model, resumed, config).run()
    assert torch.equal(eager.answer, replayed.answer) and torch.equal(eager.order, replayed.order)
    assert torch.equal(eager.nfe, replayed.nfe)
    stats = graphs.graph_stats(model)
    assert stats["captures"] == captures and stats["kv_slots"] == 1 and stats["replays"] > int(first.nfe.max())


def test_the_captured_length_never_passes_the_context():
    assert [graphs.canvas_length(n, 4096) for n in (1, 64, 65, 500, 513, 1000, 1025)] == [64, 64, 128, 512, 640,
                                                                                           1024, 1280]
    assert graphs.canvas_length(100, limit=110) == 110 and graphs.canvas_length(100, limit=90) == 100


@pytest.mark.parametrize("cache", ["none", "dual"])
def test_replaying_adds_no_host_read(tiny_models, emulated, monkeypatch, cache):
    """The graph runner keys, pads and copies without reading the device: a replayed decode keeps
    the eager decode's host reads exactly (the sync budget, dllm/engine/sync_budget.py)."""
    import dllm.runner.model_runner as model_runner
    from host_syncs import HostSyncCounter

    monkeypatch.setattr(model_runner, "head_rows_pay_off", lambda device: False)  # the GPU's path
    model = tiny_models["llada"].model
    counts = []
    for cuda_graphs in (False, True, True):  # the second replayed decode captures nothing
        with HostSyncCounter() as syncs:
            decode(model, RAGGED, GenerationConfig(**BASE, cache=cache, cuda_graphs=cuda_graphs))
        counts.append(dict(syncs.by_name))
    assert counts[1] == counts[2]
    assert all(n <= counts[0].get(name, 0) for name, n in counts[1].items())  # none added (CPU: equal)


def test_graphs_of_one_output_shape_share_one_logits_buffer(tiny_models, emulated):
    """Every window graph of a decode (one per block and write offset) writes its logits into one
    static buffer of their shape, so graphs cost no logits memory each."""
    model = tiny_models["llada"].model
    decode(model, RAGGED, GenerationConfig(**BASE, cache="dual", cuda_graphs=True))
    runner = graphs.graph_runner(model)
    shapes = {tuple(c.graph.out.shape) for c in runner.graphs.values()}
    assert len(runner.graphs) > len(runner.outputs) == len(shapes)
    assert {c.graph.out.data_ptr() for c in runner.graphs.values()} == {b.data_ptr() for b in runner.outputs.values()}


def test_the_memory_plan_counts_the_slot_of_the_batch_bucket(tiny_models):
    """Three rows replay in the graphs of four: their K/V slot and canvas forward hold four rows and
    the graphs keep a static logits buffer, and the plan says so."""
    from dllm.engine.memory import kv_cache_bytes, plan_memory

    model = tiny_models["llada"].model
    eager = plan_memory(model, 3, 40, GenerationConfig(**BASE, cache="dual"))
    replayed = plan_memory(model, 3, 40, GenerationConfig(**BASE, cache="dual", cuda_graphs=True))
    assert eager.kv_cache_bytes == kv_cache_bytes(model, 3, 40)
    assert replayed.kv_cache_bytes == kv_cache_bytes(model, 4, 40)
    vocab, itemsize = model.lm_head.out_features, model.lm_head.weight.element_size()
    assert replayed.logits_bytes == eager.logits_bytes + 4 * 8 * vocab * itemsize  # the static logits buffer
    assert replayed.activation_bytes > eager.activation_bytes  # the canvas forward at 4 rows
    lopa = dict(BASE, cache="dual", strategy="lopa")  # 3 rows' branches: the candidates' slot at their bucket
    memory_rows = plan_memory(model, 3, 40, GenerationConfig(**lopa)).kv_cache_bytes - kv_cache_bytes(model, 3, 40)
    candidates = memory_rows // kv_cache_bytes(model, 1, 40)
    assert graphs.bucket(candidates) > candidates > 3 and memory_rows == kv_cache_bytes(model, candidates, 40)
    replayed = plan_memory(model, 3, 40, GenerationConfig(**lopa, cuda_graphs=True))
    assert replayed.kv_cache_bytes == kv_cache_bytes(model, 4, 40) + kv_cache_bytes(model, graphs.bucket(candidates), 40)
    # static logits buffers: the canvas forward's at 4 rows and the candidates' at their bucket
    eager_lopa = plan_memory(model, 3, 40, GenerationConfig(**lopa))
    assert replayed.logits_bytes - eager_lopa.logits_bytes == (4 + graphs.bucket(candidates)) * 8 * vocab * itemsize


def test_the_memory_plan_counts_the_dense_rule_and_repeated_heads(block_causal, tiny_models, monkeypatch):
    """A replayed block-causal forward passes its rule as a (queries x keys) mask: the plan counts
    it (bool, the validity-combined copy and SDPA's float copy); on CUDA a masked call repeats
    grouped K/V heads (Dream's tiny model has fewer K/V heads than heads): the plan counts them."""
    import dllm.engine.memory as memory
    from dllm.samplers import make_strategy

    config = GenerationConfig(**BASE, cache="dual", cuda_graphs=True)
    replayed = memory.plan_memory(block_causal, 3, 64, config)
    canvas = memory.forward_shapes(block_causal, 3, 64, config, make_strategy("plain", {}))[0]  # the canvas forward
    dense = memory.ForwardShape(4, canvas.queries, canvas.keys, dense_rule=True)
    plain = memory.ForwardShape(4, canvas.queries, canvas.keys)
    rule = memory.activation_bytes(block_causal, dense) - memory.activation_bytes(block_causal, plain)
    assert rule == 4 * canvas.queries * canvas.keys * (3 + 4) - 4 * canvas.keys * (1 + 1 + 4)
    assert replayed.activation_bytes == memory.activation_bytes(block_causal, dense)
    dream = tiny_models["dream"].model
    c = dream.config
    assert c.n_kv_heads < c.n_heads
    shape = memory.ForwardShape(2, 8, 40)
    before = memory.activation_bytes(dream, shape)
    monkeypatch.setattr(memory, "expand_heads_under_masks", lambda device: True)
    assert memory.activation_bytes(dream, shape) - before == 2 * 2 * c.n_heads * 40 * c.head_dim * 4


def test_a_host_read_inside_the_forward_is_a_capture_error_naming_the_fix(emulated, test_device):
    """The torch path of the MoE expert product reads its offsets on the host, which a CUDA graph
    cannot hold: capturing it is an error that says so and names the way out (the emulation raises
    where a capture would)."""
    from dllm.bench.random_models import build_random_model

    if test_device != "cpu":
        pytest.skip("on CUDA the MoE expert product runs the Triton kernel, which reads nothing on the host")
    model = build_random_model("tiny-llada2", device=torch.device("cpu"), dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"could not be captured .*host read \(tolist\).*cuda_graphs=False"):
        decode(model, RAGGED, GenerationConfig(**BASE, cache="dual", cuda_graphs=True))


def test_the_emulation_names_a_host_value_copied_in_apart_from_a_host_read():
    """What a capture cannot hold, as the CPU emulation reports it: a value read back to the
    host, or a host value copied to the device (``torch.tensor`` inside the forward)."""
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match=r"a host value copied in \(tensor\)"):
        graphs.EmulatedGraph(lambda: x + torch.tensor([1.0, 2.0, 3.0]), None, x.device)
    with pytest.raises(RuntimeError, match=r"a host read \(item\)"):
        graphs.EmulatedGraph(lambda: x * x.sum().item(), None, x.device)



@pytest.mark.parametrize("name, forward", [
    ("boolean-mask index", lambda x: x[x > 1].sum()),
    ("argwhere", lambda x: torch.argwhere(x > 1).sum()),
    ("repeat_interleave", lambda x: x.repeat_interleave(x.long()).sum()),
    ("unique_consecutive", lambda x: torch.unique_consecutive(x).sum()),
])
def test_the_emulation_refuses_outputs_sized_by_the_data(name, forward):
    """An output whose size follows the data needs the device's count on the host first, which a
    CUDA capture refuses; the CPU emulation refuses it too, so a forward that has one fails the
    suite here rather than the capture on a GPU. A repeat count given as an int is a shape."""
    x = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=rf"an output sized by the data \({name}\)"):
        graphs.EmulatedGraph(lambda: forward(x), None, x.device)
    assert graphs.EmulatedGraph(lambda: x.repeat_interleave(2).sum(), None, x.device).replay() == 12


def test_the_emulation_refuses_a_replay_that_reads_what_the_capture_did_not():
    """A CUDA graph replays the captured kernels on the captured addresses with the captured
    Python values: a forward that reads a reassigned buffer or a changed Python number at replay
    would silently get the old ones on a GPU. The emulation re-runs the forward, so it checks the
    replay runs the capture's operations on the same outside tensors and Python values; writing
    the static inputs in place is what a replay is for."""
    state = {"scale": 2, "bias": torch.ones(3)}
    x = torch.tensor([1.0, 2.0, 3.0])
    graph = graphs.EmulatedGraph(lambda: x * state["scale"] + state["bias"], None, x.device)
    x.copy_(torch.tensor([4.0, 5.0, 6.0]))  # the static input written in place
    assert graph.replay().tolist() == [9.0, 11.0, 13.0]
    state["bias"].fill_(0.5)  # a buffer written in place
    assert graph.replay().tolist() == [8.5, 10.5, 12.5]
    state["scale"] = 3  # a Python value the capture baked in
    with pytest.raises(RuntimeError, match=r"replay ran .* other than the capture's.*mul"):
        graph.replay()
    state["scale"], state["bias"] = 2, torch.zeros(3)  # a reassigned buffer: a new address
    with pytest.raises(RuntimeError, match=r"replay ran .* other than the capture's.*add"):
        graph.replay()

def test_tensor_parallel_models_are_refused(tiny_models, emulated, monkeypatch):
    model = tiny_models["llada"].model
    monkeypatch.setattr(model, "tensor_shard", object(), raising=False)  # what a rank's model carries
    with pytest.raises(ValueError, match="tensor parallelism.*cuda_graphs=False"):
        decode(model, RAGGED, GenerationConfig(**BASE, cache="dual", cuda_graphs=True))


def test_a_budget_refusal_under_graphs_names_the_padding(tiny_models, emulated):
    """The captured canvas length and batch bucket cost memory eager decoding does not: a decode
    that passes the budget eagerly may not under graphs, and the refusal says why."""
    from dllm.engine.memory import MemoryBudgetError, plan_memory

    model = tiny_models["llada"].model
    eager = plan_memory(model, 3, 5 + 16, GenerationConfig(**BASE, cache="dual")).total_bytes
    budget = dict(BASE, cache="dual", memory_budget_mb=eager / 2**20 * 1.01)
    decode(model, RAGGED, GenerationConfig(**budget))  # fits eagerly
    with pytest.raises(MemoryBudgetError, match=r"cuda_graphs=True pads the canvas .*cuda_graphs=False needs less"):
        decode(model, RAGGED, GenerationConfig(**budget, cuda_graphs=True))
