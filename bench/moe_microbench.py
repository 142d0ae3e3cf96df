"""Microbenchmark of one MoE layer at decode-window token counts: the official code's per-expert
Python loop against ``MoEMLP``'s grouped path.

    python bench/moe_microbench.py --device cpu --out bench/results/moe_microbench
    python bench/moe_microbench.py --device cuda --out bench/results/moe_microbench_cuda

The loop is the approach of LLaDA2's ``moe_infer`` (written here, not copied): count tokens
per expert, sort the token copies by expert, read the counts on the host, run each expert that
received tokens as three separate linears, put the outputs back and take the weighted sum.
Both sides route with the same ``MoEMLP.route`` and add the same shared expert, so the times
differ only in how the experts run. ``grouped`` is ``MoEMLP.forward`` through the dispatch
(the Triton kernel on CUDA, the torch reference, itself a loop over experts, on CPU);
``grouped_torch`` forces the reference on CUDA too. Writes OUT.json and OUT.md.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from dllm.bench.results_store import cpu_model
from dllm.kernels import kernel_backend, kernels_set_to
from dllm.models.config import MoEConfig
from dllm.models.moe import MoEMLP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels_microbench import _time  # noqa: E402  (median seconds per call; CUDA events on GPU)

SHAPES = {
    # LLaDA2.0-mini's MoE layer: 256 experts of 512, top-8 of 4 groups out of 8, one shared expert
    "llada2-mini": (2048, MoEConfig(n_experts=256, top_k=8, expert_hidden=512, score="sigmoid", norm_topk=True,
                                    routed_scale=2.5, n_group=8, topk_group=4, expert_bias=True, shared_hidden=512)),
    # the same routing at a quarter of the width, for CPU runs
    "small": (512, MoEConfig(n_experts=64, top_k=8, expert_hidden=128, score="sigmoid", norm_topk=True,
                             routed_scale=2.5, n_group=8, topk_group=4, expert_bias=True, shared_hidden=128)),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@torch.no_grad()
def loop_forward(layer: MoEMLP, x: torch.Tensor) -> torch.Tensor:
    """The reference code's way: one host read of the per-expert counts, then a Python loop."""
    weights, ids = layer.route(x)
    k, E = ids.shape[1], layer.cfg.n_experts
    counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, ids.view(-1), torch.ones_like(ids.view(-1)))
    order = ids.view(-1).argsort()
    sorted_x = x[order // k]
    outs, start = [], 0
    for e, n in enumerate(counts.tolist()):
        if n:
            xe = sorted_x[start:start + n]
            h = F.silu(F.linear(xe, layer.gate_proj[e])) * F.linear(xe, layer.up_proj[e])
            outs.append(F.linear(h, layer.down_proj[e]))
            start += n
    cat = torch.cat(outs)
    back = torch.empty_like(cat)
    back[order] = cat
    y = (back.view(*ids.shape, -1).float() * weights[..., None]).sum(1).to(x.dtype)
    return y + layer.shared(x) if layer.shared is not None else y


@torch.no_grad()
def run(shape: str, tokens: list[int], device: torch.device, dtype: torch.dtype, iters: int, warmup: int) -> list[dict]:
    d, cfg = SHAPES[shape]
    torch.manual_seed(0)
    layer = MoEMLP(d, cfg)
    layer.expert_bias.normal_(0, 0.1)
    layer = layer.to(device=device, dtype=dtype)
    cuda = device.type == "cuda"
    rows = []
    for n in tokens:
        x = torch.randn(n, d, device=device, dtype=dtype)
        loop_s = _time(lambda: loop_forward(layer, x), iters, warmup, cuda)
        grouped_s = _time(lambda: layer(x), iters, warmup, cuda)
        diff = (layer(x).float() - loop_forward(layer, x).float()).abs().max().item()
        entry = {"shape": shape, "d_model": d, "tokens": n, "experts_used": int(layer.route(x)[1].unique().numel()),
                 "loop_ms": loop_s * 1e3, "grouped_ms": grouped_s * 1e3, "grouped_backend": kernel_backend(device),
                 "speedup": loop_s / grouped_s, "max_abs_diff": diff}
        if cuda:
            with kernels_set_to("torch"):
                entry["grouped_torch_ms"] = _time(lambda: layer(x), iters, warmup, cuda) * 1e3
        rows.append(entry)
        print(f"{shape} {n:4d} tokens ({entry['experts_used']} experts): loop {entry['loop_ms']:.3f} ms, grouped "
              f"[{entry['grouped_backend']}] {entry['grouped_ms']:.3f} ms (x{entry['speedup']:.2f})"
              + (f", grouped torch {entry['grouped_torch_ms']:.3f} ms" if cuda else "")
              + f", max |diff| {diff:.1e}", flush=True)
    return rows


def markdown(result: dict) -> str:
    cuda = result["device_type"] == "cuda"
    head = "| shape | tokens | experts used | loop (ms) | grouped (ms) | speedup |" + (" grouped, torch path (ms) |" if cuda else "") + " max abs diff |"
    lines = [f"# MoE layer: per-expert loop vs grouped path ({result['device']})", "",
             f"`{result['command']}`", "",
             f"dtype {result['dtype']}, torch {result['torch']}, median of {result['iters']} calls"
             + (" (CUDA events)" if cuda else f", {result['threads']} threads") + ". "
             "Both sides route alike and add the same shared expert; `loop` is the official code's per-expert "
             "loop (host read of the counts, three linears per expert), `grouped` is `MoEMLP` through the "
             f"kernel dispatch ({'one Triton launch per projection' if cuda else 'on CPU: the torch reference, a loop over the experts with tokens'}).",
             ] + (["", result["note"]] if result.get("note") else []) + ["", head, "|" + "---|" * (head.count("|") - 1)]
    for r in result["rows"]:
        lines.append(f"| {r['shape']} (d {r['d_model']}) | {r['tokens']} | {r['experts_used']} | {r['loop_ms']:.3f} | "
                     f"{r['grouped_ms']:.3f} | {r['speedup']:.2f}x |"
                     + (f" {r['grouped_torch_ms']:.3f} |" if cuda else "") + f" {r['max_abs_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=None,
                    help="default: small and llada2-mini")
    ap.add_argument("--tokens", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256, 512])
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: fp32 on CPU, bf16 on CUDA")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--note", default="", help="a sentence for the markdown (e.g. how loaded the machine was)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch sees no CUDA device")
    dtype_name = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    shapes = args.shapes or ["small", "llada2-mini"]
    rows = [r for s in shapes for r in run(s, args.tokens, device, DTYPES[dtype_name], args.iters, args.warmup)]
    name = torch.cuda.get_device_name() if device.type == "cuda" else cpu_model()
    result = {"device": name, "device_type": device.type, "threads": torch.get_num_threads(), "dtype": dtype_name,
              "torch": torch.__version__, "iters": args.iters, "note": args.note,
              "command": "python bench/moe_microbench.py " + shlex.join(sys.argv[1:]), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(f"wrote {args.out.with_suffix('.json')} and .md", flush=True)


if __name__ == "__main__":
    main()
