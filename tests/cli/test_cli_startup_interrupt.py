"""``import dllm`` does not import torch (``dllm.load`` and the other exports load on first use), so
the ``dllm`` script, which imports ``dllm.cli`` before ``main()`` can catch anything, ends a Ctrl-C
during its first seconds (torch importing) with one ``dllm generate: interrupted`` line and status
130, as at any later moment; it was a traceback through torch's import. (Torch is imported once
the command is parsed, since its options' choices are read without it: the line names the command.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# a Ctrl-C that lands while torch imports, then what the installed ``dllm`` script runs
INTERRUPTED_IMPORT = """
import sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise KeyboardInterrupt

sys.meta_path.insert(0, CtrlC())
from dllm.cli import main
sys.exit(main())
"""


def _python(code: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=300)


def test_ctrl_c_while_torch_imports_is_one_line_and_status_130():
    done = _python(INTERRUPTED_IMPORT, "generate", "hi")
    assert (done.returncode, done.stderr, done.stdout) == (130, "dllm generate: interrupted\n", "")


def test_import_dllm_leaves_torch_to_the_first_use():
    done = _python("import sys, dllm; print('torch' in sys.modules, dllm.__version__ != '');"
                   "print(dllm.load.__module__, dllm.GenerationConfig.__module__, 'torch' in sys.modules)")
    assert done.stdout.split() == ["False", "True", "dllm.api.model", "dllm.engine.config", "True"], done.stderr


def test_the_package_reads_as_before():
    import dllm
    from dllm import DiffusionLM, GenerationConfig, GenerationOutput, load

    assert {"DiffusionLM", "GenerationConfig", "GenerationOutput", "load"} <= set(dir(dllm))
    assert (dllm.load, dllm.DiffusionLM, dllm.GenerationConfig, dllm.GenerationOutput) == (
        load, DiffusionLM, GenerationConfig, GenerationOutput)
    assert dllm.api.model.load is load  # a subpackage named through the package, as the eager import left it
    done = _python("import dllm; dllm.api.model.default_model_path()")
    assert done.returncode == 0, done.stderr
    try:
        dllm.no_such_name
    except AttributeError as err:
        assert "no attribute 'no_such_name'" in str(err)
    else:
        raise AssertionError("an unknown name was given a value")
