"""dllm: a parallel-decoding runtime for masked-diffusion language models.

    model = dllm.load()                      # the bundled trained model, or a checkpoint dir
    out = model.generate("...", gen_length=32, policy="low_confidence")
    out.texts, out.token_ids, out.finish_reasons, out.stats
"""
from importlib import import_module
from importlib.util import find_spec

# what ``dllm.NAME`` gives, imported on first use: torch loads then, not at ``import dllm``
_EXPORTS = {"DiffusionLM": "dllm.api.model", "GenerationOutput": "dllm.api.model", "load": "dllm.api.model",
            "GenerationConfig": "dllm.engine.config"}


def __getattr__(name: str):
    """``dllm.load`` and the other exports, and subpackages (``dllm.api``), imported when first named.

    The ``dllm`` command imports this package before its Ctrl-C handler is in place, so importing
    torch here made a Ctrl-C in the first seconds of every command a traceback."""
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    elif not name.startswith("_") and find_spec(f"dllm.{name}") is not None:
        value = import_module(f"dllm.{name}")
        for module in _EXPORTS.values():  # as the eager ``import dllm`` left it: ``dllm.api.model`` reachable
            if module.startswith(f"dllm.{name}."):
                import_module(module)
    else:
        raise AttributeError(f"module 'dllm' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def _version() -> str:
    """The installed package's version; in a source checkout run without installing, pyproject's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dllm")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        try:
            pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, ValueError):
            return "0+unknown"


__version__ = _version()
__all__ = ["DiffusionLM", "GenerationConfig", "GenerationOutput", "__version__", "load"]
