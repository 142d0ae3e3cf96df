"""dllm against the official Fast-dLLM LLaDA loops on the same random checkpoint, interleaved.

    python bench/fastdllm_compare.py --fastdllm /path/to/Fast-dLLM/llada --out bench/results/fastdllm_compare

``--fastdllm`` is the ``llada`` folder of a Fast-dLLM checkout (github.com/NVlabs/Fast-dLLM);
its ``generate.py`` (``generate``, ``generate_with_prefix_cache``, ``generate_with_dual_cache``)
and ``model/modeling_llada.py`` are imported from there, never copied. A random LLaDA is
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
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file

from dllm import GenerationConfig, load
from dllm.bench.forward_timer import ForwardTimer
from dllm.bench.results_store import cpu_model
from dllm.engine.decoding import decode
from dllm.models.tiny import write_tiny_checkpoint

SHAPES = {
    "134m": dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, vocab_size=32000),
    "small": dict(d_model=384, n_layers=6, n_heads=6, mlp_hidden=1024, vocab_size=16000),
}
MODES = {"none": "generate", "prefix": "generate_with_prefix_cache", "dual": "generate_with_dual_cache"}


def load_fastdllm(folder: Path, checkpoint: Path):
    """Fast-dLLM's ``generate`` module and its LLaDA model holding the checkpoint's weights."""
    if not (folder / "generate.py").is_file() or not (folder / "model" / "modeling_llada.py").is_file():
        raise SystemExit(f"--fastdllm {folder}: expected the llada folder of a Fast-dLLM checkout "
                         "(generate.py and model/modeling_llada.py)")
    sys.path.insert(0, str(folder))
    generate = importlib.import_module("generate")
    modeling = importlib.import_module("model.modeling_llada")
    configuration = importlib.import_module("model.configuration_llada")
    # LLaDA-8B's config.json sets rope=true (the tiny writer leaves it out: dllm always rotates)
    config = configuration.LLaDAConfig(**{**json.loads((checkpoint / "config.json").read_text()), "rope": True})
    config.use_cache = False  # transformers 5 configs no longer default it; the loops pass use_cache
    model = modeling.LLaDAModelLM(config, init_params=False)
    missing, unexpected = model.load_state_dict(load_file(str(checkpoint / "model.safetensors")), strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise SystemExit(f"Fast-dLLM model does not take the checkpoint: missing {missing}, unexpected {unexpected}")
    return generate, model.float().eval()


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


def rotate(runners: dict[str, tuple[torch.nn.Module, Callable]], reps: int):
    """Run every side once (warm-up), then ``reps`` rotations in order (each dllm variant, then
    ``"fastdllm"``), timing each run and its model's forwards. Returns per side the run times, the
    forward times and the NFE, and per dllm variant whether its tokens always equalled Fast-dLLM's."""
    for _, runner in runners.values():
        runner()
    seconds = {side: [] for side in runners}
    forward_s = {side: [] for side in runners}
    tokens, nfe = {}, {}
    variants = [side for side in runners if side != "fastdllm"]
    same = dict.fromkeys(variants, True)
    for _ in range(reps):
        for side, (model, runner) in runners.items():
            with ForwardTimer(model) as timer:
                start = time.perf_counter()
                tokens[side], nfe[side] = runner()
                seconds[side].append(time.perf_counter() - start)
            forward_s[side].append(sum(r.seconds for r in timer.records()))
        for variant in variants:
            same[variant] &= torch.equal(tokens[variant], tokens["fastdllm"])
    return seconds, forward_s, nfe, same


def comparison(variant: str, gen_length: int, seconds: dict, forward_s: dict, nfe: dict, same: bool) -> dict:
    """One dllm variant against Fast-dLLM: tokens/s, per-pair speedups, forward shares."""
    ours_s, ours_f = seconds[variant], forward_s[variant]
    theirs_s, theirs_f = seconds["fastdllm"], forward_s["fastdllm"]
    ratios = [b / a for a, b in zip(ours_s, theirs_s)]
    return {"nfe_dllm": nfe[variant], "nfe_fastdllm": nfe["fastdllm"], "tokens_identical": bool(same),
            "dllm_tokens_per_s": gen_length / statistics.median(ours_s),
            "fastdllm_tokens_per_s": gen_length / statistics.median(theirs_s),
            "speedup_median": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios),
            "dllm_in_forwards": statistics.median(f / t for f, t in zip(ours_f, ours_s)),
            "fastdllm_in_forwards": statistics.median(f / t for f, t in zip(theirs_f, theirs_s)),
            "forward_speedup": statistics.median(b / a for a, b in zip(ours_f, theirs_f)),
            "dllm_seconds": ours_s, "fastdllm_seconds": theirs_s,
            "dllm_forward_seconds": ours_f, "fastdllm_forward_seconds": theirs_f}


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
