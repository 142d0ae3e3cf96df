"""Writes the ParallelBench run grids of every policy under every cache (bench/runs/policies_*.json).

    python bench/policy_grid.py          # rewrites the three grid files below

- ``policies_caches.json``: top-k 1/2/4/8 tokens per step, threshold 0.7-0.95, factor, EB,
  SchED on threshold 0.9, Learn2PD (+ EoTP), FreeDave, FreeDave++ and LoPA, each with no
  cache, the prefix cache, the dual cache and the adaptive cache (its defaults), 8-token blocks;
- ``policies_subblock.json``: the same policies with the dual cache over 4-token sub-blocks
  (block diffusion models decode sub-blocks natively), top-k 8 left out: a step cannot cross a
  4-token sub-block, and Learn2PD deciding over 4-position windows with its own filter
  (``{model}/learn2pd-block4``, ``dllm train-filter --block-length 4``);
- ``dream_rules_caches.json``: Dream's own rules (maskgit_plus, topk_margin, entropy) at 1 and 2
  tokens per step under each cache;
- ``policies_adaptive.json``: every policy under the adaptive cache alone, plus top-k 1 and
  threshold 0.9 without a cache and under the dual cache as references: the adaptive rows of a
  grid measured before they existed (``--out`` a folder of its own);
- ``policies_block_causal.json``: every policy without a cache and under the adaptive cache, for
  block-causal models (block diffusion, LLaDA2 MoE, D2F students): there every cache is exact
  (a block sees no later block) and the adaptive cache takes the dual cache's path, so prefix and
  dual rows would repeat its tokens;
- ``caches_speed.json``: top-k 1, threshold 0.9 and LoPA (2 branches) under each cache, a grid
  small enough to run in one sitting, so that its tokens/s compare across caches (the big grids
  are resumed across sittings at other machine loads).

The Learn2PD filter is ``{model}/learn2pd-block8``: ``dllm bench parallelbench`` puts the
``--model`` argument in place of ``{model}``, so one grid serves every model that ships its own
filter (``dllm train-filter --block-length 8``).
"""
from __future__ import annotations

import json
from pathlib import Path

BLOCK = 8
FILTER = "{model}/learn2pd-block{width}"
CACHES = {"none": {"cache": "none"}, "prefix": {"cache": "prefix"}, "dual": {"cache": "dual"},
          "adaptive": {"cache": "adaptive"}}
SUB_BLOCK_LENGTH = 4
SUB_BLOCK = {"dual+sub4": {"cache": "dual", "sub_block_length": SUB_BLOCK_LENGTH}}
SCHED = {
    "sched-paper": ("SchED (paper taus 7.5/2.5)", {"schedule": "exp", "tau_high": 7.5, "tau_low": 2.5, "k": 16.0}),
    "sched-linear": ("SchED linear (taus 20/15)", {"schedule": "linear", "tau_high": 20.0, "tau_low": 15.0}),
    "sched-exp": ("SchED exp (taus 20/15)", {"schedule": "exp", "tau_high": 20.0, "tau_low": 15.0}),
}


SPEED_POLICIES = ("topk1", "threshold0.9", "lopa_k2")
REFERENCES = ("topk1", "threshold0.9")  # policies_adaptive.json: their none and dual rows


def _run(name: str, line: str, tokens_per_step: int | None = None, **options) -> dict:
    run = {"name": name, "line": line, "options": {"block_length": BLOCK, **options}}
    if tokens_per_step is not None:
        run["tokens_per_step"] = tokens_per_step
    return run


def policies(filter_width: int = BLOCK) -> list[dict]:
    """Every policy once, without a cache (block 8); Learn2PD with the filter for ``filter_width``."""
    filter_dir = FILTER.replace("{width}", str(filter_width))
    runs = [_run(f"topk{k}", "top-k", k, policy="low_confidence") for k in (1, 2, 4, 8)]
    runs += [_run(f"threshold{t}", "threshold", policy="threshold", policy_args={"tau": t})
             for t in (0.7, 0.8, 0.9, 0.95)]
    runs.append(_run("factor1.0", "factor", policy="factor", policy_args={"factor": 1.0}))
    runs += [_run(f"eb{g}", "EB-sampler", policy="eb_sampler", policy_args={"gamma": g}) for g in (0.1, 1.0)]
    runs += [_run(f"threshold0.9_{name}", f"threshold 0.9 + {line}", policy="threshold",
                  policy_args={"tau": 0.9}, stopper="sched", stopper_args=args)
             for name, (line, args) in SCHED.items()]
    runs.append(_run("learn2pd", "Learn2PD", policy="learn2pd", policy_args={"filter": filter_dir}))
    runs.append(_run("learn2pd_eotp", "Learn2PD + EoTP", policy="learn2pd", policy_args={"filter": filter_dir},
                     stopper="eotp"))
    runs += [_run(f"freedave_K{k}", "FreeDave (top-k 1 base)", 1, policy="low_confidence",
                  strategy="freedave", strategy_args={"num_drafts": k}) for k in (2, 4)]
    runs.append(_run("freedave++_K4", "FreeDave++ (threshold 0.9 base)", policy="threshold",
                     policy_args={"tau": 0.9}, strategy="freedave", strategy_args={"num_drafts": 4}))
    runs += [_run(f"lopa_k{b}", "LoPA (threshold 0.9 base)", policy="threshold", policy_args={"tau": 0.9},
                  strategy="lopa", strategy_args={"branches": b}) for b in (2, 3)]
    return runs


def dream_rules() -> list[dict]:
    """Dream's reference rules at 1 and 2 tokens per step (block 8)."""
    return [_run(f"{rule}_k{k}", rule, k, policy=rule) for rule in ("maskgit_plus", "topk_margin", "entropy")
            for k in (1, 2)]


def with_caches(runs: list[dict], caches: dict[str, dict]) -> list[dict]:
    """Each run once per cache: name ``<run>+<cache>``, line ``<line> + <cache>``."""
    out = []
    for cache, options in caches.items():
        for run in runs:
            out.append({**run, "name": f"{run['name']}+{cache}", "line": f"{run['line']} + {cache}",
                        "options": {**run["options"], **options}})
    return out


def main() -> None:
    here = Path(__file__).parent / "runs"
    grids = {"policies_caches.json": with_caches(policies(), CACHES),
             "policies_subblock.json": with_caches([r for r in policies(SUB_BLOCK_LENGTH)
                                                    if r.get("tokens_per_step", 1) <= SUB_BLOCK_LENGTH], SUB_BLOCK),
             "dream_rules_caches.json": with_caches(dream_rules(), CACHES),
             "policies_adaptive.json": with_caches([r for r in policies() if r["name"] in REFERENCES],
                                                   {k: CACHES[k] for k in ("none", "dual")})
                                       + with_caches(policies(), {"adaptive": CACHES["adaptive"]}),
             "policies_block_causal.json": with_caches(policies(), {k: CACHES[k] for k in ("none", "adaptive")}),
             "caches_speed.json": with_caches([r for r in policies() if r["name"] in SPEED_POLICIES], CACHES)}
    for name, runs in grids.items():
        (here / name).write_text(json.dumps(runs, indent=1) + "\n")
        print(f"{here / name}: {len(runs)} runs")


if __name__ == "__main__":
    main()
