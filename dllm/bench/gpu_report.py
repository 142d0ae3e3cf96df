"""Results of the GPU check: one JSON file per model (plus the test run's), and one markdown
file with every table, rebuilt from all the JSON files in the folder so that runs split over
several commands (one model each) end in one report."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def device_slug(name: str) -> str:
    """A folder-safe name of a device: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def forward_table(model: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"### {model}: one forward per cache mode", "",
             "| batch | gen | cache | window forward (N x T, keys) | median ms | refresh ms | GB read | ceiling ms "
             "| x ceiling | HBM share | overhead ms/step | overhead share |",
             "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['gen_length']} | {r['method']} | {r['error']} | | | | | | | | |")
            continue
        f = r["forward"]
        lines.append(f"| {r['batch']} | {r['gen_length']} | {r['method']} | {f['rows']} x {f['queries']}, {f['keys']} "
                     f"| {_ms(f['median_s'])} | {_ms(f['refresh_median_s'])} | {f['bytes'] / 1e9:.2f} | {_ms(f['ceiling_s'])} "
                     f"| {_num(f['x_ceiling'], '.2f')} | {_pct(f['bandwidth_share'])} "
                     f"| {_ms(r['overhead_s_per_step'])} | {_pct(r['overhead_share'])} |")
    return lines


def decoding_table(model: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"### {model}: tokens/s per decoding method (dual cache)", "",
             "| batch | gen | method | tokens/s | NFE | TPF | forwards | overhead share | peak GiB (planned) |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['gen_length']} | {r['method']} | {r['error']} | | | | | |")
            continue
        peak = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**30:.1f}"
        lines.append(f"| {r['batch']} | {r['gen_length']} | {r['method']} | {_num(r['tokens_per_s'], '.1f')} "
                     f"| {r['nfe']:.1f} | {_num(r['tpf'], '.2f')} | {r['forwards']} | {_pct(r['overhead_share'])} "
                     f"| {peak} ({r['planned_peak_bytes'] / 2**30:.1f}) |")
    return lines


def invariance_table(name: str, r: dict) -> list[str]:
    """Markdown lines of one batch-invariance result (``dllm.bench.batch_invariance``)."""
    lines = [f"### {name}: batch invariance ({r['rows']} ragged rows, prompts {min(r['prompt_lengths'])}-"
             f"{max(r['prompt_lengths'])} + {r['gen_length']} masks, one uncached forward, {r['device']}, "
             f"kernels: {r['kernel_backend']})", "",
             "| mode | rows equal to batch 1 | max abs diff | median forward ms |", "|---|---:|---:|---:|"]
    for mode in ("default", "batch_invariant"):
        m = r[mode]
        lines.append(f"| {mode} | {m['rows_equal']}/{r['rows']} | {m['max_abs_diff']:.3g} | "
                     f"{m['median_forward_s'] * 1e3:.2f} |")
    lines += ["", f"batch_invariant / default forward time: {r['forward_ratio']:.2f}x (same run). Replaced: "
              f"{r['replaced']['linear']} linears, {r['replaced']['rms_norm']} RMSNorms, "
              f"{r['replaced'].get('attention', 0)} attentions."]
    if r.get("timing"):
        lines += ["", "| batch (ragged canvas forward) | default ms | batch_invariant ms | ratio |", "|---:|---:|---:|---:|"]
        lines += [f"| {t['batch']} | {t['default_s'] * 1e3:.2f} | {t['batch_invariant_s'] * 1e3:.2f} | "
                  f"{t['ratio']:.2f}x |" for t in r["timing"]]
    if r.get("steps"):
        lines += ["", "| batch | cache | forward mode | default step ms | batch_invariant step ms | ratio |",
                  "|---:|---|---|---:|---:|---:|"]
        lines += [f"| {t['batch']} | {t['cache']} | {t['mode']} | {t['default_s'] * 1e3:.2f} | "
                  f"{t['batch_invariant_s'] * 1e3:.2f} | {t['ratio']:.2f}x |" for t in r["steps"]]
        lines += ["", "Step: a warm decode's wall time per forward (one block of masks, 4 tokens per step), "
                  "each mode in the same run; issue 39's target is at most 1.35x at batch 1 and 8."]
    return lines


def modes_table(m: dict[str, Any]) -> list[str]:
    """Markdown lines of the forward-mode stage (``dllm.bench.gpu_modes``)."""
    rows = m["rows"]
    first = rows[0] if rows else {}
    lines = [f"### {m['model']} ({m['dtype']}, {m['device_name']}): the decode step per cache and forward mode", "",
             f"Batch {first.get('batch')}, prompt {first.get('prompt_length')}, answer {first.get('gen_length')}, "
             f"block {first.get('block_length')}, LLaDA top-k 4 tokens per step; weights "
             f"{m['weight_bytes'] / 1e9:.2f} GB at {m['bandwidth_gbs'] or '?'} GB/s. Command: `{m['command']}`", "",
             "| cache | mode | step ms | x floor | x ceiling | forward ms | floor ms | tokens/s | first token s "
             "| first decode s | tokens = eager | overhead share | graphs captured (s) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        reason = r.get("error") or r.get("unavailable")
        if reason:
            lines.append(f"| {r['cache']} | {r['mode']} | {reason} | | | | | | | | | | |")
            continue
        lines.append(f"| {r['cache']} | {r['mode']} | {_ms(r['step_s'])} | {_num(r['x_floor'], '.2f')} "
                     f"| {_num(r['x_ceiling'], '.2f')} | {_ms(r['forward_median_s'])} | {_ms(r['floor_s'])} "
                     f"| {_num(r['tokens_per_s'], '.1f')} | {r['first_token_s']:.2f} | {r['first_decode_s']:.2f} "
                     f"| {_pct(r['tokens_equal_eager'])} | {_pct(r['overhead_share'])} | {_captures(r)} |")
    lines += ["", "Step: a warm decode's wall time per forward (engine included; median of the warm decodes). "
              "Floor: the window forward's bytes (weights once, its K/V) at peak bandwidth; ceiling: the larger of "
              "that and its FLOPs at peak throughput. First token / first decode: the mode's first decode, "
              "compilation or graph capture included (graphs and compiled code are kept per model, so a later "
              "cache pays only for the shapes it adds). Tokens = eager: the share of the first decode's tokens "
              "equal to the eager decode's. Graphs captured: the model's graph count after the row (cumulative "
              "over the caches: a later cache captures only its new shapes) and the seconds capturing took."]
    return lines


def _captures(row: dict[str, Any]) -> str:
    stats = row.get("graph_stats")
    return "" if not stats else f"{stats['captures']} ({stats['capture_seconds']:.2f})"


def fastdllm_table(r: dict[str, Any]) -> list[str]:
    """Markdown lines of the Fast-dLLM side by side (``dllm.bench.fastdllm_side``)."""
    lines = [f"### {r['model']} ({r['dtype']}, {r['device_name']}): dllm against Fast-dLLM's LLaDA loops", "",
             f"Batch {r['batch']}, prompt {r['prompt_length']}, answer {r['gen_length']}, block {r['block_length']}, "
             f"top-k {r['tokens_per_step']} tokens per step, {r['reps']} interleaved runs a side; Fast-dLLM commit "
             f"{r['fastdllm_commit'] or '?'}. Speedup: Fast-dLLM time / dllm time per pair, median [min, max].", "",
             "| cache | Fast-dLLM tok/s | dllm tok/s | speedup | forwards speedup | in forwards (dllm / Fast-dLLM) "
             "| NFE | tokens identical |", "|---|---:|---:|---|---:|---|---|---|"]
    for x in r["rows"]:
        if "error" in x:
            lines.append(f"| {x['cache']} | {x['error']} | | | | | | |")
            continue
        lines.append(f"| {x['cache']} | {x['fastdllm_tokens_per_s']:.1f} | {x['dllm_tokens_per_s']:.1f} "
                     f"| {x['speedup_median']:.2f}x [{x['speedup_min']:.2f}, {x['speedup_max']:.2f}] "
                     f"| {x['forward_speedup']:.2f}x | {x['dllm_in_forwards']:.0%} / {x['fastdllm_in_forwards']:.0%} "
                     f"| {x['nfe_dllm']} / {x['nfe_fastdllm']} | {'yes' if x['tokens_identical'] else 'no'} |")
    return lines


def markdown_report(folder: Path) -> str:
    """Every table of the JSON results in ``folder``."""
    parts = [f"# GPU check: {folder.name}", ""]
    tests = folder / "tests.json"
    if tests.is_file():
        t = json.loads(tests.read_text())
        parts += ["## Test suite", "", f"`{t['command']}` on {t['device']}: {t['summary']} "
                  f"(exit status {t['returncode']}, {t['seconds']:.0f} s; log: tests.log)", ""]
    for path in sorted(folder.glob("stage_*.json")):
        st = json.loads(path.read_text())
        if "skipped" in st:
            parts += [f"**Stage {st['stage']} skipped**: {st['skipped']}", ""]
        else:
            parts += [f"**Stage {st['stage']} failed** after {st['seconds']:.0f} s: {st['error']}", ""]
    for path in sorted(folder.glob("modes_*.json")):
        parts += ["## Forward modes", ""] + modes_table(json.loads(path.read_text())) + [""]
    for path in sorted(folder.glob("fastdllm_*.json")):
        parts += ["## Side by side with Fast-dLLM", ""] + fastdllm_table(json.loads(path.read_text())) + [""]
    for path in sorted(folder.glob("model_*.json")):
        m = json.loads(path.read_text())
        d = m["device"]
        parts += [f"## {m['model']} ({m['parameters'] / 1e9:.2f}B parameters, {m['dtype']})", "",
                  f"Device {d['name']}; peaks: {d['bandwidth_gbs'] or '?'} GB/s, {d['bf16_tflops'] or '?'} "
                  f"TFLOP/s ({d['peak_source']}). Built in {m['build_s']:.1f} s, warm-up {m['warmup_s']:.1f} s. "
                  f"Command: `{m['command']}`", ""]
        parts += forward_table(m["model"], m["forwards"]) + [""]
        parts += decoding_table(m["model"], m["decoding"]) + [""]
    for path in sorted(folder.glob("invariance_*.json")):
        r = json.loads(path.read_text())
        parts += invariance_table(f"{r['model']} ({r['dtype']}, {r['device_name']})", r) + [""]
    parts += ["Window forward: a cached step's forward (the canvas forward without a cache); refresh: "
              "the block-start forward over the canvas. x ceiling: the window forwards' time / their "
              "max(bytes read / peak bandwidth, FLOPs / peak bf16 throughput); HBM share: (bytes / peak "
              "bandwidth) / measured. Overhead: decode wall "
              "time minus the forwards' time (CUDA events), per forward and as a share of wall time. "
              "Peak: the device's allocated high-water mark during the decode (CUDA only), next to "
              "dllm.engine.memory's planned upper bound. Random weights: confidences are low, so threshold "
              "methods commit few tokens per step.", ""]
    return "\n".join(parts)
