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
    return lines


def markdown_report(folder: Path) -> str:
    """Every table of the JSON results in ``folder``."""
    parts = [f"# GPU check: {folder.name}", ""]
    tests = folder / "tests.json"
    if tests.is_file():
        t = json.loads(tests.read_text())
        parts += ["## Test suite", "", f"`{t['command']}` on {t['device']}: {t['summary']} "
                  f"(exit status {t['returncode']}, {t['seconds']:.0f} s; log: tests.log)", ""]
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
