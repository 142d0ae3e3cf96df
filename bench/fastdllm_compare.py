"""dllm against the official Fast-dLLM LLaDA loops on the same random checkpoint, interleaved.

    python bench/fastdllm_compare.py --fastdllm /path/to/Fast-dLLM/llada --out bench/results/fastdllm_compare

``--fastdllm`` is the ``llada`` folder of a Fast-dLLM checkout (github.com/NVlabs/Fast-dLLM), or the
checkout; its ``generate.py`` (``generate``, ``generate_with_prefix_cache``, ``generate_with_dual_cache``)
and ``model/modeling_llada.py`` are imported from there, never copied (``dllm.bench.fastdllm_side``,
which the GPU check's side by side shares). A random LLaDA is
written in the original layout and read by both sides (Fast-dLLM's model gets the same
safetensors by their original names). For each cache mode and policy (confidence threshold 0.9;
fixed steps, ``--tokens-per-step`` per step) the two run alternately, ``--reps`` times each
(A B A B ...), one thread, and the script reports median tokens/s, the median of the per-pair
ratios with its spread, NFE, and whether the tokens are identical (they must be: the model
math is the same on both sides). Each side's time inside its model's forwards is timed too
(``dllm.bench.forward_timer``), so a row shows how much of a ratio comes from the forwards and
how much from the loop around them. ``--variants default prepack`` times dllm both ways in the
same rotation (A A' B A A' B ...): as loaded by default, and with ``load(prepack=True)`` (its
linear weights reordered for oneDNN; ``dllm.models.prepack``). Writes JSON + markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from dllm import GenerationConfig, load
from dllm.bench.fastdllm_side import LOOPS as MODES
from dllm.bench.fastdllm_side import comparison, fastdllm_model, import_fastdllm, rotate
from dllm.bench.results_store import cpu_model
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

SHAPES = {
    "134m": dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000),
    "small": dict(d_model=384, n_layers=6, n_heads=6, mlp_hidden=1024, vocab_size=16000),
}


def load_fastdllm(folder: Path, checkpoint: Path):
    """Fast-dLLM's ``generate`` module and its LLaDA model holding the checkpoint's weights."""
    try:
        generate = import_fastdllm(folder)[0]
        config = json.loads((checkpoint / "config.json").read_text())
        model = fastdllm_model(folder, config, load_file(str(checkpoint / "model.safetensors")),
                               device=torch.device("cpu"), dtype=torch.float32)
    except ValueError as err:
        raise SystemExit(f"--fastdllm {folder}: {err}") from err
    return generate, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fastdllm", type=Path, required=True, help="the llada folder of a Fast-dLLM checkout")
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md are written)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="134m")
    ap.add_argument("--gen-length", type=int, default=256)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--prompt-length", type=int, default=64)
    ap.add_argument("--tokens-per-step", type=int, default=4, help="fixed-steps policy: tokens per step")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["none", "prefix", "dual"])
    ap.add_argument("--policies", nargs="+", choices=["threshold", "fixed"], default=["threshold", "fixed"],
                    help="confidence threshold (--threshold) and/or fixed steps (--tokens-per-step)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", nargs="+", choices=["default", "prepack"], default=["default"],
                    help="how dllm loads the checkpoint: default, and/or prepack=True (CPU oneDNN weights)")
    args = ap.parse_args()
    args.variants = list(dict.fromkeys(args.variants))
    if args.gen_length % (args.block_length * 1) or args.block_length % args.tokens_per_step:
        raise SystemExit("--gen-length must be a multiple of --block-length, and --block-length of --tokens-per-step")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_checkpoint(tmp, "llada", max_len=args.prompt_length + args.gen_length, **SHAPES[args.shape])
        lms = {variant: load(path, prepack=variant == "prepack") for variant in args.variants}
        lm = lms[args.variants[0]]
        generate, reference = load_fastdllm(args.fastdllm, Path(path))
        mask_id = lm.model.mask_token_id
        params = sum(p.numel() for p in lm.model.parameters())
        vocab = lm.model.config.vocab_size
        prompt = torch.randint(0, min(vocab, 250), (1, args.prompt_length)).tolist()[0]
        G, B = args.gen_length, args.block_length
        policies = {
            f"threshold {args.threshold}": (dict(policy="threshold", policy_args={"tau": args.threshold}, steps=G // B),
                                            dict(steps=G // B, threshold=args.threshold)),
            f"fixed {args.tokens_per_step}/step": (dict(policy="low_confidence", steps=G // args.tokens_per_step),
                                                   dict(steps=G // args.tokens_per_step)),
        }
        policies = {name: v for name, v in policies.items() if name.split()[0] in args.policies}
        rows = []
        for mode in args.modes:
            for name, (ours, theirs) in policies.items():
                config = GenerationConfig(gen_length=G, block_length=B, cache=mode, stop_at_eos=False, **ours)
                fn = getattr(generate, MODES[mode])
                x = torch.tensor([prompt])

                def dllm_runner(model):
                    def run():
                        out = decode(model, [prompt], config)
                        return out.answer[0], int(out.nfe[0])
                    return run

                def run_fastdllm():
                    with torch.no_grad():
                        out, nfe = fn(reference, x, gen_length=G, block_length=B, temperature=0.0,
                                      remasking="low_confidence", mask_id=mask_id, **theirs)
                    return out[0, len(prompt):], nfe

                runners = {variant: (lms[variant].model, dllm_runner(lms[variant].model)) for variant in args.variants}
                runners["fastdllm"] = (reference, run_fastdllm)
                seconds, forward_s, nfe, same = rotate(runners, args.reps)
                for variant in args.variants:
                    row = {"cache": mode, "policy": name, "dllm": variant,
                           **comparison(variant, G, seconds, forward_s, nfe, same[variant])}
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if not k.endswith("seconds")}), flush=True)
                write(args, rows, params)  # after every row: a long run leaves what it measured


def write(args, rows: list[dict], params: int) -> None:
    G, B = args.gen_length, args.block_length
    machine = f"{cpu_model()}, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f} at the end"
    setup = {"shape": args.shape, **SHAPES[args.shape], "params": params, "gen_length": G, "block_length": B,
             "prompt_length": args.prompt_length, "reps": args.reps, "machine": machine, "torch": torch.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=1) + "\n")
    md = [f"dllm vs Fast-dLLM (official LLaDA loops), random LLaDA {params / 1e6:.0f}M ({args.shape}), gen {G}, "
          f"block {B}, prompt {args.prompt_length}, {machine}, torch {torch.__version__}, {args.reps} interleaved "
          "repetitions; speedup = Fast-dLLM time / dllm time per pair (median [min, max]); in forwards = "
          "share of each side's time inside its model's forwards; forwards speedup = the same ratio over "
          "that time alone.", "",
          "| cache | policy | dllm loaded | NFE | dllm tok/s | Fast-dLLM tok/s | speedup | in forwards "
          "(dllm / Fast-dLLM) | forwards speedup | tokens identical |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['cache']} | {r['policy']} | {r['dllm']} | {r['nfe_dllm']} / {r['nfe_fastdllm']} | "
           f"{r['dllm_tokens_per_s']:.1f} | "
           f"{r['fastdllm_tokens_per_s']:.1f} | {r['speedup_median']:.2f}x [{r['speedup_min']:.2f}, "
           f"{r['speedup_max']:.2f}] | {r['dllm_in_forwards']:.0%} / {r['fastdllm_in_forwards']:.0%} | "
           f"{r['forward_speedup']:.2f}x | {'yes' if r['tokens_identical'] else 'NO'} |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
