#!/usr/bin/env bash
# The bundled models retrained to answer at any gen length and in the one-shot format (issue 32,
# item 3; each model card's "any length" section). Seeded, one thread per run:
#   RUNS=runs/any bash bench/train_any_length.sh llada|dream|moe|bd
# Every run trains the v2 LLaDA stage's task mix ("all" in bench/train_llada_v2.sh) with half the
# batches at a drawn canvas length (8-128 answer tokens, end-of-text padded) and 40% in the
# benchmark's one-shot format. llada continues from the shipped v2 weights; dream starts from them
# too (--init-weights: same widths and token ids), so the look-up that binds a person's two names,
# which it never learnt on its own, comes with the weights; moe continues from its own (below).
# bd trains the block-diffusion model from the Dream v2 weights with every block scored per step
# (--objective block_copies, the two-copy layout), one-shot batches beside zero-shot ones, in two
# stages: 300 steps, then 1,000 more from that checkpoint at a lower rate.
# Needs the ParallelBench data folder (DLLM_PARALLELBENCH_DIR, else ../shared/data/parallelbench).
set -euo pipefail
RUNS=${RUNS:-runs/any}
PY=${PY:-python}
A=dllm/assets/models
# the weights each run starts from, as git keeps them (the shipped files are this script's output)
from_git() {  # from_git COMMIT MODEL: that commit's files of a bundled model in $RUNS/start/MODEL
  mkdir -p "$RUNS/start/$2"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    git show "$1:$A/$2/$f" > "$RUNS/start/$2/$f"
  done
}
LLADA_V2=${LLADA_V2:-feebcb4}
MOE_V1=${MOE_V1:-b960720}
DREAM_V2=${DREAM_V2:-c138bca}
S="waiting_line/shuffle waiting_line/insert_random"
TASKS="waiting_line/copy waiting_line/reverse waiting_line/insert_index waiting_line/remove_index
   waiting_line/replace_index waiting_line/remove_random waiting_line/replace_random waiting_line/replace_random
   waiting_line/sort waiting_line/sort $S $S $S puzzle/latin_square_n4 puzzle/latin_square_n4"
MIX="--long-canvas 0.5 --gen-lengths 8 128 --one-shot 0.4"
train() { "$PY" -m dllm.train.train_small --threads 1 $MIX "$@" --tasks $TASKS; }
case "${1:?llada, dream, moe or bd}" in
  llada) from_git "$LLADA_V2" dllm-waitingline-llada
         train --out "$RUNS/llada" --init "$RUNS/start/dllm-waitingline-llada" --steps 400 --batch-size 64 --warmup 20 --lr 5e-4 \
           --eval-every 100 --heldout-per-task 8 --seed 41 --name-part-masking 0.5 ;;
  dream) from_git "$LLADA_V2" dllm-waitingline-llada
         train --out "$RUNS/dream" --family dream --tokenizer $A/dllm-waitingline-dream \
           --init-weights "$RUNS/start/dllm-waitingline-llada" --steps 600 --batch-size 64 --warmup 30 --lr 1e-3 \
           --eval-every 200 --heldout-per-task 8 --seed 51 --name-part-masking 0.5 ;;
  moe)   # block-causal over blocks of 32 (the whole waiting-line answer is one block): it holds at any
         # length as bd does; it continues from its own weights with one-shot batches
         MIX="--one-shot 0.4"
         from_git "$MOE_V1" dllm-waitingline-moe
         train --out "$RUNS/moe" --init "$RUNS/start/dllm-waitingline-moe" --steps 300 --batch-size 64 --warmup 20 --lr 5e-4 \
           --eval-every 100 --heldout-per-task 8 --seed 71 ;;
  bd)    # block-causal over 8 from the answer start: no long canvases (it answers alike at any length)
         MIX="--one-shot 0.4"
         from_git "$DREAM_V2" dllm-waitingline-dream
         train --out "$RUNS/bd_a" --family fast_dllm_v2 --objective block_copies --bd-size 8 \
           --init-weights "$RUNS/start/dllm-waitingline-dream" --tokenizer $A/dllm-waitingline-bd \
           --steps 300 --batch-size 128 --warmup 20 --lr 5e-4 --eval-every 50 --heldout-per-task 8 --seed 71
         train --out "$RUNS/bd" --init "$RUNS/bd_a" --objective block_copies \
           --steps 1000 --batch-size 128 --warmup 20 --lr 3e-4 --eval-every 100 --heldout-per-task 8 --seed 72 ;;
  *) echo "unknown model $1: llada, dream, moe or bd" >&2; exit 2 ;;
esac
