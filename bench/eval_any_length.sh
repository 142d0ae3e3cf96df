#!/usr/bin/env bash
# Scores of a bundled model for its card (issue 32, item 3): one token per step, one block.
#   bash bench/eval_any_length.sh MODEL OUT [FRESH_LONG]
# official files, whole (100 per task), zero-shot and one-shot (the benchmark's protocol), at each
# task's own gen length (32; Latin square 64); fresh samples (seed 1,000,000, above every training
# seed), zero-shot, 100 per task at the own length and FRESH_LONG (default 50) per task on 64- and
# 128-token canvases. Writes OUT/{official_0shot,official_1shot,fresh,fresh_gen64,fresh_gen128}.
set -euo pipefail
MODEL=${1:?model name or directory}
OUT=${2:?output directory}
LONG=${3:-50}
PY=${PY:-python}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
pb() { "$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --policy low_confidence \
         --tokens-per-step 1 -q "$@"; }
pb --shots 0 --out "$OUT/official_0shot"
pb --shots 1 --out "$OUT/official_1shot"
pb --shots 0 --fresh-samples 100 --fresh-seed 1000000 --out "$OUT/fresh"
for G in 64 128; do
  pb --shots 0 --fresh-samples "$LONG" --fresh-seed 1000000 --gen-length "$G" --out "$OUT/fresh_gen$G"
done
