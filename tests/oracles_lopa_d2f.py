"""A plain re-implementation of LoPA's released D2F loop (batch 1, T = 0).

Written from the published code, read, not copied: ``_generate_enhanced_speculative`` and
``_generate_additional_branches`` of zhijie-group/LoPA ``scale_dream_d2f/scale_dream_d2f.py`` in
its released setting (``test_dream_d2f_LoPA.sh``: ``branch_verification_mode`` and
``base_branch_competition`` on, ``verification_force_base_winner`` off, ``selection_conf_alpha``
0, ``branch_topp`` 1, ``sampling_strategy="neg_entropy"``, ``branching_factor`` 2-4).

Each branch carries its own canvas and D2F block states (active -> to_cache -> in_cache,
is_complete). A round: every active branch adds a block if its last block has decoded
``block_add_threshold`` (none after an end-of-text), refreshes its is_complete flags and is done
when it has no mask and no active block; the others are forwarded (lookahead branches first,
the base last) and scored by their branch confidence; the first best (stable sort: a lookahead
branch wins a tie with the base) is filled with its own logits (prob > skip_threshold; a fully
active block with none takes its highest-confidence position); the next round's branches are
``branching_factor`` copies of it each with one more of its most confident masks (the released
code counts the base apart, so factor f gives f lookahead branches) and the base. Block states
follow the base's fills only: a block a lookahead token finishes turns to_cache one round later.
The loop returns the branch that completed in the fewest rounds.

What differs is only how logits are computed: the whole sequence under D2F's block mask
(``use_full_attention=False``; the released default ``True`` attends across the blocks in flight
and keeps K/V computed before later blocks were final, which no block-causal cache reproduces),
instead of the official shared K/V cache, which the block mask makes equal. Confidences are
float64 with the mask token's logit at -inf (as dllm; the official softmax keeps it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tests.oracles import _on_model_device
from tests.oracles_d2f import d2f_logits


@dataclass
class _Branch:
    x: torch.Tensor  # (T,) the branch's canvas: prompt + the blocks it added
    blocks: list[dict]
    base: bool
    ident: int
    eos: bool = False
    active: bool = True
    finished_round: int = -1

    def clone(self, ident: int, base: bool) -> "_Branch":
        return _Branch(self.x.clone(), [dict(b) for b in self.blocks], base, ident, self.eos)


def _neg_entropy(logits: torch.Tensor) -> torch.Tensor:
    p = logits.softmax(-1)
    return torch.special.xlogy(p, p).sum(-1)


def _share(block: dict) -> float:
    return (block["total"] - block["masks"]) / block["total"] if block["total"] else 1.0


def _prefix_end(branches: list[_Branch], P: int) -> int:
    """End of the leading finished (to_cache / in_cache, no mask) blocks common to all branches."""
    counts = []
    for b in branches:
        n = 0
        for block in b.blocks:
            if block["state"] in ("to_cache", "in_cache") and block["masks"] == 0:
                n += 1
            else:
                break
        counts.append(n)
    n = min(counts)
    return branches[0].blocks[n - 1]["end"] if n else P


@_on_model_device
def lopa_d2f_generate(model, prompt, *, gen_length, block_size, block_add_threshold, decoded_token_threshold,
                      skip_threshold, branching_factor, eos_id=None, confidence="neg_entropy",
                      branch_topp=1.0, alpha=0.0):
    """LoPA's released D2F loop; returns x[P:] of the branch that completed first."""
    mask_id, P = model.mask_token_id, len(prompt)
    conf_of = _neg_entropy if confidence == "neg_entropy" else (lambda lg: lg.softmax(-1).max(-1).values)
    prompt_block = dict(start=0, end=P, total=P, masks=0, state="to_cache", complete=True)
    branches = [_Branch(torch.tensor(prompt), [prompt_block], base=True, ident=0)]
    creation = {0: 1.0}  # branch ident -> confidence of its lookahead token
    for rnd in range(1, 10_000):
        live = [b for b in branches if b.active]
        if not live:
            break
        for b in live:  # preprocessing: add a block, refresh is_complete, done?
            if len(b.blocks) - 1 < gen_length // block_size and not b.eos:
                if _share(b.blocks[-1]) >= block_add_threshold:
                    start = b.x.shape[0]
                    b.x = torch.cat([b.x, torch.full((block_size,), mask_id)])
                    b.blocks.append(dict(start=start, end=start + block_size, total=block_size,
                                         masks=block_size, state="active", complete=False))
            for i, block in enumerate(b.blocks[:-1]):
                if _share(block) >= decoded_token_threshold:
                    b.blocks[i + 1]["complete"] = True
            if not bool((b.x == mask_id).any()) and all(k["state"] != "active" for k in b.blocks):
                b.active, b.finished_round = False, rnd
        live = [b for b in live if b.active]
        if not live:
            continue
        shared = _prefix_end(live, P)
        live.sort(key=lambda b: (b.base, b.ident))  # lookahead branches first, the base last
        scored = []
        for b in live:
            logits = d2f_logits(model, b.x[None], P, block_size)[0]
            masks = torch.nonzero(b.x[shared:] == mask_id).flatten() + shared
            if masks.numel() == 0:
                future = 1.0
            else:
                conf = conf_of(logits[masks])
                future = conf.sort().values[: max(1, int(masks.numel() * branch_topp))].mean().item()
            scored.append((alpha * creation.get(b.ident, 1.0) + (1 - alpha) * future, b, logits))
        best_score, best, logits = max(scored, key=lambda s: s[0])  # first max: stable order
        for block in best.blocks:  # cached blocks move on
            if block["state"] == "to_cache":
                block["state"] = "in_cache"
        filled = set()
        for block in best.blocks:
            if block["state"] != "active":
                continue
            s, e = block["start"], block["end"]
            where = torch.nonzero(best.x[s:e] == mask_id).flatten() + s
            if where.numel() == 0:
                continue
            probs = logits[where].softmax(-1)
            prob, token = probs.max(-1)
            conf = conf_of(logits[where])
            pick = torch.nonzero(prob > skip_threshold).flatten()
            if pick.numel() == 0 and block["complete"]:
                pick = conf.argmax()[None]
            for i in pick.tolist():
                best.x[where[i]] = token[i]
                filled.add(int(where[i]))
                if eos_id is not None and int(token[i]) == eos_id:
                    best.eos = True
        done_by_base = []  # active blocks the base's fills left without a mask
        for k, block in enumerate(best.blocks):
            if block["state"] == "active":
                block["masks"] = int((best.x[block["start"]: block["end"]] == mask_id).sum())
                if block["masks"] == 0:
                    done_by_base.append(k)
        # spawn: the released competition mode asks for branching_factor lookahead branches
        # (its "- 1 for the base" applies only when the base is already in the list; it is not)
        candidates = []
        for block in best.blocks:
            if block["state"] == "active":
                for pos in range(block["start"], block["end"]):
                    if best.x[pos] == mask_id and pos not in filled and pos >= shared:
                        candidates.append(pos)
        ranked = sorted(((conf_of(logits[pos][None]).item(), pos) for pos in candidates),
                        key=lambda c: c[0], reverse=True)  # stable: ties keep position order
        next_id = len(branches)
        spawned = []
        base = best.clone(next_id, base=True)
        creation[next_id] = 1.0
        for conf, pos in ranked[:branching_factor]:
            child = best.clone(next_id + len(spawned), base=False)
            child.x[pos] = logits[pos].argmax()
            creation[child.ident] = conf
            if eos_id is not None and int(child.x[pos]) == eos_id:
                child.eos = True
            spawned.append(child)
        spawned.append(base)
        for nb in spawned:  # block states: cache moves, to_cache only from the base's fills
            for k, block in enumerate(nb.blocks):
                if block["state"] == "active":
                    block["masks"] = int((nb.x[block["start"]: block["end"]] == mask_id).sum())
            for k, block in enumerate(nb.blocks):
                if block["state"] == "active" and k in done_by_base and block["masks"] == 0:
                    if all(nb.blocks[j]["state"] != "active" for j in range(k)):
                        block["state"] = "to_cache"
        branches = [b for b in branches if not b.active] + spawned
    else:
        raise RuntimeError("lopa d2f oracle: no end after 10000 rounds")
    finished = [b for b in branches if not b.active and b.finished_round != -1]
    winner = min(finished, key=lambda b: b.finished_round)
    return winner.x[P:].tolist()
