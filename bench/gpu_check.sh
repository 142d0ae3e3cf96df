#!/usr/bin/env bash
# One command that proves dllm on a CUDA machine within 8 minutes (see README, "On a GPU"): the GPU
# test subset, then a random LLaDA-8B's decode step per cache in each forward mode (eager,
# compile=True, CUDA graphs) against the weight-read floor; with FASTDLLM_DIR naming a Fast-dLLM
# checkout, the same model beside Fast-dLLM's LLaDA loops. --full adds the long runs.
# Uses the machine's own python and torch (override with PYTHON=...); installs nothing: the
# preflight names every missing module before anything imports dllm.
# Arguments go to `python -m dllm.bench.gpu_check` (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" dllm/bench/preflight.py "$@"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m dllm.bench.gpu_check "$@"
