"""APD's helper K/V cache (``helper_cache=True``): the helper's transformers cache
(``past_key_values``, a ``DynamicCache``) kept over the committed prefix, as the released loop
keeps its verifier's (``crop(curr + num_accept)`` after each round).

Each round the helper forwards from the end of the kept prefix (at most the output before the
block start, which the first window position reads) to the window's end over the kept K/V;
after the commit the cache is cropped to the longest prefix that every row has committed with
the very tokens it was fed (a causal model's K/V there depend on final tokens only). A speed
option: the logits are the uncached forward's up to rounding.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor


def crop_cache(past, keep: int) -> None:
    """Keep the first ``keep`` positions of a transformers cache (a negative count to drop, which
    transformers 4 and 5 both read so)."""
    drop = past.get_seq_length() - keep
    if drop > 0:
        past.crop(-drop)


def cache_argument(model) -> str:
    """The forward's cache keyword (and its output's name): ``cache`` (transformers 5.2x) or
    ``past_key_values`` (before)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class HelperPrefixCache:
    """The helper's K/V of the committed prefix, for one decode's canvas rows."""

    def __init__(self) -> None:
        self.past = None
        self.kept = 0  # canvas positions whose K/V the cache holds (the same for every row)
        self.fed: Tensor | None = None  # (B, stop) the ids of the last forward's positions

    def logits(self, helper, tokens: Tensor, valid: Tensor, positions: Tensor, start: int, stop: int) -> Tensor:
        """``helper_logits``'s (B, stop - start, V_h), the prefix's K/V read from the cache."""
        ids = tokens[:, :stop]
        ids = torch.where(ids < helper.vocab_size, ids, torch.zeros_like(ids))
        begin = min(self.kept, start - 1)  # output start - 1 is read: its query is recomputed
        past = self.past if begin > 0 else None
        if past is not None:
            crop_cache(past, begin)
        out = helper.model(input_ids=ids[:, begin:], attention_mask=valid[:, :stop].long(),
                           position_ids=positions[:, begin:stop], use_cache=True,
                           **{cache_argument(helper.model): past})
        self.past = out["cache"] if "cache" in out else out.past_key_values  # the output's name follows the keyword's
        self.kept, self.fed = stop, ids
        return out.logits[:, start - 1 - begin : stop - 1 - begin]

    def keep_committed(self, tokens: Tensor, mask_id: int) -> None:
        """After the commit: crop to the positions every row has final and fed as they are."""
        if self.fed is None:
            return
        now = tokens[:, : self.fed.shape[1]]
        final = (now == self.fed) & (now != mask_id)  # (B, stop)
        prefix = final.long().cumprod(-1).sum(-1)  # (B,) each row's leading final positions
        self.kept = int(prefix.min())  # (a host read: the cache's one length)
        crop_cache(self.past, self.kept)
