"""Train a Learn2PD confidence filter from the runtime's own extremely-greedy oracle traces.

1. Reference decode at one token per step (low_confidence) gives each prompt's final answer y.
2. Re-decode block by block; at every step record the block's confidence vector (all W
   positions, decoded ones included) and the labels "argmax == y"; then commit exactly the
   positions whose argmax is already right (or y's most confident position if none is).
3. Fit the 2-layer MLP with BCE (full batch, AdamW) and save it (safetensors + JSON).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from dllm.config import GenerationConfig
from dllm.engine import DecodeState, decode
from dllm.canvas import build_canvas
from dllm.samplers.learn2pd import ConfidenceFilter


@dataclass(kw_only=True, slots=True)
class FilterTraining:
    block_length: int = 32
    epochs: int = 3000
    lr: float = 3e-3
    tau: float = 0.96
    seed: int = 0


@torch.inference_mode()
def collect_traces(model, prompts: list[list[int]], gen_length: int, block_length: int):
    """(confidences (N, W), labels (N, W)) from oracle re-decodes of ``prompts``."""
    cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=gen_length, stop_at_eos=False)
    final = decode(model, prompts, cfg).answer  # (B, G) the one-token-per-step answer
    canvas = build_canvas(prompts, gen_length=gen_length, mask_id=model.mask_token_id,
                          pad_id=model.config.pad_token_id, device=model.device)
    state = DecodeState(model, canvas, cfg)
    confs, labels = [], []
    P = canvas.prompt_width
    for index in range(cfg.num_blocks):
        state.begin_block(index)
        target = final[:, state.bs - P : state.be - P]
        while not state.block_done():
            stats = state.statistics(state.block_logits())
            right = stats.token == target
            confs.append(stats.prob.float().cpu())
            labels.append(right.float().cpu())
            eligible = state.eligible()
            commit = right & eligible
            stuck = ~commit.any(-1) & eligible.any(-1)  # force progress: take y at the most confident mask
            best = stats.prob.masked_fill(~eligible, -1).argmax(-1)
            commit[stuck, best[stuck]] = True
            state.commit(commit, torch.where(right, stats.token, target))
            state.step += 1
    return torch.cat(confs), torch.cat(labels)


def train_filter(conf: torch.Tensor, labels: torch.Tensor, opts: FilterTraining) -> tuple[ConfidenceFilter, dict]:
    torch.manual_seed(opts.seed)
    n = conf.shape[0]
    perm = torch.randperm(n)
    split = max(1, int(0.9 * n))
    tr, va = perm[:split], perm[split:]
    model = ConfidenceFilter(conf.shape[1])
    opt = torch.optim.AdamW(model.parameters(), lr=opts.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(opts.epochs):
        opt.zero_grad()
        loss = loss_fn(model(conf[tr]), labels[tr])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        report = {"train_loss": float(loss), "samples": n}
        for name, idx in (("train", tr), ("val", va)):
            if len(idx) == 0:
                continue
            pred = torch.sigmoid(model(conf[idx])) > opts.tau
            y = labels[idx] > 0.5
            report[f"{name}_accuracy"] = float((pred == y).float().mean())
            report[f"{name}_false_positive_rate"] = float((pred & ~y).sum() / max(int((~y).sum()), 1))
            report[f"{name}_accepted_per_row"] = float(pred.float().sum(-1).mean())
    return model.requires_grad_(False), report


def prompts_from_corpus(tokenizer, data_dir: Path, tasks: list[str] | None, samples: int, seed: int):
    """Chat-templated prompts of freshly generated (never official test) task samples."""
    from dllm.train.corpus import TRAIN_TASKS, TaskCorpus

    corpus = TaskCorpus(data_dir, seed=seed + 20_000)
    rng = random.Random(seed)
    chosen = tasks or list(TRAIN_TASKS)
    out = {}
    for _ in range(samples):
        ex = corpus.sample(rng.choice(chosen))
        text = tokenizer.apply_chat_template(ex.messages, tokenize=False, add_generation_prompt=True)
        out.setdefault(ex.gen_length, []).append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out
