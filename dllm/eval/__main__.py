"""``python -m dllm.eval``: lm-eval's command line with the ``dllm`` model registered.

Takes exactly lm-eval's flags. With ``--output_path OUT`` and no ``save_dir`` in model_args,
the per-request records and ``dllm_speed.json`` go to OUT, next to lm-eval's results, and a
rerun with the same OUT skips the requests already answered. With ``--model dllm`` and no
``--device`` (on the command line or in ``--config``'s YAML), the device is dllm's ``auto``
rather than lm-eval's own default ``cuda:0`` (``default_device_auto``).
"""
from __future__ import annotations

import argparse
import sys


def _with_save_dir(argv: list[str]) -> list[str]:
    """``argv`` with ``save_dir=OUT`` appended to the model args when --output_path is given."""
    output = None
    for i, arg in enumerate(argv):
        if arg in ("--output_path", "-o") and i + 1 < len(argv):
            output = argv[i + 1]
        elif arg.startswith("--output_path="):
            output = arg.split("=", 1)[1]
    if output is None or any("save_dir=" in arg or '"save_dir"' in arg for arg in argv):  # key=value or JSON
        return argv
    return [*argv, "--model_args", f"save_dir={output}"]


def default_device_auto(args: argparse.Namespace) -> None:
    """Set ``args.device = "auto"`` for the dllm model when the user gave no device.

    lm-eval's ``run`` parses ``--device`` with default None and then fills it from its config's
    default, ``cuda:0``, so by the time the model is built an implicit device cannot be told from
    an explicit one; here it still can. A device in ``--config``'s YAML counts as given."""
    if getattr(args, "command", None) != "run" or getattr(args, "device", "") is not None:
        return
    yaml_config: dict = {}
    if getattr(args, "config", None):
        from lm_eval.config.evaluate_config import EvaluatorConfig

        yaml_config = EvaluatorConfig.load_yaml_config(args.config)
    if "device" not in yaml_config and (args.model or yaml_config.get("model")) == "dllm":
        args.device = "auto"


def check_model_args(args: argparse.Namespace) -> None:
    """``--model dllm``'s ``--model_args``, with the flags lm-eval hands the model, read as the model
    will read them, before lm-eval loads any task: a misspelt key or a bad value is refused at once,
    not after the tasks' datasets have loaded (half a minute for gsm8k here) and as a traceback."""
    if getattr(args, "command", None) != "run" or getattr(args, "model", None) != "dllm":
        return
    from dllm.eval.model_args import merge_flags, parse_model_args

    model_args = getattr(args, "model_args", None) or {}
    if isinstance(model_args, str):
        from lm_eval.utils import simple_parse_args_string

        model_args = simple_parse_args_string(model_args)
    flags = {key: getattr(args, key, None) for key in ("batch_size", "max_batch_size", "device")}
    parse_model_args(merge_flags(model_args, flags))


def main() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        sys.exit("dllm: error: lm-eval is not installed; pip install 'dllm[eval]'")
    import dllm.eval.lm_eval  # noqa: F401  (registers the "dllm" model)
    from lm_eval._cli import HarnessCLI  # what lm_eval.__main__.cli_evaluate runs
    from lm_eval.utils import setup_logging

    sys.argv = [sys.argv[0], *_with_save_dir(sys.argv[1:])]
    setup_logging()
    parser = HarnessCLI()
    args = parser.parse_args()
    default_device_auto(args)
    try:
        check_model_args(args)
    except ValueError as err:  # OptionTypeError included
        print(f"python -m dllm.eval: error: {err}", file=sys.stderr)
        sys.exit(2)
    parser.execute(args)
    from dllm.parallel.dist import leave_together

    leave_together()


if __name__ == "__main__":
    main()
