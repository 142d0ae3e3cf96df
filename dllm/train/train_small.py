"""Train a small LLaDA-layout masked-diffusion model on the ParallelBench task families.

    python -m dllm.train.train_small --out runs/small --steps 3000 [--tokenizer DIR] [--data DIR]

Objective (LLaDA SFT): t ~ U(0, 1), each answer token (answer + end-of-text padding up to the
task's gen_length) is masked i.i.d. with p = (1 - 1e-3) t + 1e-3; plain cross-entropy over the
masked positions (the 1/t weighting trained far slower at this scale). Prompts are never
masked. ``--family dream`` adds Dream's logit shift; ``--family fast_dllm_v2`` trains a
block-causal model with block-diffusion masking (dllm/train/objectives.py); ``--family
llada2_moe`` the same objective on LLaDA2's layout (blocks of 32, MoE layers after the first,
top-k routing kept balanced by LLaDA2's selection-only ``expert_bias``, updated after each
step from the experts' loads, as in auxiliary-loss-free balancing). ``--objective d2f`` trains
any of them as a D2F student instead (every answer block noised, later blocks more; block-causal
with the prompt as one block; loss weighted by 1 / rate), for the pipelined decode. Seeded and
reproducible; evaluates on a held-out split of freshly generated samples and writes a loadable
checkpoint directory at every evaluation, and the best one so far by held-out mean to ``best/``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from tokenizers import AddedToken
from tqdm import tqdm

from dllm.bench.metrics import score
from dllm.bench.parallelbench_cli import PROMPT_SHOTS_KEY
from dllm.engine.config import GenerationConfig
from dllm.data.bpe import save_tokenizer_dir, train_bpe
from dllm.data.prompts import build_messages, default_data_dir
from dllm.engine.decoding import decode
from dllm.models.loading import load_model
from dllm.models.registry import family_for
from dllm.models.moe import MoEMLP
from dllm.models.tiny import CHAT_TEMPLATES, SPECIAL_ROLES
from dllm.models.tiny_formats import diffusion_gemma_config, llada2_config
from dllm.models.tokenizer import load_tokenizer
from dllm.models.transformer import DiffusionTransformer
from dllm.models.visibility import KeyVisibility
from dllm.models.config import ATTENTION_KEY, BLOCK_ORIGIN_KEY, BLOCK_SIZE_KEY, block_causal_override
from dllm.models.visibility import block_causal_spans
from dllm.train.canvas_mix import CanvasMix
from dllm.train.certainty_forcing import certainty_forcing_loss, certainty_forcing_masks
from dllm.train.corpus import TRAIN_TASKS, TaskCorpus
from dllm.train.init_from import init_from_checkpoint
from dllm.train.objectives import block_diffusion_copies, block_diffusion_masks, d2f_loss, d2f_masks, llada_masks, name_part_masks
from dllm.train.save import save_checkpoint
from dllm.train.uniform_state import draw_canvases, uniform_state_loss

# Special tokens per layout, in vocabulary order (this order fixes the shipped tokenizer's ids);
# their roles and chat templates are dllm.models.tiny's.
SPECIALS = {
    "llada": ["<|endoftext|>", "<|mdm_mask|>", "<|startoftext|>", "<|start_header_id|>",
              "<|end_header_id|>", "<|eot_id|>"],
    "dream": ["<|endoftext|>", "<|mask|>", "<|beginoftext|>", "<|im_start|>", "<|im_end|>"],
}
# v2 is Qwen2.5's; llada2_moe reuses the LLaDA layout (the bundled models' tokenizer)
TOKENIZER_LAYOUT = {"llada": "llada", "dream": "dream", "fast_dllm_v2": "dream", "llada2_moe": "llada",
                    "diffusion_gemma": "llada"}


def template_fragments(corpus: TaskCorpus) -> list[str]:
    """The fixed text between placeholders of every training task's prompt template (and its
    whitespace-trimmed forms, since chat templates trim messages): each becomes one token, so
    the long boilerplate costs a few positions instead of ~60."""
    import re

    pieces = set()
    for task in TRAIN_TASKS:
        text = corpus.specs[task].prompt.replace("\\n", "\n")
        for frag in re.split(r"\{[a-z_]+\}", text):
            pieces |= {frag, frag.strip(), frag.lstrip(), frag.rstrip()}
    # longest first, ties by text: a set's order follows the per-process string hash seed, and
    # the added-token ids must not
    return sorted((p for p in pieces if len(p) > 1), key=lambda p: (-len(p), p))


def name_pieces(corpus: TaskCorpus) -> tuple[list[str], list[str]]:
    """Every first name and every " Last" name of the corpus, sorted."""
    return (sorted({n.split(" ")[0] for n in corpus.names}),
            sorted({" " + n.split(" ", 1)[1] for n in corpus.names}))


def name_tokens(corpus: TaskCorpus) -> list[AddedToken]:
    """One token per first name and one per " Last" name, so every list item is the same number
    of tokens and item i of the answer sits at a fixed offset from item i of the prompt: with
    names split into a varying number of BPE pieces three models never learned to copy."""
    firsts, lasts = name_pieces(corpus)
    return ([AddedToken(f, single_word=True, normalized=False) for f in firsts]
            + [AddedToken(l, normalized=False) for l in lasts])


def build_tokenizer(corpus: TaskCorpus, out: Path, vocab_size: int, family: str = "llada"):
    """Byte-level BPE over generated prompts and answers plus every name, with each template
    fragment and each first / last name added as a whole token."""
    texts = []
    for task in TRAIN_TASKS:
        for _ in range(300):
            ex = corpus.sample(task)
            texts += [m["content"] for m in ex.messages] + [ex.answer]
    texts += [f'["{n}"]' for n in corpus.names] * 3 + [f'"{n}"' for n in corpus.names] * 3
    tok = train_bpe(texts, vocab_size=vocab_size, special_tokens=SPECIALS[family])
    tok.add_tokens([AddedToken(f, normalized=False) for f in template_fragments(corpus)])
    tok.add_tokens(name_tokens(corpus))
    save_tokenizer_dir(tok, out, special=SPECIAL_ROLES[family], chat_template=CHAT_TEMPLATES[family])
    return load_tokenizer(out)


def reuse_tokenizer(source: Path, out: Path):
    """Copy a checkpoint's tokenizer into ``out`` unchanged, so a rerun trains on the same ids
    (a rebuilt BPE can give some added tokens other ids, and the weights would differ)."""
    tokenizer = load_tokenizer(source)
    missing = [role for role in ("mask_token", "eos_token", "pad_token") if getattr(tokenizer, role) is None]
    if missing:
        raise SystemExit(f"--tokenizer {source}: its tokenizer_config.json names no {', '.join(missing)}; "
                         "use a tokenizer written by train_small (e.g. the shipped model's directory)")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (source / name).resolve() != (out / name).resolve():
            shutil.copy(source / name, out / name)
    return load_tokenizer(out)


def require_data_dir(data_dir: Path) -> None:
    """The corpus needs ParallelBench's names, prompt templates and test lists (to exclude)."""
    if not (data_dir / "first_last_names.yaml").is_file():
        raise SystemExit(f"no ParallelBench data at {data_dir}: training reads its names, prompt "
                         "templates and official test lists (never trained on). Pass --data DIR or "
                         "set DLLM_PARALLELBENCH_DIR to the folder with first_last_names.yaml")


def model_config(tokenizer, args) -> dict:
    """config.json in the original layout of the chosen family (Dream: Qwen2 names, logit shift)."""
    vocab = len(tokenizer)
    ids = {"mask_token_id": tokenizer.mask_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    if args.family == "diffusion_gemma":
        return gemma_config(tokenizer, args)
    if args.family == "llada2_moe":
        raw = llada2_config({"mask_token": ids["mask_token_id"], "eos_token": ids["eos_token_id"],
                             "pad_token": ids["pad_token_id"]},
                            d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                            n_kv_heads=args.n_kv_heads or args.n_heads, mlp_hidden=args.mlp_hidden,
                            vocab=vocab, max_len=512, n_experts=args.n_experts, top_k=args.top_k,
                            expert_hidden=args.expert_hidden)
        # trained with blocks (LLaDA2's 32) counted from the answer start (block_diffusion_masks)
        # RoPE over whole heads (partial_rotary_factor 1): the rotation the LLaDA-layout model's
        # attention was trained with, so --init-weights carries its attention over
        raw.update(rope_theta=10000.0, partial_rotary_factor=args.partial_rotary,
                   rotary_dim=int(args.d_model // args.n_heads * args.partial_rotary),
                   n_group=args.n_group, topk_group=args.topk_group,
                   bos_token_id=tokenizer.bos_token_id, **{BLOCK_ORIGIN_KEY: "answer"})
        raw.pop("auto_map")  # no remote code ships with it
        return raw
    if args.family in ("dream", "fast_dllm_v2"):
        qwen2 = {
            "model_type": "Dream", "architectures": ["DreamModel"],
            "hidden_size": args.d_model, "num_hidden_layers": args.n_layers,
            "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads or args.n_heads,
            "intermediate_size": args.mlp_hidden, "hidden_act": "silu", "vocab_size": vocab,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
            "tie_word_embeddings": False, "bos_token_id": tokenizer.bos_token_id, **ids,
        }
        if args.family == "fast_dllm_v2":
            # trained with blocks counted from the answer start (block_diffusion_masks)
            qwen2.update(model_type="Fast_dLLM_Qwen", architectures=["Fast_dLLM_QwenForCausalLM"],
                         bd_size=args.bd_size, **{BLOCK_ORIGIN_KEY: "answer"})
        return qwen2
    return {
        "model_type": "llada", "architectures": ["LLaDAModelLM"],
        "d_model": args.d_model, "n_layers": args.n_layers, "n_heads": args.n_heads,
        "n_kv_heads": args.n_heads, "mlp_hidden_size": args.mlp_hidden, "vocab_size": vocab,
        "embedding_size": vocab, "rope_theta": 10000.0, "rope_full_precision": True,
        "rms_norm_eps": 1e-5, "max_sequence_length": 512, "weight_tying": False,
        "include_bias": False, "include_qkv_bias": False, "block_type": "llama",
        "activation_type": "silu", "layer_norm_type": "rms", **ids,
    }


def gemma_config(tokenizer, args) -> dict:
    """DiffusionGemma's config.json (transformers' layout, ``tiny_formats.diffusion_gemma_config``)
    at these widths: sliding layers then a full-attention last layer of the same head size and
    K/V heads, a sliding window (``--sliding-window``) covering prompt and answer, canvases of
    ``--bd-size``. The tokenizer has no image token: ``image_token_id`` is the first id past the
    vocabulary, which no prompt holds (transformers' ``generate`` compares prompts with it)."""
    ids = {"eos_token": tokenizer.eos_token_id, "pad_token": tokenizer.pad_token_id,
           "bos_token": tokenizer.bos_token_id}
    kv = args.n_kv_heads or args.n_heads
    raw = diffusion_gemma_config(ids, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                                 n_kv_heads=kv, mlp_hidden=args.mlp_hidden, vocab=len(tokenizer), max_len=512,
                                 n_experts=args.n_experts, top_k=args.top_k, expert_hidden=args.expert_hidden,
                                 canvas_length=args.bd_size, image_id=len(tokenizer))
    raw["text_config"].update(sliding_window=args.sliding_window, per_layer_config={
        str(args.n_layers - 1): {"head_dim": args.d_model // args.n_heads, "num_key_value_heads": kv}})
    return raw


def build_fresh(raw: dict, d_model: int):
    """A new model of config.json ``raw``: 2-D weights normal (std 0.02, embeddings 1/sqrt(d));
    DiffusionGemma's LM head tied to its embeddings, as its checkpoint stores it."""
    family = family_for(raw["model_type"], raw.get("architectures"))
    cfg = family.parse_config(raw)
    model = family.build_model(cfg) if family.build_model else DiffusionTransformer(block_causal_override(raw, cfg))
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02 if name != "embed.weight" else 1.0 / math.sqrt(d_model))
    if getattr(model, "uniform_state", False):
        model.lm_head.weight = model.embed.weight
    return model


def encode(tokenizer, ex, canvas: int | None = None, multiple: int = 1) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids padded with end-of-text to the example's gen_length, or to
    ``canvas`` if given: at least the answer plus one end-of-text, as LLaDA's SFT pads, rounded
    up to a ``multiple`` (a block-diffusion model's block size))."""
    text = tokenizer.apply_chat_template(ex.messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    answer = tokenizer(ex.answer, add_special_tokens=False)["input_ids"]
    gen_length = ex.gen_length if canvas is None else -(-max(canvas, len(answer) + 1) // multiple) * multiple
    if len(answer) >= gen_length:
        raise ValueError(f"answer of {len(answer)} tokens does not fit gen_length {gen_length}")
    return prompt, answer + [tokenizer.eos_token_id] * (gen_length - len(answer))


def draw_rows(tokenizer, corpus: TaskCorpus, batch_size: int, mix: CanvasMix | None, rng: random.Random | None,
              multiple: int = 1):
    """A batch's encoded (prompt, answer) rows: one canvas length and prompt format per batch."""
    canvas, shots = mix.draw(rng) if mix is not None else (None, 0)
    return [encode(tokenizer, corpus.sample(shots=shots), canvas, multiple) for _ in range(batch_size)]


def name_classes(tokenizer, corpus: TaskCorpus) -> list[Tensor]:
    """Token ids of every first name and of every " Last" name (one token each, name_tokens)."""
    classes = []
    for names in name_pieces(corpus):
        ids = tokenizer.convert_tokens_to_ids(names)
        missing = [n for n, i in zip(names, ids) if i is None or i == tokenizer.unk_token_id]
        if missing:
            raise SystemExit(f"--name-part-masking needs one token per name; the tokenizer lacks {missing[:3]}...")
        classes.append(torch.tensor(ids))
    return classes


NAME_PARTS = {"both": (0, 1), "first": (0,), "last": (1,)}  # indices into name_classes


def name_part_option(tokenizer, corpus: TaskCorpus, rate: float, which: str) -> tuple[list[Tensor], float] | None:
    """make_batch's ``name_parts`` for ``--name-part-masking RATE --name-part-classes WHICH``:
    the classes a row may mask (every first name, every last name, or one of the two drawn per
    row), or None at rate 0."""
    if not rate:
        return None
    classes = name_classes(tokenizer, corpus)
    return [classes[i] for i in NAME_PARTS[which]], rate


def make_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, mask_id: int,
               name_parts: tuple[list[Tensor], float] | None = None, mix: CanvasMix | None = None,
               mix_rng: random.Random | None = None):
    """Left-padded (prompt + answer) rows, with answer tokens masked at a per-row rate t;
    ``name_parts`` = (classes, rate) adds ``name_part_masks``; ``mix`` draws the batch's canvas
    length and prompt format from ``mix_rng``."""
    rows = draw_rows(tokenizer, corpus, batch_size, mix, mix_rng)
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((batch_size, width), tokenizer.eos_token_id, dtype=torch.long)
    valid = torch.zeros((batch_size, width), dtype=torch.bool)
    answer = torch.zeros((batch_size, width), dtype=torch.bool)
    for r, (p, a) in enumerate(rows):
        seq = p + a
        ids[r, width - len(seq):] = torch.tensor(seq)
        valid[r, width - len(seq):] = True
        answer[r, width - len(a):] = True
    masked = llada_masks(answer, gen)
    if name_parts is not None:
        masked |= name_part_masks(ids, answer, *name_parts, gen)
    noisy = ids.masked_fill(masked, mask_id)
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    return noisy, positions, KeyVisibility(valid=valid), ids, masked


def answer_aligned(tokenizer, rows: list[tuple[list[int], list[int]]]) -> tuple[Tensor, Tensor, Tensor, int]:
    """(ids, valid, answer, P): prompts left-padded to one width P so every answer starts at P and
    the block partition is the engine's (blocks counted from P); shorter answers right-padded with
    invisible keys."""
    P = max(len(p) for p, _ in rows)
    width = P + max(len(a) for _, a in rows)
    ids = torch.full((len(rows), width), tokenizer.eos_token_id, dtype=torch.long)
    valid = torch.zeros((len(rows), width), dtype=torch.bool)
    answer = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, (p, a) in enumerate(rows):
        ids[r, P - len(p): P + len(a)] = torch.tensor(p + a)
        valid[r, P - len(p): P + len(a)] = True
        answer[r, P: P + len(a)] = True
    return ids, valid, answer, P


def make_block_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, mask_id: int,
                     bd_size: int, mix: CanvasMix | None = None, mix_rng: random.Random | None = None):
    """Block-diffusion rows (``answer_aligned``), each twice, with complementary masks over one
    drawn block."""
    rows = draw_rows(tokenizer, corpus, batch_size, mix, mix_rng, multiple=bd_size)
    ids, valid, answer, P = answer_aligned(tokenizer, rows)
    width = ids.shape[1]
    masked = block_diffusion_masks(answer, P, bd_size, gen)
    ids, valid = ids.repeat(2, 1), valid.repeat(2, 1)
    noisy = ids.masked_fill(masked, mask_id)
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    spans = block_causal_spans(0, width, width, prompt_width=P, block_size=bd_size)
    return noisy, positions, KeyVisibility(valid=valid, spans=spans), ids, masked


def make_block_copies_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, mask_id: int,
                            bd_size: int, shift: bool, mix: CanvasMix | None = None,
                            mix_rng: random.Random | None = None):
    """Block-diffusion rows (``answer_aligned``) in the two-copy layout (``block_diffusion_copies``):
    every answer block scored in one step; the last item is the column read for each column."""
    rows = draw_rows(tokenizer, corpus, batch_size, mix, mix_rng, multiple=bd_size)
    ids, valid, answer, P = answer_aligned(tokenizer, rows)
    return block_diffusion_copies(ids, valid, answer, P, bd_size, mask_id, gen, shift)


def make_d2f_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, mask_id: int,
                   bd_size: int, mix: CanvasMix | None = None, mix_rng: random.Random | None = None):
    """D2F rows (``answer_aligned``): every answer block masked at its own rate, rising along the
    answer (``d2f_masks``), under block-causal attention with the prompt as one block; the last
    item is each position's rate, the loss weight's denominator."""
    rows = draw_rows(tokenizer, corpus, batch_size, mix, mix_rng, multiple=bd_size)
    ids, valid, answer, P = answer_aligned(tokenizer, rows)
    masked, rate = d2f_masks(answer, P, bd_size, gen)
    noisy = ids.masked_fill(masked, mask_id)
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    spans = block_causal_spans(0, ids.shape[1], ids.shape[1], prompt_width=P, block_size=bd_size, prompt_block=True)
    return noisy, positions, KeyVisibility(valid=valid, spans=spans), ids, masked, rate


def make_uniform_state_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, canvas: int,
                             mix: CanvasMix | None = None, mix_rng: random.Random | None = None):
    """Rows (``answer_aligned``, answers padded to whole canvases) with one canvas drawn per row
    (dllm/train/uniform_state.py ``draw_canvases``)."""
    rows = draw_rows(tokenizer, corpus, batch_size, mix, mix_rng, multiple=canvas)
    ids, valid, answer, P = answer_aligned(tokenizer, rows)
    return draw_canvases(ids, valid, answer.sum(-1), P, canvas, gen)


def teacher_answers(teacher, rows: list[tuple[list[int], list[int]]]) -> list[tuple[list[int], list[int]]]:
    """Each row's answer replaced by the teacher's own on the same canvas (one token per step,
    ``low_confidence``, one block): the trajectories certainty forcing distils."""
    out = list(rows)
    for length in sorted({len(a) for _, a in rows}):
        idx = [i for i, (_, a) in enumerate(rows) if len(a) == length]
        result = decode(teacher, [rows[i][0] for i in idx],
                        GenerationConfig(gen_length=length, steps=length, block_length=length))
        for i, answer in zip(idx, result.answer.tolist()):
            out[i] = (rows[i][0], answer)
    return out


def make_certainty_batch(tokenizer, corpus: TaskCorpus, batch_size: int, gen: torch.Generator, mask_id: int,
                         teacher, block: int | None, mix: CanvasMix | None = None,
                         mix_rng: random.Random | None = None):
    """Certainty-forcing rows (``answer_aligned``) holding the teacher's answers, each twice with
    complementary masks over one drawn segment (``certainty_forcing_masks``)."""
    with torch.no_grad():
        rows = teacher_answers(teacher, draw_rows(tokenizer, corpus, batch_size, mix, mix_rng))
    ids, valid, answer, P = answer_aligned(tokenizer, rows)
    hidden, scored = certainty_forcing_masks(answer, P, block, gen)
    ids, valid = ids.repeat(2, 1), valid.repeat(2, 1)
    positions = (valid.long().cumsum(-1) - 1).clamp_min(0)
    return ids.masked_fill(hidden, mask_id), positions, KeyVisibility(valid=valid), ids, scored


def d2f_config(raw: dict, bd_size: int) -> dict:
    """config.json of a D2F student: block-causal with the prompt as one block (origin "prompt");
    a bidirectional family (LLaDA, Dream) says so with dllm_attention / dllm_block_size, as a
    D2F LoRA merged into its base would; a block-causal family keeps its own block size."""
    raw = {**raw, BLOCK_ORIGIN_KEY: "prompt"}
    if raw["model_type"].lower() in ("llada", "dream"):
        raw.update({ATTENTION_KEY: "block_causal", BLOCK_SIZE_KEY: bd_size})
    return raw


def load_teacher(path: Path, student) -> DiffusionTransformer:
    """A frozen teacher for ``--d2f-teacher``, refused unless its predictions line up with the
    student's: the same vocabulary size and the same logit shift."""
    teacher = load_model(path, dtype=torch.float32).eval().requires_grad_(False)
    mine, theirs = student.config, teacher.config
    if (theirs.vocab_size, theirs.shift_logits) != (mine.vocab_size, mine.shift_logits):
        raise SystemExit(f"--d2f-teacher {path}: vocabulary {theirs.vocab_size}, logit shift {theirs.shift_logits}; "
                         f"the student has {mine.vocab_size}, {mine.shift_logits}: pick a teacher of the same "
                         "tokenizer and layout (e.g. a Dream-layout teacher for a Dream-layout student)")
    return teacher


class ExpertLoads:
    """Counts the (token, slot) choices of every MoE layer's router during training and moves
    LLaDA2's selection-only ``expert_bias`` toward balance after each step: + rate for experts
    below the layer's mean load, - rate above (auxiliary-loss-free balancing, as the
    ``expert_bias`` of LLaDA2 / DeepSeek-V3 is trained). rate 0 only counts."""

    def __init__(self, model, rate: float) -> None:
        self.rate = rate
        self.layers = {name: mod for name, mod in model.named_modules() if isinstance(mod, MoEMLP)}
        self.step_counts = {name: torch.zeros(mod.cfg.n_experts) for name, mod in self.layers.items()}
        self.totals = {name: torch.zeros(mod.cfg.n_experts) for name, mod in self.layers.items()}
        for name, mod in self.layers.items():
            mod.route = self._recording(name, mod.route)

    def _recording(self, name: str, route):
        def recorded(x2d):
            weights, ids = route(x2d)
            if torch.is_grad_enabled():  # training forwards only, not evaluation decodes
                self.step_counts[name] += torch.bincount(ids.flatten(), minlength=len(self.step_counts[name])).float()
            return weights, ids
        return recorded

    @torch.no_grad()
    def update(self) -> None:
        for name, mod in self.layers.items():
            load = self.step_counts[name]
            if self.rate and mod.expert_bias is not None and load.sum() > 0:
                mod.expert_bias += self.rate * torch.sign(load.mean() - load)
            self.totals[name] += load
            load.zero_()

    def shares(self) -> dict[str, list[float]]:
        """Each layer's share of routed choices per expert since the last call (then reset)."""
        out = {name: (t / t.sum().clamp_min(1)).tolist() for name, t in self.totals.items()}
        for t in self.totals.values():
            t.zero_()
        return out


@torch.no_grad()
def evaluate(model, tokenizer, heldout: list, specs: dict, gen_length: int | None = None, shots: int = 0) -> dict:
    """Exact decode at one token per step (low_confidence) on the held-out split, scored, at
    each task's own gen length (or ``gen_length``), zero-shot (or with ``shots`` examples, which
    the held-out samples must carry)."""
    model.eval()
    scores: dict[str, list[float]] = {}
    for task in dict.fromkeys(ex.task for ex in heldout):
        exs = [dataclasses.replace(ex, messages=build_messages(specs[task], ex.sample, shots=shots))
               for ex in heldout if ex.task == task]
        prompts = [encode(tokenizer, ex)[0] for ex in exs]
        G = gen_length or specs[task].max_tokens
        # a uniform-state model denoises canvases of its own length (its default policy, eb_sampler)
        block = model.config.canvas_length if getattr(model, "uniform_state", False) else G
        result = decode(model, prompts, GenerationConfig(gen_length=G, steps=G, block_length=block))
        eos = tokenizer.eos_token_id
        for ex, ans in zip(exs, result.answer.tolist()):
            ans = ans[: ans.index(eos)] if eos in ans else ans
            text = tokenizer.decode(ans)
            scores.setdefault(task, []).append(score(specs[task].metric, text, ex.sample))
    model.train()
    per_task = {k: sum(v) / len(v) for k, v in scores.items()}
    return {"per_task": per_task, "mean": sum(per_task.values()) / len(per_task)}


def evaluate_mix(model, tokenizer, heldout: list, specs: dict, mix: CanvasMix | None) -> dict:
    """``evaluate`` at each task's own length, zero-shot; with a mix also at its longest canvas
    (``long``) and one-shot (``one_shot``), and ``selection``: the mean over the three, by which
    ``best/`` is kept (the mean alone without a mix)."""
    result = evaluate(model, tokenizer, heldout, specs)
    means = [result["mean"]]
    if mix is not None and mix.long_share:
        result["long"] = evaluate(model, tokenizer, heldout, specs, gen_length=mix.max_gen_length)
        means.append(result["long"]["mean"])
    if mix is not None and mix.one_shot_share:
        result["one_shot"] = evaluate(model, tokenizer, heldout, specs, shots=1)
        means.append(result["one_shot"]["mean"])
    result["selection"] = sum(means) / len(means)
    return result


def keep_best(model, raw: dict, out: Path, step: int, scores: dict) -> None:
    """Write the checkpoint to ``out/best`` (a loadable directory with the tokenizer) with its
    step and held-out scores in ``best.json``: the last evaluation is not always the best one."""
    best = out / "best"
    save_checkpoint(model, raw, best)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(out / name, best / name)
    (best / "best.json").write_text(json.dumps({"step": step, **scores}, indent=2) + "\n")


def token_loss(model, noisy: Tensor, positions: Tensor, attn: KeyVisibility, target: Tensor, masked: Tensor,
               rate: Tensor | None, read: Tensor | None, teacher, cf_weight: float | None) -> Tensor:
    """The mask-based objectives' loss: one forward of the noisy rows, scored at the masked
    positions (the two-copy layout's read columns, Dream's shift, D2F's rate, certainty forcing)."""
    logits = model(noisy, positions, attn)
    taught = None
    if teacher is not None:  # every key visible to the teacher (D2F: its base without the student's mask)
        with torch.no_grad():
            taught = teacher(noisy, positions, KeyVisibility(valid=attn.valid))
    if read is not None:  # the two-copy layout names the column each prediction is read from
        logits = logits[:, read]
    elif model.config.shift_logits:  # Dream: position i - 1 predicts token i
        logits, target, masked = logits[:, :-1], target[:, 1:], masked[:, 1:]
        rate = rate[:, 1:] if rate is not None else None
        taught = taught[:, :-1] if taught is not None else None
    if cf_weight is not None:
        return certainty_forcing_loss(logits, target, masked, cf_weight)
    if rate is None:
        return F.cross_entropy(logits[masked], target[masked])
    return d2f_loss(logits, target, masked, rate, taught)  # D2F: each masked token's loss over its block's rate


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None, help="ParallelBench data dir (templates, names)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=None,
                    help="key/value heads (GQA) for the Qwen2 layouts; default: --n-heads")
    ap.add_argument("--bd-size", type=int, default=8,
                    help="fast_dllm_v2: block-diffusion block size; diffusion_gemma: canvas_length")
    ap.add_argument("--sliding-window", type=int, default=128,
                    help="diffusion_gemma: sliding_window of its sliding-attention layers")
    ap.add_argument("--mlp-hidden", type=int, default=384)
    ap.add_argument("--n-experts", type=int, default=8, help="llada2_moe: routed experts per MoE layer")
    ap.add_argument("--top-k", type=int, default=2, help="llada2_moe: experts per token")
    ap.add_argument("--expert-hidden", type=int, default=32, help="llada2_moe: moe_intermediate_size")
    ap.add_argument("--n-group", type=int, default=4, help="llada2_moe: expert groups (group-limited top-k)")
    ap.add_argument("--topk-group", type=int, default=2, help="llada2_moe: groups a token may use")
    ap.add_argument("--partial-rotary", type=float, default=1.0,
                    help="llada2_moe: partial_rotary_factor (LLaDA2.0-mini: 0.5; 1 keeps an --init-weights "
                         "LLaDA-layout model's RoPE)")
    ap.add_argument("--expert-bias-rate", type=float, default=1e-3,
                    help="llada2_moe: step of the expert_bias balance update (0: routing left alone)")
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--heldout-per-task", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", choices=sorted(TOKENIZER_LAYOUT), default="llada",
                    help="checkpoint layout: llada, dream (Qwen2 names, logit shift), fast_dllm_v2 "
                         "(Dream's layout, block-causal, block-diffusion objective) or llada2_moe (LLaDA2's "
                         "layout: MoE, block-causal over 32, the same objective)")
    ap.add_argument("--init-weights", type=Path, default=None,
                    help="start from this checkpoint's weights, of any family with the same widths and "
                         "vocabulary (pair it with --tokenizer DIR of the same checkpoint)")
    ap.add_argument("--init", type=Path, default=None,
                    help="checkpoint directory to continue from (its tokenizer and weights)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="reuse this checkpoint directory's tokenizer.json + tokenizer_config.json instead "
                         "of building one (reproduces a model's token ids; --vocab-size is then unused)")
    ap.add_argument("--tasks", nargs="+", default=None,
                    help="train on these tasks only (e.g. waiting_line/copy; a task named twice is drawn twice "
                         "as often); default: all of TRAIN_TASKS")
    ap.add_argument("--name-part-masking", type=float, default=0.0, metavar="RATE",
                    help="share of rows that also mask every first name or every last name of the answer "
                         "(one drawn per row; dllm/train/objectives.py name_part_masks); llada / dream only")
    ap.add_argument("--name-part-classes", choices=sorted(NAME_PARTS), default="both",
                    help="which half of the names --name-part-masking hides: one of the two drawn per row "
                         "(both), or always the first / the last names (to train one look-up direction)")
    ap.add_argument("--fixed-pairs", type=float, default=0.0, metavar="RATE",
                    help="share of waiting-line examples whose people come from one fixed first-to-last-name "
                         "pairing (dllm/train/corpus.py fixed_pair_names); 0: every example from the whole pool")
    ap.add_argument("--freeze-layers", type=int, nargs="+", default=(), metavar="I",
                    help="keep these transformer blocks (0-based) at their starting weights, so what the run "
                         "teaches must form in the others (e.g. a previous-position head below the last block, "
                         "where a later block can use what it reads)")
    ap.add_argument("--stop-after", type=int, default=None, metavar="STEP",
                    help="end the run after this step's evaluation and checkpoint, keeping the learning-rate "
                         "schedule of --steps (a curriculum stage that starts from a run's intermediate "
                         "checkpoint); must be a multiple of --eval-every")
    ap.add_argument("--long-canvas", type=float, default=0.0, metavar="RATE",
                    help="share of batches whose answer canvas length is drawn from --gen-lengths, each "
                         "answer padded with end-of-text to it (default 0: each task's own length)")
    ap.add_argument("--gen-lengths", type=int, nargs=2, default=(8, 128), metavar=("MIN", "MAX"),
                    help="the drawn canvas length's range (a row never gets less than its answer + 1)")
    ap.add_argument("--one-shot", type=float, default=0.0, metavar="RATE",
                    help="share of batches in the benchmark's one-shot format (one generated example first)")
    ap.add_argument("--cf-block", type=int, default=8, metavar="N",
                    help="--objective certainty_forcing: the segment block (dParallel's LLaDA script: 32 of "
                         "256-token answers; 0: the whole answer, its Dream script)")
    ap.add_argument("--cf-weight", type=float, default=None, metavar="W",
                    help="--objective certainty_forcing: the entropy term's weight (default: 2 for LLaDA "
                         "layouts, 1 for Dream, as dParallel's scripts)")
    ap.add_argument("--objective", choices=("family", "block_copies", "d2f", "certainty_forcing", "uniform_state"),
                    default="family",
                    help="family: the layout's own objective (LLaDA SFT for llada / dream, block diffusion over one "
                         "drawn block per row for fast_dllm_v2 / llada2_moe); block_copies: block diffusion over "
                         "every block at once, the clean answer beside two complementary noisy copies (Fast-dLLM "
                         "v2 / BD3-LM training; block-causal families); d2f: Discrete Diffusion Forcing (dllm/train/objectives.py "
                         "d2f_masks), a block-causal student of --bd-size blocks (a block-causal layout's own size) "
                         "with the prompt as one block, decoded by the pipelined mode; certainty_forcing: "
                         "dParallel's distillation of an --init model on its own answers (dllm/train/certainty_forcing.py); "
                         "uniform_state: DiffusionGemma's uniform-state denoising with self-conditioning "
                         "(dllm/train/uniform_state.py; --family diffusion_gemma, the family's only objective)")
    ap.add_argument("--self-conditioning", type=float, default=0.5, metavar="RATE",
                    help="--objective uniform_state: share of steps whose loss pass reads a first no-grad pass's "
                         "tempered logits as self-conditioning (Analog Bits' 0.5)")
    ap.add_argument("--d2f-teacher", type=Path, default=None, metavar="DIR",
                    help="--objective d2f: distil this checkpoint (same vocabulary and logit shift) instead of "
                         "learning the data's tokens: its distribution over each masked position, read with every "
                         "key visible (D2F's self_align, its released configs: the bidirectional base as teacher)")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        mix = CanvasMix(long_share=args.long_canvas, min_gen_length=args.gen_lengths[0],
                        max_gen_length=args.gen_lengths[1], one_shot_share=args.one_shot)
    except ValueError as e:
        ap.error(f"--long-canvas / --gen-lengths / --one-shot: {e}")
    mix_rng = random.Random(args.seed + 20_000)
    if args.stop_after is not None and not (0 < args.stop_after <= args.steps
                                            and args.stop_after % args.eval_every == 0):
        ap.error(f"--stop-after {args.stop_after}: an evaluation step (a multiple of --eval-every "
                 f"{args.eval_every}) between 1 and --steps {args.steps}, so the run ends on a written checkpoint")
    if not 0.0 <= args.name_part_masking <= 1.0:
        ap.error(f"--name-part-masking {args.name_part_masking}: a share of rows, between 0 and 1")
    if not 0.0 <= args.fixed_pairs <= 1.0:
        ap.error(f"--fixed-pairs {args.fixed_pairs}: a share of examples, between 0 and 1")
    if args.name_part_masking and (args.family in ("fast_dllm_v2", "llada2_moe") or args.objective == "d2f"):
        ap.error("--name-part-masking applies to the llada / dream objectives; the block objectives (fast_dllm_v2, "
                 "llada2_moe, --objective d2f) mask by block")
    if args.objective == "block_copies" and args.family not in ("fast_dllm_v2", "llada2_moe") and not args.init:
        ap.error(f"--objective block_copies trains a block-causal layout; --family {args.family} is bidirectional "
                 "(use fast_dllm_v2 or llada2_moe, or --objective d2f for a block-causal student of it)")
    if args.d2f_teacher and args.objective != "d2f":
        ap.error("--d2f-teacher distils into a D2F student; add --objective d2f")
    if args.objective == "certainty_forcing" and not args.init:
        ap.error("--objective certainty_forcing distils a trained model on its own answers: add --init DIR")
    if args.objective == "certainty_forcing" and args.cf_block < 0:
        ap.error(f"--cf-block {args.cf_block}: a block size, or 0 for the whole answer")
    if args.init and (args.tokenizer or args.init_weights):
        ap.error("--init already brings its checkpoint's tokenizer and weights; drop --tokenizer / --init-weights")
    if (args.objective == "uniform_state") != (args.family == "diffusion_gemma"):
        ap.error("--objective uniform_state trains the uniform-state family: pair it with --family diffusion_gemma "
                 "(and --family diffusion_gemma with it)")
    if args.objective == "uniform_state" and (args.init_weights or args.name_part_masking or args.d2f_teacher):
        ap.error("--objective uniform_state: --init-weights, --name-part-masking and --d2f-teacher do not apply "
                 "(no mask token; other families' weights do not map onto DiffusionGemma's layers)")
    if not 0.0 <= args.self_conditioning <= 1.0:
        ap.error(f"--self-conditioning {args.self_conditioning}: a share of steps, between 0 and 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data_dir = args.data or default_data_dir()
    require_data_dir(data_dir)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tasks = tuple(args.tasks) if args.tasks else TRAIN_TASKS
    corpus = TaskCorpus(data_dir, seed=args.seed, tasks=tasks, fixed_pairs=args.fixed_pairs)
    if args.init:  # continue from a checkpoint (e.g. a curriculum stage): its tokenizer and weights
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(args.init / name, out / name)
        tokenizer = load_tokenizer(out)
        model = load_model(args.init, dtype=torch.float32).requires_grad_(True)
        raw = json.loads((args.init / "config.json").read_text())
        if getattr(model, "uniform_state", False) != (args.objective == "uniform_state"):
            ap.error(f"--init {args.init}: a uniform-state checkpoint trains with --objective uniform_state "
                     "--family diffusion_gemma, and only it does")
        if getattr(model, "uniform_state", False):  # loaded as one tensor; keep it one while training
            model.lm_head.weight = model.embed.weight
        if args.objective == "d2f" and (model.attention != "block_causal" or model.config.block_origin != "prompt"):
            ap.error(f"--objective d2f --init {args.init}: not a D2F student (block-causal, block origin "
                     "'prompt'); start one from it with --init-weights DIR --tokenizer DIR")
        if args.objective == "block_copies" and model.attention != "block_causal":
            ap.error(f"--objective block_copies --init {args.init}: a bidirectional checkpoint; block diffusion "
                     "trains a block-causal one (fast_dllm_v2, llada2_moe)")
    else:
        tokenizer = (reuse_tokenizer(args.tokenizer, out) if args.tokenizer
                     else build_tokenizer(corpus, out, args.vocab_size, TOKENIZER_LAYOUT[args.family]))
        raw = model_config(tokenizer, args)
        if args.objective == "d2f":
            raw = d2f_config(raw, args.bd_size)
        raw[PROMPT_SHOTS_KEY] = 0  # trained on zero-shot prompts: `dllm bench parallelbench` follows it
        model = build_fresh(raw, args.d_model)
        if args.init_weights:
            fresh: list[str] = []
            zeroed = init_from_checkpoint(model, args.init_weights, fresh)
            tqdm.write(f"initialised from {args.init_weights} ({len(zeroed)} bias tensors start at zero"
                       + (f"; {len(fresh)} new or upcycled tensors" if fresh else "") + ")")
    if mix.one_shot_share:  # trained on one-shot prompts too: the benchmark's own protocol is right for it
        raw.pop(PROMPT_SHOTS_KEY, None)
    bad = [i for i in args.freeze_layers if not 0 <= i < len(model.layers)]
    if bad:
        ap.error(f"--freeze-layers {bad}: the model has blocks 0 to {len(model.layers) - 1}")
    for i in args.freeze_layers:
        model.layers[i].requires_grad_(False)
    name_parts = name_part_option(tokenizer, corpus, args.name_part_masking, args.name_part_classes)
    teacher = load_teacher(args.d2f_teacher, model) if args.d2f_teacher else None
    cf_teacher = cf_weight = None
    if args.objective == "certainty_forcing":  # the frozen starting model writes the trajectories
        cf_teacher = load_model(args.init, dtype=torch.float32).eval().requires_grad_(False)
        cf_weight = args.cf_weight if args.cf_weight is not None else (1.0 if model.config.shift_logits else 2.0)
    n_params = sum(p.numel() for p in model.parameters())
    heldout_corpus = TaskCorpus(data_dir, seed=args.seed + 10_000)
    heldout = [heldout_corpus.sample(task, shots=int(bool(mix.one_shot_share)))
               for task in dict.fromkeys(tasks) for _ in range(args.heldout_per_task)]
    trained = [p for p in model.parameters() if p.requires_grad]  # --freeze-layers leaves some out
    opt = torch.optim.AdamW(trained, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    gen = torch.Generator().manual_seed(args.seed)
    log = (out / "train_log.jsonl").open("a")
    meta = {"args": {k: str(v) for k, v in vars(args).items()}, "params": n_params}
    log.write(json.dumps({"meta": meta}) + "\n")
    loads = ExpertLoads(model, args.expert_bias_rate)
    start = time.time()
    best_mean = -1.0
    model.train()
    last_step = args.stop_after or args.steps
    bar = tqdm(range(1, last_step + 1), desc=f"train {n_params / 1e6:.2f}M", dynamic_ncols=True)
    for step in bar:
        rate = read = None
        if args.objective == "uniform_state":  # its own forward: encoder, then the denoiser (twice with self-conditioning)
            batch = make_uniform_state_batch(tokenizer, corpus, args.batch_size, gen, model.config.canvas_length,
                                             mix, mix_rng)
            loss, _ = uniform_state_loss(model, batch, gen, args.self_conditioning)
        elif args.objective == "block_copies":
            noisy, positions, attn, target, masked, read = make_block_copies_batch(
                tokenizer, corpus, args.batch_size // 2, gen, raw["mask_token_id"], model.config.block_size,
                model.config.shift_logits, mix, mix_rng)
        elif args.objective == "certainty_forcing":
            noisy, positions, attn, target, masked = make_certainty_batch(
                tokenizer, corpus, args.batch_size // 2, gen, raw["mask_token_id"], cf_teacher,
                args.cf_block or None, mix, mix_rng)
        elif args.objective == "d2f":
            noisy, positions, attn, target, masked, rate = make_d2f_batch(
                tokenizer, corpus, args.batch_size, gen, raw["mask_token_id"], model.config.block_size, mix, mix_rng)
        elif model.attention == "block_causal":  # the pair of complementary rows counts as two
            noisy, positions, attn, target, masked = make_block_batch(
                tokenizer, corpus, args.batch_size // 2, gen, raw["mask_token_id"], model.config.block_size,
                mix, mix_rng)
        else:
            noisy, positions, attn, target, masked = make_batch(tokenizer, corpus, args.batch_size, gen,
                                                                raw["mask_token_id"], name_parts, mix, mix_rng)
        if args.objective != "uniform_state":
            loss = token_loss(model, noisy, positions, attn, target, masked, rate, read, teacher, cf_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loads.update()
        bar.set_postfix(loss=f"{loss.item():.4f}")
        record = {"step": step, "loss": loss.item(), "lr": sched.get_last_lr()[0], "elapsed": time.time() - start}
        if step % args.eval_every == 0 or step == args.steps:
            record["eval"] = evaluate_mix(model, tokenizer, heldout, corpus.specs, mix if mix.enabled else None)
            if loads.layers:  # routed-choice shares per expert since the last evaluation
                record["expert_load"] = loads.shares()
                bar.write("expert load " + " | ".join(
                    " ".join(f"{x:.2f}" for x in v) for v in record["expert_load"].values()))
            bar.write(f"step {step} heldout mean {record['eval']['mean']:.3f}"
                      + "".join(f" {k} {record['eval'][k]['mean']:.3f}" for k in ("long", "one_shot") if k in record["eval"])
                      + " | "
                      + " ".join(f"{k.split('/')[1][:10]}={v:.2f}" for k, v in record["eval"]["per_task"].items()))
            save_checkpoint(model, raw, out)
            if record["eval"]["selection"] > best_mean:
                best_mean = record["eval"]["selection"]
                keep_best(model, raw, out, step, record["eval"])
        log.write(json.dumps(record) + "\n")
        log.flush()


if __name__ == "__main__":
    main()
