#!/usr/bin/env bash
# One command that proves dllm on a CUDA machine (see README, "On a GPU"): the test suite on the
# GPU, then random-weight models of real shapes measured against the device's roofline.
# Uses the machine's own python and torch (override with PYTHON=...); installs nothing: the
# preflight names every missing module before anything imports dllm.
# Arguments go to `python -m dllm.bench.gpu_check` (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" dllm/bench/preflight.py "$@"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m dllm.bench.gpu_check "$@"
