"""Model families, checkpoint loading and tiny random checkpoints.

The names below load on first use (PEP 562), as ``dllm``'s do: ``dllm models`` reads the bundled
models' metadata (``dllm.models.bundled``) without the torch and transformers that loading needs.
"""
from importlib import import_module
from importlib.util import find_spec

_EXPORTS = {
    "ArchConfig": "config", "CheckpointError": "loading", "load_model": "loading", "FAMILIES": "registry",
    "Family": "registry", "family_for": "registry", "register_family": "registry", "load_tokenizer": "tokenizer",
    "DiffusionTransformer": "transformer",
}


def __getattr__(name: str):
    """An export, imported from its module when first named; a submodule (``dllm.models.tiny``)
    likewise, as the eager package had them."""
    if name in _EXPORTS:
        value = getattr(import_module(f"dllm.models.{_EXPORTS[name]}"), name)
    elif not name.startswith("_") and find_spec(f"dllm.models.{name}") is not None:
        value = import_module(f"dllm.models.{name}")
    else:
        raise AttributeError(f"module 'dllm.models' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "ArchConfig", "CheckpointError", "DiffusionTransformer", "FAMILIES", "Family",
    "family_for", "load_model", "load_tokenizer", "register_family",
]
