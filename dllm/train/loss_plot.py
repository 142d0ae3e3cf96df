"""Plot the training loss of one or more consecutive stages (train_log.jsonl files) as a PNG.

    python -m dllm.train.loss_plot runs/stage1/train_log.jsonl runs/stage2/train_log.jsonl --out loss.png

Stages are drawn end to end on one step axis, each in its own colour, with a 25-step moving
average over the raw per-step loss and the held-out exact-decode mean marked at every evaluation.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_log(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, loss) for every step and (step, held-out mean score) for every evaluation."""
    losses, evals = [], []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            losses.append((record["step"], record["loss"]))
        if "eval" in record:
            evals.append((record["step"], record["eval"]["mean"]))
    return losses, evals


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_stages(logs: list[Path], out: Path, labels: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.2))
    ax2 = ax.twinx()
    offset = 0
    for i, path in enumerate(logs):
        losses, evals = read_log(path)
        label = labels[i] if labels else path.parent.name
        steps = [offset + s for s, _ in losses]
        ax.plot(steps, moving_average([l for _, l in losses], 25), label=f"{label} loss")
        ax2.plot([offset + s for s, _ in evals], [100 * m for _, m in evals], "o--", label=f"{label} held-out exact %")
        offset = steps[-1] if steps else offset
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("masked-token cross-entropy (25-step mean)")
    ax2.set_ylabel("held-out exact decodes (%)")
    ax2.set_ylim(-2, 102)
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=7, ncol=2,
              loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", type=Path, help="train_log.jsonl of each stage, in order")
    ap.add_argument("--labels", nargs="+", default=None, help="one label per stage")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.labels and len(args.labels) != len(args.logs):
        raise SystemExit(f"--labels needs one label per log ({len(args.logs)}), got {len(args.labels)}")
    plot_stages(args.logs, args.out, args.labels)


if __name__ == "__main__":
    main()
