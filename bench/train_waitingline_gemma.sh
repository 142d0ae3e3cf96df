#!/usr/bin/env bash
# dllm-waitingline-gemma (issue 41, item 4): a uniform-state DiffusionGemma-layout model trained
# from scratch by train_small's --objective uniform_state (dllm/train/uniform_state.py), in two
# seeded stages on one thread, as the LLaDA model was: copy + reverse first (where the masked
# models left the "format but no content" plateau), then the v2 "all" task mix of
# bench/train_any_length.sh (zero-shot prompts, each task's own gen length). Canvases of 32 tokens
# (the waiting-line answers are one canvas, the Latin square's two); the bundled tokenizer.
#   RUNS=runs/gemma bash bench/train_waitingline_gemma.sh      # $RUNS/all is the shipped model
# STEPS1 / STEPS2 size the stages (defaults: the shipped run's). Needs the ParallelBench data
# folder (DLLM_PARALLELBENCH_DIR, else ../shared/data/parallelbench).
set -euo pipefail
RUNS=${RUNS:-runs/gemma}
PY=${PY:-python}
STEPS1=${STEPS1:-500}
STEPS2=${STEPS2:-1500}
A=dllm/assets/models
S="waiting_line/shuffle waiting_line/insert_random"
TASKS="waiting_line/copy waiting_line/reverse waiting_line/insert_index waiting_line/remove_index
   waiting_line/replace_index waiting_line/remove_random waiting_line/replace_random waiting_line/replace_random
   waiting_line/sort waiting_line/sort $S $S $S puzzle/latin_square_n4 puzzle/latin_square_n4"
train() { "$PY" -m dllm.train.train_small --threads 1 --family diffusion_gemma --objective uniform_state \
            --batch-size 64 --heldout-per-task 8 "$@"; }
train --out "$RUNS/copy" --tokenizer $A/dllm-waitingline-llada --bd-size 32 --sliding-window 128 \
  --d-model 128 --n-layers 4 --n-heads 4 --n-kv-heads 2 --mlp-hidden 256 --n-experts 4 --top-k 2 --expert-hidden 32 \
  --steps "$STEPS1" --warmup 50 --eval-every 250 --seed 51 --tasks waiting_line/copy waiting_line/reverse
train --out "$RUNS/all" --init "$RUNS/copy" --steps "$STEPS2" --warmup 50 --eval-every 300 --seed 52 --tasks $TASKS
