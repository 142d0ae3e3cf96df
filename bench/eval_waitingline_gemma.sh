#!/usr/bin/env bash
# Scores of dllm-waitingline-gemma for its card (issue 41, item 4), under the family's defaults:
# strategy uniform, cache encoder, policy eb_sampler (entropy bound 0.1), canvases of 32 tokens,
# up to 32 denoising steps per canvas, the temperature schedule 0.8 -> 0.4 and the stable-and-
# confident stop; counter-based draws from the bench's seed.
#   bash bench/eval_waitingline_gemma.sh [MODEL] [OUT]
# Official files, whole (100 per task), zero-shot (the model's declared protocol) and one-shot
# (the benchmark's); fresh samples (seed 1,000,000, above every training seed), 100 per task,
# zero-shot. Writes OUT/{official_0shot,official_1shot,fresh}; bench/any_length_scores.py reads them.
set -euo pipefail
MODEL=${1:-dllm-waitingline-gemma}
OUT=${2:-runs/eval/gemma}
PY=${PY:-python}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
pb() { "$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --policy eb_sampler \
         --block-length 32 -q "$@"; }
pb --shots 0 --out "$OUT/official_0shot"
pb --shots 0 --fresh-samples 100 --fresh-seed 1000000 --out "$OUT/fresh"
pb --shots 1 --out "$OUT/official_1shot"
