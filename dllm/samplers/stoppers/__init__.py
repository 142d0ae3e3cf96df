"""Stopping criteria: when to end a row early and what to commit then."""
from dllm.samplers.stoppers import eotp, prophet, sched  # noqa: F401  (registers)
