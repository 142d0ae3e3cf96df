"""The harness's promises: whole files or a stratified subset, the benchmark's shots, every input
checked before the first forward, results written as they finish, and reruns that resume."""
from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

import dllm
from dllm.api.model import default_model_path
from dllm.bench.parallelbench import Run, plan_parallelbench, run_parallelbench, select_samples
from dllm.cli import main as cli_main
from dllm.bench.results_store import read_samples
from tests.pb_data import official, require_data

TASKS = ["waiting_line/copy", "puzzle/latin_square_n4"]
K1 = Run(name="k1", line="top-k", options={"policy": "low_confidence"}, tokens_per_step=1)
K4 = Run(name="k4", line="top-k", options={"policy": "low_confidence"}, tokens_per_step=4)


@pytest.fixture(scope="module")
def model(tiny_dirs):
    path = default_model_path()
    return dllm.load(path if path.exists() else tiny_dirs["llada"])


class CountingModel:
    """Wraps a model and counts decode calls (and can interrupt after ``stop_after`` of them)."""

    def __init__(self, model, stop_after: int | None = None):
        self.inner, self.calls, self.stop_after = model, 0, stop_after
        self.model, self.path = model.model, model.path

    def encode(self, *a, **k):
        return self.inner.encode(*a, **k)

    def generate_ids(self, ids, config):
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise KeyboardInterrupt
        self.calls += 1
        return self.inner.generate_ids(ids, config)


def _bench(model, out, runs=(K1,), **kw):
    options = {"tasks": TASKS, "shots": 0, "limit": 3, "batch_size": 3, "out_dir": out, **kw}
    return run_parallelbench(model, require_data(), list(runs), **options)


def test_stratified_subset_covers_every_length():
    samples = official("waiting_line/copy")  # ordered by list length, 25 per length 3..6
    lengths = [len(json.loads(s["input"]["context"])) for s in samples]
    indices, how = select_samples(samples, 8)
    assert how == "stratified" and len(indices) == 8 == len(set(indices))
    assert Counter(lengths[i] for i in indices) == {3: 2, 4: 2, 5: 2, 6: 2}
    assert select_samples(samples, None) == (list(range(100)), "all")
    assert select_samples(samples, 500) == (list(range(100)), "all")
    with pytest.raises(ValueError, match="limit must be >= 1"):
        select_samples(samples, 0)


def test_default_shots_follow_the_benchmark_protocol(model, tmp_path):
    summary = _bench(model, tmp_path, shots=None, limit=1)
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert {r["shots"] for r in rows} == {1}  # icl_example_count of waiting-line and puzzle tasks
    prompt = read_samples(tmp_path, "k1", "waiting_line/copy")[0]["prompt"]
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert summary["runs"][0]["shots"] == [1]


def test_bad_run_fails_before_any_forward(model, tmp_path):
    bad = Run(name="tau_high", line="threshold", options={"policy": "threshold", "policy_args": {"tau": "high"}})
    counting = CountingModel(model)
    with pytest.raises(ValueError, match="tau_high"):
        _bench(counting, tmp_path, runs=(K1, bad))
    unknown_cache = Run(name="c", line="c", options={"cache": "nope"})
    with pytest.raises(ValueError, match="unknown cache"):
        _bench(counting, tmp_path, runs=(K1, unknown_cache))
    assert counting.calls == 0 and not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("bad", ["file", "batch"])
def test_bad_output_or_batch_fails_before_any_forward(model, tmp_path, bad):
    counting = CountingModel(model)
    out = tmp_path / "out"
    if bad == "file":
        out.write_text("not a folder")
        with pytest.raises(ValueError, match="is a file"):
            _bench(counting, out)
    else:
        with pytest.raises(ValueError, match="batch size"):
            _bench(counting, out, batch_size=0)
    assert counting.calls == 0


@pytest.mark.parametrize("flag", ["--limit", "--batch-size"])
def test_cli_rejects_zero_counts(tmp_path, flag, capsys):
    with pytest.raises(SystemExit):
        cli_main(["bench", "parallelbench", flag, "0", "--out", str(tmp_path)])
    assert "must be a positive integer, got 0" in capsys.readouterr().err


def test_cli_bad_out_fails_before_loading(tmp_path, capsys):
    out = tmp_path / "f"
    out.write_text("")
    code = cli_main(["bench", "parallelbench", "--model", str(tmp_path / "no-model"), "--out", str(out)])
    assert code == 2 and "is a file" in capsys.readouterr().err  # not a model-loading error


def test_rerun_resumes_and_never_shrinks_the_summary(model, tmp_path):
    counting = CountingModel(model)
    _bench(counting, tmp_path, runs=(K1,))
    assert counting.calls == 2  # one batch per task
    first = json.loads((tmp_path / "summary.json").read_text())
    summary = _bench(counting, tmp_path, runs=(K1, K4))
    assert counting.calls == 4  # only k4's two tasks were decoded
    again = json.loads((tmp_path / "summary.json").read_text())
    k1_rows = [r for r in again["rows"] if r["run"] == "k1"]
    assert k1_rows == [r for r in first["rows"] if r["run"] == "k1"]
    _bench(counting, tmp_path, runs=(K4,))  # asking for fewer runs keeps the others
    assert counting.calls == 4
    assert {e["run"] for e in summary["runs"]} == {"k1", "k4"}
    assert {r["run"] for r in json.loads((tmp_path / "summary.json").read_text())["rows"]} == {"k1", "k4"}
    assert len(again["meta"]["invocations"]) == 2


def test_resumed_run_says_what_it_skipped(model, tmp_path, caplog):
    _bench(model, tmp_path, runs=(K1,))
    with caplog.at_level("INFO", logger="dllm"):
        _bench(model, tmp_path, runs=(K1, K4))  # k1's two tasks are in the summary, k4's are not
    assert [r.getMessage() for r in caplog.records if "resumed" in r.getMessage()] == [
        f"resumed 2 of 4 (run, task) pairs: already in {tmp_path / 'summary.json'}, skipped"]


def test_rerun_with_changed_options_is_refused(model, tmp_path):
    _bench(model, tmp_path, runs=(K1,))
    changed = Run(name="k1", line="top-k", options={"policy": "random"}, tokens_per_step=1)
    with pytest.raises(ValueError, match="already holds run 'k1'"):
        _bench(model, tmp_path, runs=(changed,))
    with pytest.raises(ValueError, match="sample_ids"):
        _bench(model, tmp_path, runs=(K1,), limit=2)


def test_interrupt_leaves_a_consistent_summary_that_resumes(model, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _bench(CountingModel(model, stop_after=1), tmp_path, runs=(K1,))
    kept = json.loads((tmp_path / "summary.json").read_text())  # valid JSON, the finished pair only
    assert [(r["run"], r["task"]) for r in kept["rows"]] == [("k1", TASKS[0])]
    assert not [p for p in tmp_path.rglob("*.tmp")]
    counting = CountingModel(model)
    _bench(counting, tmp_path, runs=(K1,))
    assert counting.calls == 1


def test_summary_records_what_produced_it(model, tmp_path):
    _bench(model, tmp_path)
    meta = json.loads((tmp_path / "summary.json").read_text())["meta"]
    assert {"model", "dllm_version", "git_commit", "data_dir", "command", "time_utc", "machine"} <= set(meta)
    assert meta["machine"]["cpu_count"] and meta["machine"]["torch"]


def test_results_are_written_without_matplotlib(model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    summary = _bench(model, tmp_path)
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "summary.csv").is_file()
    assert not (tmp_path / "pareto.png").exists()
    assert "pip install" in summary["plots"] and "dllm.bench.plots" in summary["plots"]


def test_batch_size_does_not_change_results(model, tmp_path):
    one = _bench(model, tmp_path / "b1", batch_size=1)
    three = _bench(model, tmp_path / "b3", batch_size=3)
    for task in TASKS:
        a, b = (read_samples(tmp_path / d, "k1", task) for d in ("b1", "b3"))
        assert [x["output"] for x in a] == [x["output"] for x in b]
    assert one["runs"][0]["mean_score"] == three["runs"][0]["mean_score"]


def test_plan_has_one_entry_per_run_and_task():
    plans = plan_parallelbench(require_data(), [K1, K4], tasks=TASKS, shots=None, limit=2, batch_size=2)
    assert [(p.run.name, p.spec.name) for p in plans] == [(r, t) for r in ("k1", "k4") for t in TASKS]
    assert all(p.shots == 1 and len(p.samples) == 2 and p.available == 100 for p in plans)


def test_progress_bar_only_for_a_terminal(monkeypatch):
    from dllm.cli.output import show_progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert show_progress(quiet=False)
    assert not show_progress(quiet=True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not show_progress(quiet=False)


def test_rows_record_the_weights_and_a_prepacked_rerun_is_refused(model, tmp_path):
    """A stored row says how its weights ran; rows written before that record count as float32,
    not prepacked, and a prepacked model does not resume from them."""
    _bench(model, tmp_path, runs=(K1,))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {(r["dtype"], r["prepack"]) for r in summary["rows"]} == {("float32", False)}
    for row in summary["rows"]:  # as rows were written before the weights were recorded
        del row["dtype"], row["prepack"]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    counting = CountingModel(model)
    _bench(counting, tmp_path, runs=(K1,))
    assert counting.calls == 0
    from dllm.models.prepack import prepack_refused

    if prepack_refused() is not None:  # load refuses it here (test_prepack_probe.py)
        pytest.skip(f"load(prepack=True) is refused here: {prepack_refused()}")
    packed = dllm.load(model.path, device="cpu", dtype="float32", prepack=True)
    with pytest.raises(ValueError, match="made with other prepack"):
        _bench(packed, tmp_path, runs=(K1,))


def test_gen_length_puts_every_task_on_that_canvas():
    """A run's gen_length replaces each task's own (32 waiting line, 64 Latin square) and its
    steps follow it; --gen-length names the run, and a --runs file keeps its own."""
    from dllm.bench.parallelbench_cli import build_runs
    from dllm.cli.main import build_parser

    long = Run(name="k1_gen128", line="top-k", options={"policy": "low_confidence"}, tokens_per_step=1, gen_length=128)
    plans = plan_parallelbench(require_data(), [K1, long], tasks=TASKS, shots=0, limit=1, batch_size=1)
    assert [(p.config.gen_length, p.config.steps) for p in plans] == [(32, 32), (64, 64), (128, 128), (128, 128)]
    ns = build_parser().parse_args(
        ["bench", "parallelbench", "--out", "o", "--tokens-per-step", "1", "--gen-length", "64"])
    (run,) = build_runs(ns)
    assert run.gen_length == 64 and run.name.endswith("gen=64")
