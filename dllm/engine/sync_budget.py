"""How often the decode loop may wait for the device: the documented host-read budget.

On a GPU every value the host reads back (``bool(t)``, ``.item()``, ``int(t)``, ...) and every
op whose output size depends on the data (boolean-mask indexing, ``nonzero``, ``bincount``)
stalls the launch queue until the device catches up. The loop is written to stay within:

* per round (one ``strategy.step``): the loop's "does any row still move?" read, plus, for
  candidate strategies (FreeDave, LoPA, SSD), their "does the base step leave work, so is a forward
  needed at all?" read;
* the pipelined mode (D2F, dllm/engine/pipeline.py): one more per round, the window's block range over
  the batch (LoPA there folds "how far do the candidates' own blocks reach" into its forward read);
* per decision window: the read that ends its loop and the "is any row still active?" read;
* with EoTP truncating rows: one more per forward (the furthest end over active rows, read
  before the next forward after a truncation): at most one per round plus one per window (the
  candidate strategies' block-start forward);
* ``generate`` with stop strings or stop ids: one more per round, the canvas read back to find a
  stop in the final text (``api/decided.py``; ``max_tokens`` alone is checked on the device);
* per decode: one read when the result is built (each row's last committing forward, which
  gives its own latency).

``tests/samplers/test_host_syncs.py`` counts them on CPU for every strategy and fails above this.
"""
from __future__ import annotations

# apd / guided: the loop's read, and the helper's forward (a transformers causal LM) reads the
# host itself: 2 reads a forward for transformers 5.24's Qwen2 (its mask checks), measured by
# tests/samplers/test_host_syncs.py; apd adds one more, the length of the helper's forward
READS_PER_ROUND = {"plain": 1, "freedave": 2, "lopa": 2, "ssd": 2, "uniform": 1, "apd": 4, "guided": 3}
READS_PER_ROUND_PIPELINED = 1  # the blocks in flight over the batch: [lo, hi)
READS_PER_WINDOW = 2
READS_PER_FORWARD_TRUNCATED = 1  # EoTP: the furthest end over active rows, before the next forward
READS_PER_DECODE = 1  # the result: each row's last committing forward (its own latency)


def read_budget(strategy: str, rounds: int, windows: int, truncating: bool = False,
                pipelined: bool = False) -> int:
    """Host reads a decode of ``rounds`` strategy steps over ``windows`` windows may make."""
    truncated = READS_PER_FORWARD_TRUNCATED * (rounds + windows) if truncating else 0
    per_round = READS_PER_ROUND[strategy] + (READS_PER_ROUND_PIPELINED if pipelined else 0)
    return per_round * rounds + READS_PER_WINDOW * windows + truncated + READS_PER_DECODE
