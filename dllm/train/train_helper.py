"""Train the small autoregressive helper (APD's verifier) on the bundled models' tokenizer.

    python -m dllm.train.train_helper --out runs/helper --tokenizer dllm/assets/models/dllm-waitingline-dream

APD (Israel et al. 2025) mixes a diffusion model's marginals with the joint probability of a
small causal LM of the same tokenizer. The bundled diffusion models need one of their size, so
this trains a transformers ``Qwen2ForCausalLM`` (the layout of Qwen2.5-0.5B, APD's helper for
Dream), written by transformers itself: ``dllm.load(..., helper=DIR)`` reads it through
``AutoModelForCausalLM`` like any hub causal LM. The data are the diffusion models' own
(``TaskCorpus``: the ParallelBench task generators with the chat template, official test inputs
never drawn); the objective is next-token cross-entropy on the answer and its end-of-text, the
prompt read but not predicted. AdamW with warm-up and cosine decay, as train_small. Held-out
greedy answers are scored at every evaluation; the last checkpoint is written to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from torch import Tensor

from dllm.bench.metrics import score
from dllm.data.prompts import default_data_dir
from dllm.models.tokenizer import load_tokenizer
from dllm.train.canvas_mix import CanvasMix
from dllm.train.corpus import TaskCorpus
from dllm.train.train_small import encode, require_data_dir, reuse_tokenizer


def helper_config(tokenizer, args):
    """A tiny Qwen2 config (tied embeddings) on ``tokenizer``'s ids."""
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=len(tokenizer), hidden_size=args.d_model, num_hidden_layers=args.n_layers,
                       num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                       intermediate_size=args.mlp_hidden, max_position_embeddings=512, rope_theta=10000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def causal_rows(tokenizer, corpus: TaskCorpus, batch_size: int, mix: CanvasMix, rng: random.Random
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded prompt + answer + end-of-text rows: (ids, attention mask, labels with the
    prompt and padding at -100, so only the answer and its end are predicted)."""
    _, shots = mix.draw(rng)
    rows = []
    for _ in range(batch_size):
        prompt, answer = encode(tokenizer, corpus.sample(shots=shots))
        answer = answer[: answer.index(tokenizer.eos_token_id) + 1]  # the answer and one end-of-text
        rows.append((prompt, answer))
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((batch_size, width), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch_size, width), dtype=torch.long)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)
    for r, (p, a) in enumerate(rows):
        seq = p + a
        ids[r, : len(seq)] = torch.tensor(seq)
        attention[r, : len(seq)] = 1
        labels[r, len(p) : len(seq)] = torch.tensor(a)
    return ids, attention, labels


@torch.no_grad()
def greedy_scores(model, tokenizer, heldout: list, specs: dict) -> dict:
    """Greedy answers of the held-out examples, scored by the task's metric (per task, mean)."""
    model.eval()
    scores: dict[str, list[float]] = {}
    for ex in heldout:
        prompt, _ = encode(tokenizer, ex)
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=specs[ex.task].max_tokens, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        answer = out[0, len(prompt):].tolist()
        answer = answer[: answer.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in answer else answer
        scores.setdefault(ex.task, []).append(score(specs[ex.task].metric, tokenizer.decode(answer), ex.sample))
    model.train()
    per_task = {k: sum(v) / len(v) for k, v in scores.items()}
    return {"per_task": per_task, "mean": sum(per_task.values()) / len(per_task)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True, help="a bundled model's directory: its tokenizer")
    ap.add_argument("--data", type=Path, default=None, help="ParallelBench data dir (templates, names)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--d-model", type=int, default=96)
    ap.add_argument("--n-layers", type=int, default=3)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=2)
    ap.add_argument("--mlp-hidden", type=int, default=256)
    ap.add_argument("--one-shot", type=float, default=0.3, metavar="RATE", help="share of one-shot batches")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--heldout-per-task", type=int, default=4)
    ap.add_argument("--init", type=Path, default=None, metavar="DIR",
                    help="continue from a helper this script wrote (its weights; a new schedule)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    from transformers import Qwen2ForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data_dir = args.data or default_data_dir()
    require_data_dir(data_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = reuse_tokenizer(args.tokenizer, args.out)
    corpus = TaskCorpus(data_dir, seed=args.seed)
    heldout_corpus = TaskCorpus(data_dir, seed=args.seed + 10_000)
    heldout = [heldout_corpus.sample(t) for t in corpus.tasks for _ in range(args.heldout_per_task)]
    mix, mix_rng = CanvasMix(one_shot_share=args.one_shot), random.Random(args.seed + 20_000)
    model = (Qwen2ForCausalLM.from_pretrained(args.init, dtype=torch.float32) if args.init
             else Qwen2ForCausalLM(helper_config(tokenizer, args)))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    log = (args.out / "train_log.jsonl").open("a")
    n_params = sum(p.numel() for p in model.parameters())
    log.write(json.dumps({"meta": {"args": {k: str(v) for k, v in vars(args).items()}, "params": n_params}}) + "\n")
    start = time.time()
    model.train()
    for step in range(1, args.steps + 1):
        ids, attention, labels = causal_rows(tokenizer, corpus, args.batch_size, mix, mix_rng)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        record = {"step": step, "loss": loss.item(), "lr": sched.get_last_lr()[0], "elapsed": time.time() - start}
        if step % args.eval_every == 0 or step == args.steps:
            record["eval"] = greedy_scores(model, tokenizer, heldout, corpus.specs)
            print(f"step {step} loss {record['loss']:.4f} heldout greedy mean {record['eval']['mean']:.3f}", flush=True)
            model.save_pretrained(args.out, safe_serialization=True)
        log.write(json.dumps(record) + "\n")
        log.flush()


if __name__ == "__main__":
    main()
