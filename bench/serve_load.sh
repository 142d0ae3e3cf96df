#!/usr/bin/env bash
# `dllm bench serve` on the bundled model and on a ~100M-parameter random LLaDA (written in the
# original checkpoint layout to a scratch directory), results into bench/results/serve*/.
# SOAK=N adds an N-request soak run on the bundled model. Every run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
SCRATCH=${SCRATCH:-$(mktemp -d)}
RANDOM_MODEL="$SCRATCH/llada-100m-random"

# bundled model: no cache, prefix and dual cache, at rates up to where static batching queues
$PY -m dllm bench serve --out bench/results/serve_bundled --rates 2,4,6 --requests 60 --duration 60 \
  --timeout 300 --max-tokens 16,32 --block-length 8 --max-batch 8
$PY -m dllm bench serve --out bench/results/serve_bundled_prefix --rates 4,8,12 --requests 60 --duration 60 \
  --timeout 300 --max-tokens 16,32 --block-length 8 --cache prefix --max-batch 8
$PY -m dllm bench serve --out bench/results/serve_bundled_dual --rates 8,16,24 --requests 80 --duration 60 \
  --timeout 300 --max-tokens 16,32 --block-length 8 --cache dual --max-batch 8

if [ ! -f "$RANDOM_MODEL/config.json" ]; then
  $PY -c "
from dllm.models.tiny import write_tiny_checkpoint
write_tiny_checkpoint('$RANDOM_MODEL', 'llada', d_model=768, n_layers=14, n_heads=12, mlp_hidden=2048,
                      max_len=1024, seed=0)"
fi
$PY -m dllm bench serve --model "$RANDOM_MODEL" --out bench/results/serve_random100m --rates 0.1,0.3 \
  --requests 15 --duration 150 --timeout 900 --max-tokens 8 --block-length 4 --cache prefix --max-batch 4

# the server's defaults (no block_length sent: blocks of 32) against one block of each request's
# max_tokens (the old default), a mixed-length workload and an 8-token request behind a 384-token one
for block in server_block one_block; do
  extra=(); [ "$block" = one_block ] && extra=(--block-length max)
  $PY -m dllm bench serve --out "bench/results/serve_defaults/$block" --rates 1 --requests 12 --duration 20 \
    --timeout 300 --max-tokens 8,32,128,448 --behind 384,8 "${extra[@]}"
done

if [ -n "${SOAK:-}" ]; then
  $PY -m dllm bench serve --soak "$SOAK" --out bench/results/serve_soak --rates 2 --duration 1800 --max-queue 512 \
    --timeout 600 --max-tokens 8,16 --block-length 8 --cache prefix --max-batch 16 --cancel-prob 0.2
fi
