"""Where the dual cache's reused K/V go stale, and which of them the decode needs fresh.

    python bench/kv_drift_probe.py dllm/assets/models/dllm-waitingline-llada [MORE ...] \
        --samples 8 --fresh-seed 2000000 --out bench/results/kv_drift_probe

A model given as ``DIR@REV`` is the checkpoint directory as git commit REV holds it (earlier
weights of a bundled model, e.g. ``dllm/assets/models/dllm-waitingline-llada@625a32c``).

Decodes fresh waiting-line samples (threshold 0.9, block 8, zero-shot) with the dual cache and,
at every step after a block start, recomputes the whole canvas uncached (the K/V the dual
cache would have after a refresh) and compares, per layer and per position class (prompt,
earlier answer, window, suffix):

* drift: ||K_cached - K_fresh|| / ||K_fresh|| (and the same for V), averaged over positions;
* mass: the attention the window's still-masked queries put on that class (fresh, heads mean);
* prompt -> changed: the attention mass the prompt's queries put on the window positions
  committed since the refresh (the tokens whose change the reused K/V never saw);
* effect: the window forward of the dual cache rerun with the K/V of one (class, layer) made
  fresh, all the rest stale as the dual cache has them: the share of the dual cache's error on
  the still-masked window positions it removes (error = KL(uncached || cached) of the next-token
  distributions; also argmax disagreement with the uncached decode).

The decode follows the dual cache's own trajectory: each step compares what the dual cache
reused with what a refresh would have given on the same canvas. Results: OUT.json, OUT.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from dllm import GenerationConfig, load
from dllm.bench.parallelbench_fresh import FRESH_TASKS, fresh_samples
from dllm.cache.base import register_cache
from dllm.cache.block import BlockCache
from dllm.cache.kv import KVBuffers
from dllm.data.prompts import build_messages, default_data_dir, load_task_configs
from dllm.models.layers import attend, rope_cos_sin

CLASSES = ("prompt", "answer", "window", "suffix")
STALE = ("prompt", "answer", "suffix")  # classes the dual cache reuses (the window is recomputed)
SHARES = (0.1, 0.25, 0.5)


def top_share(score, candidates, share: float):
    """(B, E) bool: the ceil(share * n) highest-scoring candidates of each row."""
    k = torch.ceil(candidates.sum(-1) * share).long()
    order = score.float().masked_fill(~candidates, float("-inf")).argsort(-1, descending=True)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1]).expand_as(order))
    return candidates & (rank < k[:, None])


class Tally:
    """Sums of per-step means, one per key, and how many steps each got."""

    def __init__(self) -> None:
        self.sum: dict[str, float] = {}
        self.n: dict[str, int] = {}

    def add(self, key: str, value: float, weight: int = 1) -> None:
        self.sum[key] = self.sum.get(key, 0.0) + value * weight
        self.n[key] = self.n.get(key, 0) + weight

    def mean(self, key: str) -> float:
        return self.sum.get(key, 0.0) / max(self.n.get(key, 0), 1)


def attention(q, k, valid):
    """(B, E, E) attention probabilities, heads' mean, of queries q (B, H, E, D) over keys k
    (B, H_kv, E, D) (grouped heads repeated), invalid keys masked."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    return scores.masked_fill(~valid[:, None, None, :], float("-inf")).softmax(-1).mean(1)


def fresh_forward(model, tokens, positions, visible):
    """The uncached forward, keeping each layer's queries, keys and values: (logits, [(q, k, v)])."""
    cfg = model.config
    cos, sin = rope_cos_sin(positions, cfg.rotary_dim, cfg.rope_theta)
    x, qkv = model.embed_tokens(tokens), []
    for layer in model.layers:
        h = layer.attn_norm(x)
        q = layer.attn.queries(h, cos, sin)
        k, v = layer.attn.keys_values(h, cos, sin)
        qkv.append((q, k, v))
        x = x + layer.attn.project(attend(q, k, v, visible).reshape(x.shape[0], x.shape[1], -1))
        x = x + layer.mlp(layer.mlp_norm(x))
    return model.lm_head(model.norm(x)), qkv


class Probe:
    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers
        self.t = Tally()
        self.steps = 0

    def measure(self, runner, kv: KVBuffers, tokens, bs: int, be: int) -> None:
        model, canvas = runner.model, runner.canvas
        E, P, shift = runner.live_end, canvas.prompt_width, int(runner.shift_logits)
        mask_id = model.mask_token_id
        rows = runner.active & (tokens[:, bs:be] == mask_id).any(-1)
        if not bool(rows.any()):
            return
        tokens, positions = tokens[:, :E], canvas.positions[:, :E]
        visible = runner.visibility(0, E, E)
        logits, qkv = fresh_forward(model, tokens, positions, visible)
        pos = torch.arange(E, device=tokens.device)
        valid = canvas.valid[:, :E]
        cls = {"prompt": valid & (pos < P), "answer": (pos >= P) & (pos < bs),
               "window": (pos >= bs) & (pos < be), "suffix": pos >= be}
        cls = {name: where.expand_as(valid) & valid for name, where in cls.items()}
        masked = tokens[:, bs:be] == mask_id  # (B, W): the window queries that decide
        changed = torch.zeros_like(valid)
        changed[:, bs:be] = ~masked  # committed since the block's refresh
        self.steps += 1
        self.shift = shift
        for i, (q, k, v) in enumerate(qkv):
            k_old, v_old = kv.layers[i][0][:, :, :E], kv.layers[i][1][:, :, :E]
            dk = (k_old - k).norm(dim=(1, 3)) / k.norm(dim=(1, 3)).clamp_min(1e-12)  # (B, E)
            dv = (v_old - v).norm(dim=(1, 3)) / v.norm(dim=(1, 3)).clamp_min(1e-12)
            attn = attention(q, k, valid)  # (B, E, E) heads' mean
            win_q = attn[:, bs - shift : be - shift]  # (B, W, E): the queries deciding the window
            for name, where in cls.items():
                sel = where & rows[:, None]
                if name != "window" and bool(sel.any()):
                    self.t.add(f"dk/{name}/{i}", float(dk[sel].mean()))
                    self.t.add(f"dv/{name}/{i}", float(dv[sel].mean()))
                m = (win_q * where[:, None, :].float()).sum(-1)  # (B, W)
                self.t.add(f"mass/{name}/{i}", float(m[masked & rows[:, None]].mean()))
            to_changed = (attn * changed[:, None, :].float()).sum(-1)  # (B, E)
            prompt_rows = cls["prompt"] & rows[:, None] & changed.any(-1, keepdim=True)
            if bool(prompt_rows.any()):
                self.t.add(f"p2c/mean/{i}", float(to_changed[prompt_rows].mean()))
                self.t.add(f"p2c/max/{i}", float(to_changed.masked_fill(~prompt_rows, 0).amax(-1)[rows].mean()))
        self._effects(runner, kv, tokens, bs, be, shift, logits, qkv, cls, masked & rows[:, None])

    def _effects(self, runner, kv, tokens, bs, be, shift, logits, qkv, cls, masked) -> None:
        """Rerun the dual window forward with the K/V of one (class, layer), or one class at every
        layer, made fresh; score each against the uncached logits on the masked window positions."""
        model, canvas = runner.model, runner.canvas
        q_lo, E = bs - shift, tokens.shape[1]
        ref = logits[:, bs - shift : be - shift].float().log_softmax(-1)

        def error(fresh: dict[int, torch.Tensor]) -> tuple[float, float]:
            layers = []
            for i, (k_buf, v_buf) in enumerate(kv.layers):
                k2, v2 = k_buf.clone(), v_buf.clone()
                if i in fresh:
                    where = fresh[i][:, None, :, None]
                    k2[:, :, :E] = torch.where(where, qkv[i][1], k2[:, :, :E])
                    v2[:, :, :E] = torch.where(where, qkv[i][2], v2[:, :, :E])
                layers.append((k2, v2))
            out = model(tokens[:, q_lo:be], canvas.positions[:, q_lo:be], runner.visibility(q_lo, be - q_lo, canvas.length),
                        KVBuffers(layers), q_lo)
            got = out[:, bs - q_lo - shift : be - q_lo - shift].float().log_softmax(-1)
            kl = F.kl_div(got, ref, log_target=True, reduction="none").sum(-1)  # (B, W)
            flips = got.argmax(-1) != ref.argmax(-1)
            return float(kl[masked].mean()), float(flips[masked].float().mean())

        base_kl, base_flip = error({})
        self.t.add("effect/dual/kl", base_kl)
        self.t.add("effect/dual/flip", base_flip)
        n = self.n_layers
        variants: dict[str, dict[int, torch.Tensor]] = {}
        for name in STALE:
            for i in range(n):
                variants[f"{name}/{i}"] = {i: cls[name]}
            variants[f"{name}/all"] = {i: cls[name] for i in range(n)}
            variants[f"{name}/deep"] = {i: cls[name] for i in range(n // 2, n)}
        variants["all/all"] = {i: cls["prompt"] | cls["answer"] | cls["suffix"] for i in range(n)}
        for key, fresh in variants.items():
            kl, flip = error(fresh)
            self.t.add(f"effect/{key}/removed", 1 - kl / base_kl if base_kl > 0 else 0.0)
            self.t.add(f"effect/{key}/flip", flip)
        # which reused tokens: refresh layers >= n // 2 of a share of them, chosen by a score
        context = cls["prompt"] | cls["answer"] | cls["suffix"]
        for score_name, score in self._scores(kv, qkv, cls, masked, bs, be).items():
            for share in SHARES:
                chosen = top_share(score, context, share)
                kl, _ = error({i: chosen for i in range(n // 2, n)})
                self.t.add(f"select/{score_name}/{share}", 1 - kl / base_kl if base_kl > 0 else 0.0)
                self.t.add(f"select/{score_name}/{share}/n", float(chosen.sum(-1).float().mean()))

    def _scores(self, kv, qkv, cls, masked, bs, be) -> dict[str, torch.Tensor]:
        """(B, E) per-position scores a refresh could choose reused tokens by: the last layer's
        K/V change (an oracle), the middle layer's attention mass on the window (the old
        default), on its committed positions, and how much the window's masked queries read
        the position at the last layer."""
        n, E = self.n_layers, qkv[0][1].shape[2]
        mid, last = n // 2, n - 1
        valid = cls["prompt"] | cls["answer"] | cls["window"] | cls["suffix"]
        k_old, v_old = kv.layers[last][0][:, :, :E], kv.layers[last][1][:, :, :E]
        drift = (k_old - qkv[last][1]).norm(dim=(1, 3)) + (v_old - qkv[last][2]).norm(dim=(1, 3))

        a_mid, a_last = attention(*qkv[mid][:2], valid), attention(*qkv[last][:2], valid)
        committed = (~masked).float()  # (B, W)
        on_window = a_mid[..., bs:be].sum(-1)
        on_changed = (a_mid[..., bs:be] * committed[:, None, :]).sum(-1)
        read = (a_last[:, bs - self.shift : be - self.shift] * masked[..., None].float()).sum(1)
        return {"drift (oracle)": drift, "mass on window": on_window, "mass on committed": on_changed,
                "read by window": read, "mass on committed x read": on_changed * read}

    def report(self) -> dict:
        n, t = self.n_layers, self.t
        out = {"steps": self.steps, "layers": n}
        for what in ("dk", "dv", "mass"):
            out[what] = {c: [round(t.mean(f"{what}/{c}/{i}"), 4) for i in range(n)]
                         for c in (CLASSES if what == "mass" else STALE)}
        out["prompt_to_changed"] = {s: [round(t.mean(f"p2c/{s}/{i}"), 4) for i in range(n)] for s in ("mean", "max")}
        out["dual_error"] = {"kl": round(t.mean("effect/dual/kl"), 4), "flip": round(t.mean("effect/dual/flip"), 4)}
        cols = [str(i) for i in range(n)] + ["deep", "all"]
        out["removed"] = {c: {k: round(t.mean(f"effect/{c}/{k}/removed"), 3) for k in cols} for c in STALE}
        out["flip"] = {c: {k: round(t.mean(f"effect/{c}/{k}/flip"), 3) for k in cols} for c in STALE}
        out["removed"]["all"] = {"all": round(t.mean("effect/all/all/removed"), 3)}
        names = sorted({k.split("/")[1] for k in t.sum if k.startswith("select/")})
        out["select"] = {name: {str(share): [round(t.mean(f"select/{name}/{share}"), 3),
                                             round(t.mean(f"select/{name}/{share}/n"), 1)] for share in SHARES}
                         for name in names}
        return out


def checkout(spec: str, into: Path) -> str:
    """``DIR@REV``: the directory's files at git commit REV, written under ``into``; else ``spec``."""
    if "@" not in spec:
        return spec
    folder, rev = spec.rsplit("@", 1)
    listing = subprocess.run(["git", "ls-tree", f"{rev}:{folder}"], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    names = [line.split("\t", 1)[1] for line in listing if line.split()[1] == "blob"]  # files, not folders
    target = into / f"{Path(folder).name}@{rev}"
    target.mkdir(parents=True)
    for name in names:
        blob = subprocess.run(["git", "show", f"{rev}:{folder}/{name}"], check=True, capture_output=True).stdout
        (target / name).write_bytes(blob)
    return str(target)


def probe_model(spec: str, tasks: list[str], samples: int, seed: int, data_dir: Path, scratch: Path) -> dict:
    path = checkout(spec, scratch)
    lm = load(path)
    model = lm.model
    probe = Probe(model.config.n_layers)
    register_cache("kv_probe")(lambda **options: ProbeCache(probe, **options))
    specs = load_task_configs(data_dir)
    config = GenerationConfig(gen_length=32, block_length=8, steps=32, policy="threshold",
                              policy_args={"tau": 0.9}, cache="kv_probe")
    with torch.no_grad():
        for task in tasks:
            batch = fresh_samples(data_dir, task, samples, seed)
            ids = [lm.encode(build_messages(specs[task], s, 0)) for s in batch]
            lm.generate_ids(ids, config)
    return {"model": Path(spec).name, **probe.report()}


class ProbeCache(BlockCache):
    """The dual cache, measuring its reused K/V against a refresh before every window forward."""

    def __init__(self, probe: Probe, **options) -> None:
        super().__init__("dual", **options)
        self.probe = probe

    def block_logits(self, runner, tokens, bs, be, step, rows=None, count=None):
        if rows is None and step > 0 and self.kv is not None:
            self.probe.measure(runner, self.kv, tokens, bs, be)
        return super().block_logits(runner, tokens, bs, be, step, rows, count)


def markdown(result: dict) -> str:
    n = result["layers"]
    head = "| | " + " | ".join(f"layer {i}" for i in range(n))
    lines = [f"### {result['model']} ({result['steps']} window steps)", "",
             head + " |", "|---|" + "---|" * n]
    for what, label in (("dk", "K drift"), ("dv", "V drift")):
        for c, vals in result[what].items():
            lines.append(f"| {label}, {c} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    for c, vals in result["mass"].items():
        lines.append(f"| window attention on {c} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    for s, vals in result["prompt_to_changed"].items():
        lines.append(f"| prompt attention on committed window ({s}) | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    cols = [str(i) for i in range(n)] + ["deep", "all"]
    lines += ["", f"Dual cache's error on masked window positions: KL {result['dual_error']['kl']:.3f}, "
              f"argmax differs from uncached at {100 * result['dual_error']['flip']:.1f}%. Share of that KL removed "
              f"by making one class's K/V fresh (argmax disagreement left):", "",
              "| fresh K/V of | " + " | ".join(f"layer {c}" if c.isdigit() else c for c in cols) + " |",
              "|---|" + "---|" * len(cols)]
    for c in STALE:
        lines.append(f"| {c} | " + " | ".join(f"{100 * result['removed'][c][k]:.0f}% ({100 * result['flip'][c][k]:.1f}%)"
                                               for k in cols) + " |")
    lines.append(f"| every reused position | " + " | " * (len(cols) - 1)
                 + f"{100 * result['removed']['all']['all']:.0f}% |")
    lines += ["", f"Refreshing layers {n // 2}-{n - 1} of a share of the reused tokens, chosen by a score: share of "
              "the dual cache's KL removed (tokens refreshed per row):", "",
              "| chosen by | " + " | ".join(f"{int(100 * s)}%" for s in SHARES) + " |", "|---|" + "---|" * len(SHARES)]
    for name, cells in result["select"].items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * r:.0f}% ({k:.0f})" for r, k in cells.values()) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tasks", nargs="+", default=[t for t in FRESH_TASKS if t.startswith("waiting_line/")])
    ap.add_argument("--samples", type=int, default=8, help="fresh samples per task")
    ap.add_argument("--fresh-seed", type=int, default=2_000_000)
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True, help="output stem (.json and .md)")
    args = ap.parse_args()
    data_dir = args.data or default_data_dir()
    with tempfile.TemporaryDirectory() as scratch:
        results = [probe_model(m, args.tasks, args.samples, args.fresh_seed, data_dir, Path(scratch))
                   for m in args.models]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"command": "python bench/kv_drift_probe.py " + " ".join(args.models) + f" --samples {args.samples} "
            f"--fresh-seed {args.fresh_seed}", "tasks": args.tasks}
    args.out.with_suffix(".json").write_text(json.dumps({**meta, "results": results}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(markdown(r) for r in results))
    print("\n".join(markdown(r) for r in results))


if __name__ == "__main__":
    main()
