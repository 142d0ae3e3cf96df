"""Pareto plots of a ParallelBench summary: mean score against tokens per forward.

Each line (e.g. "top-k", "threshold") gets its points labelled by what varies along it (k,
tau, cache ...), and its Pareto front (points no other point of the line beats on both score
and TPF) drawn as a step line; dominated points are hollow. Lines are grouped into panels by
cache so a sweep with many lines is split rather than squeezed. matplotlib is optional and
imported only here, when a plot is drawn:

    python -m dllm.bench.plots bench/results/pb_topk/summary.json   # redraw from a summary
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

MAX_LINES_PER_PANEL = 6
MARKERS = "osD^v<>pPX*"
LABEL_OFFSETS = ((5, 5), (5, -11), (-24, 7), (-24, -11))  # cycled so neighbouring labels part
INSTALL_HINT = "pip install matplotlib (or the 'plot' extra: pip install 'dllm[plot]')"


class MissingMatplotlib(RuntimeError):
    """Plots were asked for but matplotlib is not installed (the results are written anyway)."""


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points (tpf, score) that no other point matches or beats on both, by rising TPF."""
    front = []
    for p in sorted(set(points), key=lambda q: (-q[0], -q[1])):  # highest TPF first
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return front[::-1]


def point_labels(names: list[str]) -> list[str]:
    """What tells a line's runs apart: the names without their common prefix (cut back to a
    separator, or to where a trailing number starts), e.g. low_confidence_k=1 -> k=1."""
    if len(names) < 2:
        return [""] * len(names)
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    cut = max(prefix.rfind(sep) for sep in "_+- ") + 1
    if cut == 0:
        cut = len(re.sub(r"[0-9.]+$", "", prefix))
    return [name[cut:] or name for name in names]


def _panels(entries: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Lines grouped by their cache (one panel per cache, split further past MAX_LINES_PER_PANEL)."""
    by_line: dict[str, set[str]] = {}
    for e in entries:
        caches = {t.get("config", {}).get("cache", "none") for t in e["tasks"].values()}
        by_line.setdefault(e["line"], set()).update(caches)
    groups: dict[str, list[str]] = {}
    for line, caches in by_line.items():
        key = next(iter(caches)) if len(caches) == 1 else "mixed"
        groups.setdefault(key, []).append(line)
    panels = []
    for cache, lines in groups.items():
        title = "caches compared" if cache == "mixed" else f"cache: {cache}"
        chunks = -(-len(lines) // MAX_LINES_PER_PANEL)
        size = -(-len(lines) // chunks)  # balanced: 8 lines -> 4 + 4, not 6 + 2
        for i in range(0, len(lines), size):
            part = f" ({i // size + 1}/{chunks})" if chunks > 1 else ""
            panels.append((title + part, lines[i : i + size]))
    return panels


def describe(summary: dict[str, Any]) -> str:
    """Samples per task, shots and model, for a plot's title."""
    rows = summary.get("rows") or [t for e in summary["runs"] for t in e["tasks"].values()]
    samples = sorted({r["samples"] for r in rows})
    shots = sorted({r.get("shots") for r in rows}, key=str)
    sampled = "all samples" if all(r.get("sampling", "all") == "all" for r in rows) else "stratified subset"
    sources = sorted({r["source"] for r in rows if r.get("source")})
    if sources:  # generated samples, not the official files
        sampled = ", ".join(sources) + ("" if sampled == "all samples" else f", {sampled}")
    n = f"{samples[0]}" if len(samples) == 1 else f"{samples[0]}-{samples[-1]}"
    shot_text = "/".join("?" if s is None else str(s) for s in shots)
    model = Path(str(summary.get("meta", {}).get("model", ""))).name
    tasks = len({r["task"] for r in rows})
    return f"{model + ', ' if model else ''}{tasks} tasks x {n} samples ({sampled}), {shot_text}-shot"


def plot_pareto(summary: dict[str, Any], path: Path, title: str | None = None) -> list[Path]:
    """Draw ``path`` (one panel per cache group); returns the files written."""
    try:
        import matplotlib
    except ImportError as err:
        raise MissingMatplotlib(f"matplotlib is not installed, so no plot was drawn (the results are in "
                                f"{path.parent / 'summary.json'}); {INSTALL_HINT}, then run "
                                f"python -m dllm.bench.plots {path.parent / 'summary.json'}") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    tasks = {t for e in summary["runs"] for t in e["tasks"]}  # a run still going is not averaged over fewer tasks
    entries = [e for e in summary["runs"] if e.get("mean_score") is not None and e.get("tpf") is not None
               and set(e["tasks"]) == tasks]
    panels = _panels(entries) or [("", [])]
    cols = min(len(panels), 2)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.8 * rows), sharex=True, sharey=True, squeeze=False)
    palette = plt.get_cmap("tab10").colors
    for ax, (panel_title, lines) in zip(axes.flat, panels):
        for i, line in enumerate(lines):
            runs = [e for e in entries if e["line"] == line]
            pts = [(e["tpf"], 100 * e["mean_score"]) for e in runs]
            front = pareto_front(pts)
            color, marker = palette[i % len(palette)], MARKERS[i % len(MARKERS)]
            on_front = [p in front for p in pts]
            ax.scatter([p[0] for p, f in zip(pts, on_front) if f], [p[1] for p, f in zip(pts, on_front) if f],
                       color=color, marker=marker, s=36, zorder=3, label=line)
            ax.scatter([p[0] for p, f in zip(pts, on_front) if not f], [p[1] for p, f in zip(pts, on_front) if not f],
                       facecolors="none", edgecolors=color, marker=marker, s=36, zorder=3)
            if len(front) > 1:  # "pre": between two front points the better TPF keeps the lower score
                ax.step([p[0] for p in front], [p[1] for p in front], where="pre", color=color, alpha=0.8)
            for j, ((x, y), label) in enumerate(zip(pts, point_labels([e["run"] for e in runs]))):
                if label:
                    ax.annotate(label, (x, y), textcoords="offset points", fontsize=7, color=color,
                                xytext=LABEL_OFFSETS[(i + j) % len(LABEL_OFFSETS)])
        ax.set_title(panel_title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_xlabel("tokens per forward (TPF)")
        ax.set_ylabel("mean ParallelBench score (%)")
        if lines:
            ax.legend(fontsize=7, loc="best")
    tpfs = [e["tpf"] for e in entries if e["tpf"] > 0]
    if tpfs and max(tpfs) / min(tpfs) > 6:  # a wide TPF range: log scale keeps the low end readable
        axes.flat[0].set_xscale("log", base=2)
        axes.flat[0].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    heading = title or path.parent.name
    fig.suptitle(f"{heading}: score against TPF ({describe(summary)})\n"
                 "filled + step line: Pareto front of each line; hollow: dominated", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Redraw the Pareto plot of a `dllm bench parallelbench` summary.")
    ap.add_argument("summary", type=Path, help="summary.json of a run")
    ap.add_argument("--out", type=Path, default=None, help="PNG path (default: pareto.png beside the summary)")
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)
    summary = json.loads(args.summary.read_text())
    for written in plot_pareto(summary, args.out or args.summary.parent / "pareto.png", args.title):
        print(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
