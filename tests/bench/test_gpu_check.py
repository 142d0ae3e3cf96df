"""The GPU check command runs end to end on CPU with tiny models (every stage: imports, the
test stage, models built on the device, timed decodes, JSON + markdown), refuses bad input
before any model work, and its pieces (peak table, roofline, model builder) behave."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dllm.bench import gpu_check, preflight
from dllm.bench.device_peaks import device_peak
from dllm.bench.random_models import build_random_model, shape_config
from dllm.bench.roofline import forward_cost


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One ``--device cpu --tiny --full`` run (every stage; the compile rows through aot_eager, as
    the compile tests do: inductor's code generation takes minutes on a small CPU); its test stage
    runs one small test file of the suite."""
    out = tmp_path_factory.mktemp("gpu_check")
    argv = ["--device", "cpu", "--tiny", "--full", "--reps", "1", "--out", str(out), "-q",
            "--pytest-args", "tests/models/test_placement.py -k checkpoint_dtype -p no:cacheprovider"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLLM_COMPILE_BACKEND", "aot_eager")
        mp.delenv(gpu_check.FASTDLLM_ENV, raising=False)
        status = gpu_check.main(argv)
    folders = list(out.glob("gpu_*"))
    return status, folders


def test_tiny_run_end_to_end_on_cpu(tiny_run, capsys):
    status, folders = tiny_run
    assert status == 0 and len(folders) == 1 and folders[0].name.startswith("gpu_cpu")
    folder = folders[0]
    tests = json.loads((folder / "tests.json").read_text())
    assert tests["returncode"] == 0 and "passed" in tests["summary"] and "DLLM_TEST_DEVICE=cpu" in tests["command"]
    assert (folder / "tests.log").read_text()
    env = json.loads((folder / "environment.json").read_text())
    assert {"torch", "transformers", "safetensors", "pytest"} <= set(env["versions"])
    report = (folder / "results.md").read_text()
    # the batch-invariance section ran on the first model, both modes, and is in the report
    inv = json.loads((folder / "invariance_tiny-llada.json").read_text())
    assert inv["rows"] == 8 and len(set(inv["prompt_lengths"])) > 1 and inv["replaced"]["linear"] > 0
    for mode in ("default", "batch_invariant"):
        assert 0 <= inv[mode]["rows_equal"] <= 8 and inv[mode]["median_forward_s"] > 0
    assert inv["forward_ratio"] == inv["batch_invariant"]["median_forward_s"] / inv["default"]["median_forward_s"]
    assert [t["batch"] for t in inv["timing"]] == [1, 2] and all(t["ratio"] > 0 for t in inv["timing"])
    assert "### tiny-llada (float32, cpu" in report and "batch invariance" in report
    for name in ("tiny-llada", "tiny-dream"):
        result = json.loads((folder / f"model_{name}_b1-2_g16.json").read_text())
        assert result["dtype"] == "float32"  # dtype auto on the CPU
        assert {r["method"] for r in result["forwards"]} >= {"none", "prefix", "dual"}
        assert f"### {name}: one forward per cache mode" in report
        for row in result["forwards"] + result["decoding"]:
            assert "error" not in row, row
            assert 0 < row["forward_s"] <= row["wall_s"]  # forwards happen inside the decode
            assert row["tokens_per_s"] * row["wall_s"] == pytest.approx(row["batch"] * row["gen_length"])
            assert row["planned_peak_bytes"] > 0 and row["peak_memory_bytes"] is None  # measured on CUDA only
            plain = not any(k in row["method"] for k in ("FreeDave", "LoPA"))
            if plain:  # one forward per step, charged to every row
                assert row["forwards"] == row["nfe"]
            else:
                assert row["forwards"] >= row["nfe"]
        by_mode = {r["method"]: r for r in result["forwards"] if r["batch"] == 1}
        length, shift = 8 + 16, int(name == "tiny-dream")  # Dream's window starts one position early
        none, dual = by_mode["none"]["forward"], by_mode["dual"]["forward"]
        assert none["queries"] == none["keys"] == length and none["refresh_median_s"] is None
        assert dual["queries"] == 8 + shift and dual["keys"] == length and dual["refresh_median_s"] > 0
        prefix_windows = [s["queries"] for s in by_mode["prefix"]["forward_shapes"] if s["queries"] < s["keys"]]
        assert sorted(prefix_windows) == [8 + shift, 16 + shift]  # [block start, canvas end)


def test_tiny_run_times_every_cache_in_every_forward_mode(tiny_run):
    """The forward-mode stage (issue 38): per cache, eager and compile=True time the step and the
    first token, agree with eager token for token (float32); CUDA graphs are named unavailable on
    a CPU rather than failing the run."""
    status, folders = tiny_run
    modes = json.loads((folders[0] / "modes_tiny-llada_b1_g16.json").read_text())
    rows = {(r["cache"], r["mode"]): r for r in modes["rows"]}
    assert set(rows) == {(c, m) for c in ("none", "prefix", "dual") for m in ("eager", "graphs", "compile")}
    for cache in ("none", "prefix", "dual"):
        assert "CUDA device" in rows[cache, "graphs"]["unavailable"]
        for mode in ("eager", "compile"):
            r = rows[cache, mode]
            assert "error" not in r and "unavailable" not in r, r
            assert 0 < r["first_token_s"] <= r["first_decode_s"] and r["step_s"] > 0 and r["tokens_equal_eager"] == 1.0
            assert r["nfe"] == 16 / 4 and r["floor_s"] is None  # no peak bandwidth known for this CPU
    assert rows["dual", "eager"]["window"] == [1, 8, 24] and rows["none", "eager"]["window"] == [1, 24, 24]
    report = (folders[0] / "results.md").read_text()
    assert "## Forward modes" in report and "| dual | compile |" in report


def test_replayed_forwards_are_timed_and_measured(monkeypatch):
    """CUDA-graph replays run no module hooks: ForwardTimer times them through the graph runner
    (here with the capture emulated on CPU, as tests/runner does), so the forward-mode stage's
    graphs rows get the eager rows' forward shapes (at the captured canvas length) and tokens."""
    import weakref

    from dllm.bench import gpu_measure as gm
    from dllm.bench.forward_timer import ForwardTimer
    from dllm.bench.gpu_modes import measure_modes
    from dllm.engine.config import GenerationConfig
    from dllm.engine.decoding import decode
    from dllm.runner import graphs

    monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    shapes = {}
    for replay in (False, True):
        with ForwardTimer(model) as timer:
            decode(model, prompts, GenerationConfig(gen_length=16, block_length=8, steps=4, cache="dual",
                                                    cuda_graphs=replay))
        shapes[replay] = [(r.rows, r.queries, r.keys) for r in timer.records()]
        assert all(r.seconds > 0 for r in timer.records())
    # the replayed decode's canvas is left-padded to a captured length (4 + 16 positions -> 64)
    captured = graphs.canvas_length(20, 10_000)
    assert shapes[True] == [tuple(captured if n == 20 else n for n in shape) for shape in shapes[False]]
    assert len(shapes[True]) == 4 and captured == 64
    rows = measure_modes(model, gm.Shape(1, 8, 16, 8), device_peak("x"), {}, reps=1, modes=("eager", "graphs"))
    for r in rows:
        assert "error" not in r and r["tokens_equal_eager"] == 1.0 and r["step_s"] > 0, r
    length = graphs.canvas_length(8 + 16, 10_000)  # replayed: the captured canvas length (the GPU check's 512 is one)
    assert [r["window"] for r in rows if r["mode"] == "graphs"] == [
        [length if n == 24 else n for n in r["window"]] for r in rows if r["mode"] == "eager"]
    assert graphs.canvas_length(256 + 256, 10_000) == 512
    assert all(r["graph_stats"]["replays"] > 0 for r in rows if r["mode"] == "graphs")
    from dllm.bench.gpu_report import modes_table

    table = modes_table({"model": "tiny-llada", "dtype": "float32", "device_name": "cpu", "weight_bytes": 1,
                         "bandwidth_gbs": None, "command": "-", "rows": rows})
    graph_lines = [line for line in table if "| graphs |" in line]
    assert graph_lines and all(line.endswith(f"| {r['graph_stats']['captures']} "
                                             f"({r['graph_stats']['capture_seconds']:.2f}) |")
                               for line, r in zip(graph_lines, [r for r in rows if r["mode"] == "graphs"]))


def test_rows_past_the_deadline_are_skipped_and_named():
    from dllm.bench import gpu_measure as gm
    from dllm.bench.gpu_modes import measure_modes

    model = build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)
    rows = measure_modes(model, gm.Shape(1, 8, 16, 8), device_peak("x"), {}, reps=1, modes=("eager",),
                         deadline=0.0)
    assert [r["unavailable"] for r in rows] == ["skipped: the stage's time budget was spent"] * 3


def test_a_failing_stage_is_recorded_and_the_others_run(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")

    monkeypatch.setattr(gpu_check, "measure_modes", broken)
    argv = ["--device", "cpu", "--tiny", "--no-tests", "--models", "tiny-llada", "--batch-sizes", "1",
            "--out", str(tmp_path), "-q"]
    assert gpu_check.main(argv) == gpu_check.EXIT_FAILED
    folder = next(tmp_path.glob("gpu_*"))
    assert "ambiguous" in json.loads((folder / "stage_modes.json").read_text())["error"]
    assert (folder / "invariance_tiny-llada.json").is_file()  # the next stage still ran
    report = capsys.readouterr().out
    assert "**Stage modes failed**" in report and "batch invariance" in report


def test_the_test_stage_stops_at_its_budget(tmp_path):
    slow = tmp_path / "test_slow_probe.py"
    slow.write_text("import time\n\ndef test_quick():\n    pass\n\ndef test_slow():\n    time.sleep(60)\n")
    done = gpu_check.run_tests(torch.device("cpu"), f"{slow} -p no:cacheprovider", tmp_path, budget_s=4)
    assert done["timed_out"] and not done["failed"] and done["seconds"] < 30
    assert done["summary"].startswith("stopped at the 4 s budget: 1 passed")


def test_fastdllm_side_by_side_stage(tmp_path, monkeypatch):
    """With FASTDLLM_DIR set the stage runs Fast-dLLM's loops beside dllm's and tabulates them.
    No checkout here: its loops are stood in for by dllm's own decode (same tokens), which checks
    the stage's plumbing, not Fast-dLLM."""
    from dllm.bench import fastdllm_side
    from dllm.engine.config import GenerationConfig
    from dllm.engine.decoding import decode

    checkout = tmp_path / "Fast-dLLM"
    (checkout / "llada" / "model").mkdir(parents=True)
    (checkout / "llada" / "generate.py").write_text("")
    (checkout / "llada" / "model" / "modeling_llada.py").write_text("")

    class Loops:
        def __getattr__(self, name):
            cache = {v: k for k, v in fastdllm_side.LOOPS.items()}[name]

            def loop(model, x, *, steps, gen_length, block_length, mask_id, **_):
                config = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=steps, cache=cache,
                                          policy="low_confidence", stop_at_eos=False)
                out = decode(model, x.tolist(), config)
                return torch.cat([x, out.answer], dim=1), int(out.nfe[0])
            return loop

    monkeypatch.setattr(fastdllm_side, "check_fastdllm_imports", lambda: None)  # einops etc.: not needed here
    monkeypatch.setattr(fastdllm_side, "import_fastdllm", lambda folder: (Loops(), None, None))
    monkeypatch.setattr(fastdllm_side, "fastdllm_model", lambda folder, config, state, **kw: stand_in[0])
    stand_in = [build_random_model("tiny-llada", device=torch.device("cpu"), dtype=torch.float32)]
    monkeypatch.setenv(gpu_check.FASTDLLM_ENV, str(checkout))
    argv = ["--device", "cpu", "--tiny", "--no-tests", "--no-modes", "--no-batch-invariance", "--models", "tiny-llada",
            "--reps", "2", "--out", str(tmp_path / "out"), "-q"]
    assert gpu_check.main(argv) == 0
    folder = next((tmp_path / "out").glob("gpu_*"))
    side = json.loads((folder / "fastdllm_tiny-llada_b1_g16.json").read_text())
    assert [r["cache"] for r in side["rows"]] == ["none", "prefix", "dual"]
    for r in side["rows"]:
        assert r["tokens_identical"] and r["nfe_dllm"] == r["nfe_fastdllm"] == 4 and len(r["dllm_seconds"]) == 2
    assert "dllm against Fast-dLLM's LLaDA loops" in (folder / "results.md").read_text()
    monkeypatch.setenv(gpu_check.FASTDLLM_ENV, str(tmp_path))  # not a checkout: refused before any model work
    monkeypatch.setattr(gpu_check, "measure_modes", lambda *a, **k: pytest.fail("a model was measured"))
    assert gpu_check.main(argv) == gpu_check.EXIT_USAGE
    monkeypatch.undo()
    real_import = fastdllm_side.importlib.import_module
    monkeypatch.setattr(fastdllm_side.importlib, "import_module",
                        lambda name, *a: (_ for _ in ()).throw(ImportError("gone")) if name == "einops"
                        else real_import(name, *a))
    with pytest.raises(ValueError, match="einops \\(pip package 'einops': gone\\); install them or unset FASTDLLM_DIR"):
        fastdllm_side.check_fastdllm_imports()


def test_a_failing_measurement_is_reported_and_fails_the_run(tmp_path, monkeypatch, capsys):
    import dllm.bench.gpu_measure as gm

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore detail")

    monkeypatch.setattr(gm, "decode", broken)
    argv = ["--device", "cpu", "--tiny", "--full", "--no-tests", "--no-modes", "--no-batch-invariance",
            "--models", "tiny-llada", "--batch-sizes", "1", "--out", str(tmp_path), "-q"]
    assert gpu_check.main(argv) == gpu_check.EXIT_FAILED
    report = capsys.readouterr().out
    assert "RuntimeError: CUDA error: an illegal memory access was encountered |" in report


def test_unknown_peaks_leave_the_ceiling_blank(tiny_run):
    folder = tiny_run[1][0]
    row = json.loads((folder / "model_tiny-llada_b1-2_g16.json").read_text())["forwards"][0]
    assert row["forward"]["ceiling_s"] is None and row["forward"]["x_ceiling"] is None


@pytest.mark.parametrize("argv, message", [
    (["--device", "cpu"], "pass --tiny"),
    (["--device", "cpu", "--tiny", "--gen-lengths", "12"], "not a multiple of block_length"),
    (["--device", "cpu", "--tiny", "--config-arg", "gen_length=8"], "not a GenerationConfig field"),
    (["--device", "cpu", "--tiny", "--config-arg", "colour=red"], "not a GenerationConfig field"),
    (["--device", "tpu:7", "--tiny"], "not a torch device"),
    (["--device", "cpu", "--tiny", "--prompt-length", "1000", "--gen-lengths", "32"], "exceed tiny-llada's context"),
])
def test_bad_input_is_one_error_before_any_model_work(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "measure_model", lambda *a, **k: pytest.fail("a model was built"))
    monkeypatch.setattr(gpu_check, "measure_modes", lambda *a, **k: pytest.fail("a model was built"))
    monkeypatch.setattr(gpu_check, "measure_invariance", lambda *a, **k: pytest.fail("a model was built"))
    monkeypatch.setattr(gpu_check, "run_tests", lambda *a, **k: pytest.fail("the tests ran"))
    assert gpu_check.main([*argv, "--out", str(tmp_path / "out")]) == gpu_check.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: error:") and message in err
    assert not (tmp_path / "out").exists()


def test_cuda_without_cuda_and_missing_modules_are_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--device", "cuda", "--out", str(tmp_path)]) == gpu_check.EXIT_USAGE
    assert "this torch sees no CUDA device" in capsys.readouterr().err
    real_import = preflight.importlib.import_module

    def without_yaml(name, *args):
        if name in ("yaml", "pytest"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(preflight.importlib, "import_module", without_yaml)
    assert gpu_check.main(["--device", "cpu", "--tiny", "--out", str(tmp_path)]) == gpu_check.EXIT_USAGE
    err = capsys.readouterr().err
    assert "yaml (pip package 'pyyaml'" in err and "pytest (pip package 'pytest'" in err and "never installs" in err
    with pytest.raises(preflight.MissingModules, match="triton"):  # CUDA needs the kernel's triton too
        monkeypatch.setattr(preflight.importlib, "import_module",
                            lambda name, *a: (_ for _ in ()).throw(ImportError("gone")) if name == "triton"
                            else real_import(name, *a))
        preflight.check_imports(tests=False, cuda=True)


def test_preflight_script_names_a_broken_module_before_dllm_is_imported(tmp_path):
    """bench/gpu_check.sh runs the preflight as a plain script: it must report, not crash."""
    (tmp_path / "yaml.py").write_text("raise ImportError('this yaml is broken')\n")
    script = Path(preflight.__file__)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), "--device", "cpu"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "yaml (pip package 'pyyaml'" in done.stderr and "this yaml is broken" in done.stderr
    assert "--no-tests" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("name, table", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"),
    ("NVIDIA A10G", "A10G"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
])
def test_peak_table_picks_the_specific_sku_first(name, table):
    peak = device_peak(name)
    assert peak.name == table and peak.source == "table" and peak.bandwidth_gbs > 0 and peak.bf16_tflops > 0


def test_peak_override_and_unknown_device():
    unknown = device_peak("Some Future Accelerator")
    assert unknown.bandwidth_gbs is None and unknown.source == "unknown"
    h100 = device_peak("NVIDIA H100 80GB HBM3", bandwidth_gbs=3000.0)
    assert h100.bandwidth_gbs == 3000.0 and h100.bf16_tflops == device_peak("NVIDIA H100").bf16_tflops
    assert h100.source == "override"


def test_roofline_counts_weights_once_and_kv_per_key():
    model = build_random_model("tiny-dream", device=torch.device("cpu"), dtype=torch.bfloat16)
    cfg = model.config
    one = forward_cost(model, rows=2, queries=4, keys=40)
    more_keys = forward_cost(model, rows=2, queries=4, keys=80)
    kv_per_key = 2 * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 2  # K and V, 2 rows, bf16
    assert more_keys.bytes_read - one.bytes_read == 40 * kv_per_key
    more_queries = forward_cost(model, rows=2, queries=8, keys=40)
    assert more_queries.bytes_read - one.bytes_read == 2 * 4 * cfg.d_model * 2  # only the embedding rows
    assert more_queries.flops > one.flops
    peak = device_peak("x", bandwidth_gbs=1.0, tflops=1e-3)  # 1 GB/s, 1 GFLOP/s
    assert one.ceiling_seconds(peak) == max(one.bytes_read / 1e9, one.flops / 1e9)


@pytest.mark.parametrize("name", ["tiny-llada", "tiny-dream"])
def test_random_models_are_built_in_the_asked_dtype_and_run(name):
    model = build_random_model(name, device=torch.device("cpu"), dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in model.parameters())
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert torch.equal(model.norm.weight, torch.ones_like(model.norm.weight))
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    logits = model(ids, torch.arange(12).expand(2, 12))
    assert logits.shape == (2, 12, model.config.vocab_size) and torch.isfinite(logits).all()
    again = build_random_model(name, device=torch.device("cpu"), dtype=torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))  # seeded


def test_real_shapes_are_the_published_configs():
    llada, dream = shape_config("llada-8b"), shape_config("dream-7b")
    assert (llada.d_model, llada.n_layers, llada.n_heads, llada.mlp_hidden_size, llada.vocab_size) == \
        (4096, 32, 32, 12288, 126464)
    assert (dream.d_model, dream.n_layers, dream.n_heads, dream.n_kv_heads, dream.shift_logits) == \
        (3584, 28, 28, 4, True)


def test_preflight_names_the_whole_suites_server_and_eval_modules_only_when_it_runs(monkeypatch):
    """A GPU image without a module the server or lm-eval tests import (or one of its own
    dependencies) is named by the preflight, before the whole suite would stop at collection; the
    default GPU subset imports none of them, so it runs on such an image (the lent H100 lacked
    opentelemetry, httpx2 and lm-eval, and the whole default check would have stopped there)."""
    real_import = preflight.importlib.import_module

    def broken(name, *args):
        if name in ("fastapi", "lm_eval"):
            raise ImportError(f"No module named {'opentelemetry' if name == 'fastapi' else name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(preflight.importlib, "import_module", broken)
    with pytest.raises(preflight.MissingModules) as err:
        preflight.check_imports(tests=True, cuda=False, whole_suite=True)
    assert "fastapi (pip package 'fastapi'" in str(err.value) and "opentelemetry" in str(err.value)
    assert "lm_eval (pip package 'lm-eval'" in str(err.value) and "no --full, no --pytest-args" in str(err.value)
    preflight.check_imports(tests=True, cuda=False)  # the GPU subset does not import them
    assert preflight.main(["--device", "cpu"]) == 0
    for argv in (["--full"], ["--pytest-args", "tests/serve"], ["--pytest-args=tests"]):
        assert preflight.main(["--device", "cpu", *argv]) == 2
    assert preflight.main(["--device", "cpu", "--full", "--no-tests"]) == 0
    preflight.check_imports(tests=False, cuda=False, whole_suite=True)  # without the suite they are not needed


def test_preflight_reads_the_device_as_the_check_will(monkeypatch):
    """bench/gpu_check.sh hands the check's arguments to the preflight first: --device=D counts as
    --device D, the last one wins, and "auto" follows $DLLM_DEVICE as the check's device="auto"
    does. A GPU machine run with --device=cpu (or DLLM_DEVICE=cpu) was asked for the CUDA modules
    (triton) the CPU run never imports."""
    asked = []
    monkeypatch.setattr(preflight, "check_imports", lambda tests, cuda, whole_suite=False: asked.append(cuda))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("DLLM_DEVICE", raising=False)
    for argv in (["--device=cpu"], ["--device", "cuda", "--device=cpu"], ["--no-tests", "--device", "cpu"]):
        assert preflight.main(argv) == 0 and asked.pop() is False, argv
    for argv in ([], ["--device=auto"], ["--device=cuda:1"], ["--device", "cpu", "--device", "cuda"]):
        assert preflight.main(argv) == 0 and asked.pop() is True, argv
    monkeypatch.setenv("DLLM_DEVICE", "cpu")
    assert preflight.main([]) == 0 and asked.pop() is False
    assert preflight.main(["--device", "cuda"]) == 0 and asked.pop() is True  # a named device wins
