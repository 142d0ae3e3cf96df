"""KV-cache modes, chosen by name (``cache="none" | ...``)."""
from dllm.cache import adaptive, block, encoder_prefix, none  # noqa: F401  (registers)
from dllm.cache.base import CACHES, CacheMode, make_cache, register_cache

__all__ = ["CACHES", "CacheMode", "make_cache", "register_cache"]
