"""How well a waiting-line model binds the two halves of a person's name.

    python bench/binding_probe.py dllm/assets/models/dllm-waitingline-llada [MORE ...] --out bench/results/binding_probe.json

On freshly generated shuffle and insert-at-random samples, the true answer is given with every
last name masked (then, separately, every first name), and one forward's argmax at those
positions is scored against the answer. On shuffle a model that copies by list position gets
about a fifth of them (each score comes with what copying by position gets on the same samples);
one that looks the visible half up in the prompt gets them all. The LLaDA model's remaining
ParallelBench errors are this binding (right names, wrong pairs), so this is the capability its
training has to create. Needs the ParallelBench data folder (names and templates), as training
does.

With the last names hidden it also reports, per layer, the largest attention mass a head puts
from a hidden last name on the position before it (the visible first name) and on that
person's last name in the prompt: the look-up needs both, a previous-position head and then a
head that finds the person in the prompt.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dllm import load
from dllm.models import layers
from dllm.data.prompts import default_data_dir
from dllm.train.corpus import TaskCorpus
from dllm.train.train_small import encode, name_classes

TASKS = ("waiting_line/shuffle", "waiting_line/insert_random")


@torch.no_grad()
def probe(lm, data_dir: Path, samples: int, seed: int, fixed_pairs: float) -> dict[str, float]:
    """Accuracy at the masked name positions, per task and hidden half."""
    corpus = TaskCorpus(data_dir, seed=seed, tasks=TASKS, fixed_pairs=fixed_pairs)
    firsts, lasts = name_classes(lm.tokenizer, corpus)
    scores = {}
    for task in TASKS:
        for hidden_name, hidden in (("last names hidden", lasts), ("first names hidden", firsts)):
            right = total = by_position = people = 0
            part = 1 if hidden_name.startswith("last") else 0
            for _ in range(samples):
                example = corpus.sample(task)
                given, wanted = example.sample["answer"]["input"], json.loads(example.answer)
                # what copying by list position would get: the same half of the input's i-th person
                by_position += sum(i < len(given) and given[i].split(" ", 1)[part] == name.split(" ", 1)[part]
                                   for i, name in enumerate(wanted))
                people += len(wanted)
                prompt, answer = encode(lm.tokenizer, example)
                ids = torch.tensor([prompt + answer])
                hide = torch.isin(ids, hidden)
                hide[:, : len(prompt)] = False
                logits = lm.model(ids.masked_fill(hide, lm.model.mask_token_id), torch.arange(ids.shape[1])[None])
                right += int((logits.argmax(-1)[hide] == ids[hide]).sum())
                total += int(hide.sum())
            scores[f"{task.split('/')[1]}: {hidden_name}"] = right / total
            scores[f"{task.split('/')[1]}: {hidden_name}, copying by position"] = by_position / people
    return scores


@torch.no_grad()
def neighbour_attention(lm, data_dir: Path, samples: int, seed: int, fixed_pairs: float) -> dict[str, list[float]]:
    """Per layer, the max over heads of the mean attention from a hidden last name (shuffle,
    every last name hidden) to the position before it, and of the mean attention to that
    person's last name in the prompt next to what the same head puts on each other last name
    there (equal: the head reads the list's names without knowing whose name is hidden)."""
    corpus = TaskCorpus(data_dir, seed=seed, tasks=TASKS[:1], fixed_pairs=fixed_pairs)
    _, lasts = name_classes(lm.tokenizer, corpus)
    lasts_set = set(lasts.tolist())
    weights: list[torch.Tensor] = []
    attend = layers.attend

    def recording(q, k, v, visible):  # the probe's rows have no padding: plain softmax(q k^T)
        weights.append(((q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5).softmax(-1)[0])  # (H, T, S)
        return attend(q, k, v, visible)

    previous = source = others = None
    count = 0
    layers.attend = recording
    try:
        for _ in range(samples):
            prompt, answer = encode(lm.tokenizer, corpus.sample())
            ids = torch.tensor([prompt + answer])
            hide = torch.isin(ids, lasts)
            hide[:, : len(prompt)] = False
            weights.clear()
            lm.model(ids.masked_fill(hide, lm.model.mask_token_id), torch.arange(ids.shape[1])[None])
            tokens = ids[0].tolist()
            for at in hide[0].nonzero().flatten().tolist():
                in_prompt = [i for i in range(len(prompt)) if tokens[i] == tokens[at - 1]]
                if len(in_prompt) != 1:  # the first name must name one person of the prompt
                    continue
                prev = torch.stack([w[:, at, at - 1] for w in weights])  # (layers, heads)
                src = torch.stack([w[:, at, in_prompt[0] + 1] for w in weights])
                rest = [i for i in range(len(prompt)) if tokens[i] in lasts_set and i != in_prompt[0] + 1]
                oth = torch.stack([w[:, at, rest].mean(-1) for w in weights])
                previous = prev if previous is None else previous + prev
                source = src if source is None else source + src
                others = oth if others is None else others + oth
                count += 1
    finally:
        layers.attend = attend
    # the head that looks most at the person's last name, and what it gives each other one
    best = (source / count).argmax(-1, keepdim=True)
    return {"previous position": (previous / count).amax(-1).tolist(),
            "the person's last name in the prompt": (source / count).gather(-1, best)[:, 0].tolist(),
            "that head, on each other last name in the prompt": (others / count).gather(-1, best)[:, 0].tolist()}


def rounded(value):
    """The scores with 3 decimals, for printing."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return round(value, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="model directories (LLaDA layout, trained by train_small)")
    ap.add_argument("--data", type=Path, default=None, help="ParallelBench data dir (names, templates)")
    ap.add_argument("--samples", type=int, default=100, help="samples per task")
    ap.add_argument("--seed", type=int, default=777_777, help="generator seed of the probe's samples")
    ap.add_argument("--fixed-pairs", action="store_true",
                    help="draw the people from train_small's fixed first-to-last-name pairing (--fixed-pairs "
                         "there): what a model memorised, rather than what it looks up")
    ap.add_argument("--out", type=Path, default=None, help="write the scores here as JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data_dir = args.data or default_data_dir()
    results = {}
    for model in args.models:
        lm = load(model, device="cpu", dtype=torch.float32)
        fixed = 1.0 if args.fixed_pairs else 0.0
        results[model] = probe(lm, data_dir, args.samples, args.seed, fixed)
        results[model]["attention per layer (max over heads), shuffle, last names hidden"] = neighbour_attention(
            lm, data_dir, args.samples, args.seed, fixed)
        print(model, json.dumps(rounded(results[model])), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"samples_per_task": args.samples, "seed": args.seed,
                                        "fixed_pairs": args.fixed_pairs, "scores": results},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
