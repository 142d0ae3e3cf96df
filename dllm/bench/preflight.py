"""Check, before any work, that every module the GPU check needs imports, and name what is
missing.

A machine lent for a GPU check has its own torch and no package registry: nothing is installed
from here; the message says what to install where one can. Runnable as a script that imports
nothing of dllm (``python dllm/bench/preflight.py [--no-tests] [--device D]``), so
``bench/gpu_check.sh`` names a missing torch or transformers before ``import dllm`` would fail
on it with a traceback.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

# module -> (pip package, what needs it)
CORE = {"torch": ("torch", "everything"), "transformers": ("transformers", "tokenizers (import dllm)"),
        "tokenizers": ("tokenizers", "tokenizers"), "safetensors": ("safetensors", "checkpoints (import dllm)")}
SUITE = {"pytest": ("pytest", "the test suite"), "jinja2": ("jinja2", "chat templates in the suite"),
         "tqdm": ("tqdm", "progress bars in the suite"), "yaml": ("pyyaml", "task files in the suite")}
# only the whole suite (--full, or --pytest-args naming more than the GPU subset) imports these: its
# server and lm-eval tests do. A GPU image may lack them or a dependency of theirs (the lent H100 had
# no opentelemetry for fastapi 0.165, no httpx2 for openai 3.x, no lm-eval), and pytest would stop at
# collection naming one at a time; here each one is named at once. The default GPU subset needs none.
WHOLE_SUITE = {"fastapi": ("fastapi", "the server tests"), "uvicorn": ("uvicorn", "the server tests"),
               "openai": ("openai", "the server tests with the real client"),
               "lm_eval": ("lm-eval", "the lm-eval tests")}
CUDA = {"triton": ("triton", "the confidence_stats kernel on CUDA (or set DLLM_KERNELS=torch)")}


class MissingModules(RuntimeError):
    """Modules a command needs that do not import; the message lists them all."""


@dataclass(frozen=True, slots=True)
class Preflight:
    versions: dict[str, str]  # module -> version ("?" when it has no __version__)


def check_imports(*, tests: bool, cuda: bool, whole_suite: bool = False) -> Preflight:
    """Import every needed module; raise MissingModules naming each one that fails, and why.
    ``whole_suite``: the test stage may run more than the GPU subset, so the server and lm-eval
    tests' modules are needed too."""
    needed = {**CORE, **(SUITE if tests else {}), **(WHOLE_SUITE if tests and whole_suite else {}),
              **(CUDA if cuda else {})}
    versions, missing = {}, []
    for module, (package, purpose) in needed.items():
        try:
            versions[module] = str(getattr(importlib.import_module(module), "__version__", "?"))
        except Exception as err:  # an ImportError, or a broken install raising anything else
            missing.append(f"{module} (pip package {package!r}, for {purpose}): {type(err).__name__}: {err}")
    if missing:
        names = {m.split()[0] for m in missing}
        hint = (" (or skip the suite with --no-tests)" if names & set(SUITE)
                else " (or run the GPU subset: no --full, no --pytest-args)" if names & set(WHOLE_SUITE) else "")
        raise MissingModules("these modules do not import:\n  " + "\n  ".join(missing)
                             + "\nInstall them where a package registry is reachable (pip install -e "
                               f"'.[test]' from the checkout){hint}; this command never installs anything.")
    return Preflight(versions=versions)


def wants_cuda(device: str) -> bool:
    """Whether ``--device`` means a GPU ("auto": $DLLM_DEVICE when set, as ``device="auto"``
    reads it, else whether this torch sees one)."""
    if device == "auto":
        device = os.environ.get("DLLM_DEVICE", "").strip() or "auto"
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    try:
        import torch
    except Exception:
        return False  # reported as missing by check_imports
    return torch.cuda.is_available()


def whole_suite(argv: list[str]) -> bool:
    """Whether gpu_check's test stage may run more than its GPU subset (``--full``, or any
    ``--pytest-args``: what they select is not read here)."""
    return any(a == "--full" or a == "--pytest-args" or a.startswith("--pytest-args=") for a in argv)


def device_option(argv: list[str]) -> str:
    """``--device``'s value as gpu_check's parser reads it: ``--device D`` or ``--device=D``, the
    last one given, else "auto"."""
    device = "auto"
    for i, arg in enumerate(argv):
        if arg == "--device" and i + 1 < len(argv):
            device = argv[i + 1]
        elif arg.startswith("--device="):
            device = arg.split("=", 1)[1]
    return device


def main(argv: list[str]) -> int:
    device = device_option(argv)
    try:
        check_imports(tests="--no-tests" not in argv, cuda=wants_cuda(device), whole_suite=whole_suite(argv))
    except MissingModules as err:
        print(f"gpu_check: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))  # dllm/bench must not shadow installed modules
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    raise SystemExit(main(sys.argv[1:]))
