#!/usr/bin/env bash
# dllm-waitingline-llada v2: the stage-5 weights taught to bind a person's two names, then the
# eleven tasks again (the model card's "v2" section). Three stages from the stage-5 weights,
# which git keeps at commit a8fe0c9; seeded, one thread (42 minutes on one core of a 2-core x86_64 CPU):
#   RUNS=runs/v2 bash bench/train_llada_v2.sh
# 1. fixed first-to-last-name pairs with one half of every name hidden and the last block frozen:
#    the pairs pay for a head that reads the previous position, and the frozen last block makes
#    it form below it (unfrozen, it forms in the last block, where nothing can use it and it dies
#    once the pairs go);
# 2. three quarters random pairs: the last block learns the look-up (find the visible half in the
#    prompt, copy its neighbour);
# 3. every task, the look-up tasks over-sampled, a share of rows with one half of the names hidden.
# Needs the ParallelBench data folder (DLLM_PARALLELBENCH_DIR, else ../shared/data/parallelbench).
set -euo pipefail
RUNS=${RUNS:-runs/v2}
PY=${PY:-python}
STAGE5=${STAGE5:-a8fe0c9}
mkdir -p "$RUNS/stage5"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  git show "$STAGE5:dllm/assets/models/dllm-waitingline-llada/$f" > "$RUNS/stage5/$f"
done
train() { "$PY" -m dllm.train.train_small --threads 1 "$@"; }
T="waiting_line/copy waiting_line/reverse waiting_line/shuffle waiting_line/shuffle waiting_line/shuffle waiting_line/insert_random"
train --out "$RUNS/pairs" --init "$RUNS/stage5" --steps 1000 --stop-after 250 --warmup 20 --eval-every 125 \
    --heldout-per-task 8 --seed 21 --name-part-masking 1.0 --fixed-pairs 1.0 --freeze-layers 3 --tasks $T
train --out "$RUNS/lookup" --init "$RUNS/pairs" --steps 800 --stop-after 400 --warmup 20 --eval-every 100 \
    --heldout-per-task 8 --seed 22 --name-part-masking 1.0 --fixed-pairs 0.25 --tasks $T
S="waiting_line/shuffle waiting_line/insert_random"
E="waiting_line/copy waiting_line/reverse waiting_line/insert_index waiting_line/remove_index
   waiting_line/replace_index waiting_line/remove_random waiting_line/replace_random waiting_line/replace_random"
train --out "$RUNS/all" --init "$RUNS/lookup" --steps 1000 --warmup 20 --lr 5e-4 --eval-every 250 \
    --heldout-per-task 16 --seed 31 --name-part-masking 0.5 \
    --tasks $E waiting_line/sort waiting_line/sort $S $S $S puzzle/latin_square_n4 puzzle/latin_square_n4
