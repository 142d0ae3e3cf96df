#!/usr/bin/env bash
# The bundled models retrained to answer at any gen length and in the one-shot format (issue 32,
# item 3; each model card's "any length" section). Seeded, one thread per run:
#   RUNS=runs/any bash bench/train_any_length.sh llada|dream|bd
# Every run trains the v2 LLaDA stage's task mix ("all" in bench/train_llada_v2.sh) with half the
# batches at a drawn canvas length (8-128 answer tokens, end-of-text padded) and 40% in the
# benchmark's one-shot format. llada continues from the shipped v2 weights; dream and bd start
# from them too (--init-weights: same widths and token ids), so the look-up that binds a person's
# two names, which neither model learnt on its own, comes with the weights.
# Needs the ParallelBench data folder (DLLM_PARALLELBENCH_DIR, else ../shared/data/parallelbench).
set -euo pipefail
RUNS=${RUNS:-runs/any}
PY=${PY:-python}
A=dllm/assets/models
S="waiting_line/shuffle waiting_line/insert_random"
TASKS="waiting_line/copy waiting_line/reverse waiting_line/insert_index waiting_line/remove_index
   waiting_line/replace_index waiting_line/remove_random waiting_line/replace_random waiting_line/replace_random
   waiting_line/sort waiting_line/sort $S $S $S puzzle/latin_square_n4 puzzle/latin_square_n4"
MIX="--long-canvas 0.5 --gen-lengths 8 128 --one-shot 0.4"
train() { "$PY" -m dllm.train.train_small --threads 1 $MIX "$@" --tasks $TASKS; }
case "${1:?llada, dream or bd}" in
  llada) train --out "$RUNS/llada" --init $A/dllm-waitingline-llada --steps 400 --warmup 20 --lr 5e-4 \
           --eval-every 100 --heldout-per-task 8 --seed 41 --name-part-masking 0.5 ;;
  dream) train --out "$RUNS/dream" --family dream --tokenizer $A/dllm-waitingline-dream \
           --init-weights $A/dllm-waitingline-llada --steps 1000 --batch-size 64 --warmup 30 --lr 1e-3 \
           --eval-every 250 --heldout-per-task 8 --seed 51 --name-part-masking 0.5 ;;
  bd)    train --out "$RUNS/bd" --family fast_dllm_v2 --bd-size 8 --tokenizer $A/dllm-waitingline-bd \
           --init-weights $A/dllm-waitingline-llada --steps 1000 --batch-size 64 --warmup 30 --lr 1e-3 \
           --eval-every 250 --heldout-per-task 8 --seed 61 ;;
  *) echo "unknown model $1: llada, dream or bd" >&2; exit 2 ;;
esac
