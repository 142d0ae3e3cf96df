"""dllm: a parallel-decoding runtime for masked-diffusion language models.

    model = dllm.load()                      # the bundled trained model, or a checkpoint dir
    out = model.generate("...", gen_length=32, policy="low_confidence")
    out.texts, out.token_ids, out.finish_reasons, out.stats
"""
from dllm.api.model import DiffusionLM, GenerationOutput, load
from dllm.engine.config import GenerationConfig


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
