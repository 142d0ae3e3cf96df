#!/usr/bin/env bash
# The LLaDA-layout model's name-binding curriculum (dllm-waitingline-llada card, "What creates it"
# and "The last-name direction"): stage 1's positional copy, a fixed-pairs phase that seeds a
# previous-position head, random pairs again so the in-context look-up follows in each direction.
# Seeded, one thread; `--stop-after` stands in for the card's stops by hand (same schedule). Not
# rerun end to end: 2,850 steps, about an hour at the 1.2 s per step stage 1 took on one core of
# a 2-core x86_64 CPU. Needs the ParallelBench data folder (DLLM_PARALLELBENCH_DIR, else
# ../shared/data/parallelbench beside the repository).
#   RUNS=runs/binding bash bench/train_llada_binding.sh
set -euo pipefail
RUNS=${RUNS:-runs/binding}
PY=${PY:-python}
M=dllm/assets/models/dllm-waitingline-llada
train() { "$PY" -m dllm.train.train_small --threads 1 "$@"; }
T="waiting_line/copy waiting_line/reverse waiting_line/shuffle waiting_line/shuffle waiting_line/shuffle waiting_line/insert_random"
# stage 1: copy and reverse (best/ = the step-600 evaluation)
train --out $RUNS/cur1 --tokenizer $M --steps 800 --eval-every 200 --tasks waiting_line/copy waiting_line/reverse
# fixed pairs, both halves hidden: a previous-position head forms by step 250
train --out $RUNS/D250 --init $RUNS/cur1/best --steps 1000 --stop-after 250 --warmup 50 --eval-every 250 \
    --seed 9 --name-part-masking 1.0 --fixed-pairs 1.0 \
    --tasks waiting_line/copy waiting_line/shuffle waiting_line/shuffle waiting_line/shuffle
# three quarters random pairs: the first-name look-up appears
train --out $RUNS/E400 --init $RUNS/D250 --steps 800 --stop-after 400 --warmup 20 --eval-every 200 \
    --seed 10 --name-part-masking 1.0 --fixed-pairs 0.25 --tasks $T
# random pairs only
train --out $RUNS/F --init $RUNS/E400 --steps 400 --warmup 20 --eval-every 200 \
    --seed 11 --name-part-masking 1.0 --tasks $T
train --out $RUNS/G400 --init $RUNS/F --steps 1200 --stop-after 400 --warmup 20 --eval-every 200 \
    --seed 12 --name-part-masking 1.0 --tasks $T
# the last-name direction: fixed pairs with last names hidden, then three quarters random pairs
train --out $RUNS/G3_100 --init $RUNS/G400 --steps 800 --stop-after 100 --warmup 20 --eval-every 100 \
    --heldout-per-task 8 --seed 15 --name-part-masking 1.0 --name-part-classes last --fixed-pairs 1.0 --tasks $T
train --out $RUNS/G4_300 --init $RUNS/G3_100 --steps 800 --stop-after 300 --warmup 20 --eval-every 100 \
    --heldout-per-task 8 --seed 16 --name-part-masking 1.0 --name-part-classes last --fixed-pairs 0.25 --tasks $T
# both halves, random pairs: both directions bind
train --out $RUNS/J200 --init $RUNS/G4_300 --steps 400 --stop-after 200 --warmup 20 --eval-every 100 \
    --heldout-per-task 8 --seed 17 --name-part-masking 1.0 --tasks $T
