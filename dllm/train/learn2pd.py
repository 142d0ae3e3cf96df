"""Train a Learn2PD confidence filter from the runtime's own extremely-greedy oracle traces.

Following ``llada/generate_training_data.py`` and ``train.ipynb`` of the Learn2PD release
(policies.md §3):
1. Reference decode at one token per step (low_confidence, no cache) gives each prompt's
   final answer y.
2. Re-decode block by block ("extremely greedy parallel"): at every step record the block's
   confidence vector (all W positions, decoded ones included) and the labels argmax == y; then
   commit exactly the masked positions whose argmax is already right. When none is, y is
   force-written at the most confident mask, so every step makes progress.
3. Fit the 2-layer MLP with BCEWithLogits, full batch, AdamW (lr 3e-3), and save it
   (safetensors + JSON) with its train / validation accuracy and false-positive rate at tau.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from dllm.runner.canvas import build_canvas
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import DecodeState, decode
from dllm.samplers.rules.learn2pd import ConfidenceFilter


@dataclass(kw_only=True, slots=True)
class FilterTraining:
    block_length: int = 32
    epochs: int = 3000
    lr: float = 3e-3
    tau: float = 0.96
    val_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_length <= 0 or self.epochs <= 0 or self.lr <= 0:
            raise ValueError("block_length, epochs and lr must be positive")
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")


def collect_traces(model, prompts: list[list[int]], gen_length: int, block_length: int) -> tuple[Tensor, Tensor]:
    """(confidences (N, W) float, labels (N, W) float) from oracle re-decodes of ``prompts``."""
    conf, labels, _, _ = oracle_decode(model, prompts, gen_length, block_length)
    return conf, labels


@torch.inference_mode()
def oracle_decode(model, prompts: list[list[int]], gen_length: int, block_length: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Traces plus the reference answer y (B, G) and the re-decoded answer (equal by construction)."""
    cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=gen_length, stop_at_eos=False)
    final = decode(model, prompts, cfg).answer  # (B, G): the one-token-per-step answer y
    canvas = build_canvas(prompts, gen_length=gen_length, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device=model.device)
    state = DecodeState(model, canvas, cfg)
    P = canvas.prompt_width
    confs, labels = [], []
    for index in range(cfg.num_blocks):
        state.begin_block(index)
        target = final[:, state.bs - P : state.be - P]  # (B, W)
        while not state.block_done():
            eligible = state.eligible()
            stats = state.statistics(state.block_logits())
            right = stats.token == target  # (B, W), decoded positions included
            live = eligible.any(-1)  # rows whose block is finished add no samples
            confs.append(stats.prob[live].float().cpu())
            labels.append(right[live].float().cpu())
            commit = right & eligible
            stuck = ~commit.any(-1) & live  # no correct prediction: force y at the best mask
            best = stats.prob.masked_fill(~eligible, -1.0).argmax(-1)  # (B,)
            commit |= stuck[:, None] & (torch.arange(commit.shape[1], device=best.device) == best[:, None])
            state.commit(commit, target)
            state.step += 1
    return torch.cat(confs), torch.cat(labels), final, canvas.tokens[:, P:]


def train_filter(conf: Tensor, labels: Tensor, opts: FilterTraining) -> tuple[ConfidenceFilter, dict]:
    """Fit a filter on (N, W) traces; returns it and a report (accuracy, false-positive rate)."""
    gen = torch.Generator().manual_seed(opts.seed)
    torch.manual_seed(opts.seed)
    n = conf.shape[0]
    perm = torch.randperm(n, generator=gen)
    n_val = int(opts.val_fraction * n) if n > 1 else 0
    splits = {"train": perm[n_val:], "val": perm[:n_val]}
    model = ConfidenceFilter(conf.shape[1])
    opt = torch.optim.AdamW(model.parameters(), lr=opts.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    x, y = conf[splits["train"]], labels[splits["train"]]
    for _ in range(opts.epochs):  # full batch, as the reference notebook
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    model.eval().requires_grad_(False)
    report: dict = {"samples": n, "train_loss": float(loss.detach()), "tau": opts.tau}
    for name, idx in splits.items():
        if len(idx):
            report.update(_evaluate(model, conf[idx], labels[idx], opts.tau, name))
    return model, report


def _evaluate(model: ConfidenceFilter, conf: Tensor, labels: Tensor, tau: float, name: str) -> dict:
    pred = torch.sigmoid(model(conf)) > tau
    truth = labels > 0.5
    negatives = int((~truth).sum())
    return {
        f"{name}_accuracy": float((pred == truth).float().mean()),
        f"{name}_false_positive_rate": float((pred & ~truth).sum()) / max(negatives, 1),
        f"{name}_accepted_per_step": float(pred.float().sum(-1).mean()),
    }


def prompts_from_corpus(encode: Callable[[list[dict]], list[int]], data_dir: Path, tasks: list[str] | None,
                        samples: int, seed: int) -> dict[int, list[list[int]]]:
    """{gen_length: [prompt ids]} of freshly generated task samples (never official test inputs:
    TaskCorpus redraws any that equal one), encoded with the model's chat template."""
    from dllm.train.corpus import TRAIN_TASKS, TaskCorpus

    if not (data_dir / "first_last_names.yaml").is_file():
        raise FileNotFoundError(f"ParallelBench data not found at {data_dir}; pass --data DIR "
                                "or set DLLM_PARALLELBENCH_DIR")
    chosen = list(tasks or TRAIN_TASKS)
    unknown = sorted(set(chosen) - set(TRAIN_TASKS))
    if unknown:
        raise ValueError(f"unknown training task(s) {unknown}; known: {list(TRAIN_TASKS)}")
    corpus = TaskCorpus(data_dir, seed=seed + 20_000)  # a stream apart from the model's training
    rng = random.Random(seed)
    out: dict[int, list[list[int]]] = {}
    for _ in range(samples):
        example = corpus.sample(rng.choice(chosen))
        out.setdefault(example.gen_length, []).append(encode(example.messages))
    return out
