"""Decoding strategies: how forwards are spent (plain, draft-and-verify, lookahead)."""
from dllm.samplers.strategies import apd, freedave, guided, lopa, plain, ssd, uniform  # noqa: F401  (registers)
