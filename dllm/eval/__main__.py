"""``python -m dllm.eval``: lm-eval's command line with the ``dllm`` model registered.

Takes exactly lm-eval's flags. With ``--output_path OUT`` and no ``save_dir`` in model_args,
the per-request records and ``dllm_speed.json`` go to OUT, next to lm-eval's results, and a
rerun with the same OUT skips the requests already answered.
"""
from __future__ import annotations

import sys


def _with_save_dir(argv: list[str]) -> list[str]:
    """``argv`` with ``save_dir=OUT`` appended to the model args when --output_path is given."""
    output = None
    for i, arg in enumerate(argv):
        if arg in ("--output_path", "-o") and i + 1 < len(argv):
            output = argv[i + 1]
        elif arg.startswith("--output_path="):
            output = arg.split("=", 1)[1]
    if output is None or any("save_dir=" in arg for arg in argv):
        return argv
    return [*argv, "--model_args", f"save_dir={output}"]


def main() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        sys.exit("dllm: error: lm-eval is not installed; pip install 'dllm[eval]'")
    import dllm.eval.lm_eval  # noqa: F401  (registers the "dllm" model)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = [sys.argv[0], *_with_save_dir(sys.argv[1:])]
    cli_evaluate()
    from dllm.parallel.dist import leave_together

    leave_together()


if __name__ == "__main__":
    main()
