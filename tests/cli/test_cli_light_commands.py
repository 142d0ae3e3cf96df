"""``dllm --help``, ``dllm --version``, ``dllm models`` and the help of the commands that decode
need no model, so they import no torch: each command's options are added when it is chosen
(``CommandParser.fill_later``), the names behind ``--policy``'s choices are read from the
registering decorators' source (the registries themselves are torch modules), ``--dtype``'s from
a module that imports torch only where it is used, and ``dllm.models``' exports load on first
use. Building the whole parser at start made each take seconds on a CPU, as long as a command
that runs a model; ``dllm generate --help`` took ~4 s for the registries' torch alone."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dllm

REPO = Path(__file__).resolve().parents[2]

# runs the ``dllm`` script's code and reports which heavy modules it imported, as the last line
MAIN_THEN_MODULES = """
import sys
from dllm.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as done:
    status = done.code
print(sorted(name for name in ("torch", "transformers") if name in sys.modules), status)
"""


def _dllm(*argv: str) -> tuple[str, str]:
    """The command's stdout without its last line, and that line (heavy modules imported, status)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", MAIN_THEN_MODULES, *argv], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *output, modules = done.stdout.splitlines()
    return "\n".join(output), modules


@pytest.mark.parametrize("argv, first_line", [
    (["--version"], f"dllm {dllm.__version__}"),
    (["--help"], "usage: dllm [-h]"),
    (["-h"], "usage: dllm [-h]"),
    (["models"], "name "),  # the bundled models' table: read from their files' headers, no torch
    (["generate", "--help"], "usage: dllm generate [-h]"),
    (["chat", "--help"], "usage: dllm chat [-h]"),
    (["serve", "--help"], "usage: dllm serve [-h]"),
    (["bench", "--help"], "usage: dllm bench [-h]"),
    (["bench", "throughput", "--help"], "usage: dllm bench throughput [-h]"),
    (["bench", "serve", "--help"], "usage: dllm bench serve [-h]"),
])
def test_commands_without_a_model_import_no_torch(argv, first_line):
    output, modules = _dllm(*argv)
    assert modules == "[] 0"
    assert output.startswith(first_line)


def test_help_still_lists_every_command():
    output, _ = _dllm("--help")
    for command in ("generate", "chat", "serve", "bench", "train-filter", "models"):
        assert f"    {command} " in output


def test_a_command_that_decodes_still_shows_the_registered_choices():
    output, modules = _dllm("generate", "--help")
    assert modules.endswith(" 0")
    assert "low_confidence" in output and "--policy RULE" in output


def test_choices_read_from_the_source_are_the_registries_names(monkeypatch):
    """The names ``policy_names`` reads without importing the registries are those the imported
    registries hold, kind by kind (a registration it cannot read would be a choice argparse refuses)."""
    from dllm.cache import CACHES
    from dllm.cli import options
    from dllm.cli.options import policy_names
    from dllm.models.placement import DTYPE_CHOICES, resolve_dtype
    from dllm.samplers import RULES, STOPPERS, STRATEGIES

    monkeypatch.setattr(options, "REGISTRY_TABLES", {})  # the source alone, not the registries imported here
    assert policy_names() == {"policy": sorted(RULES), "strategy": sorted(STRATEGIES), "stopper": sorted(STOPPERS),
                              "cache": sorted(CACHES)}
    assert {"threshold", "low_confidence"} <= set(RULES) and {"dual", "prefix"} <= set(CACHES)  # nothing empty
    assert [str(resolve_dtype(name)) for name in DTYPE_CHOICES[1:]] == ["torch.float32", "torch.bfloat16",
                                                                         "torch.float16"]


def test_a_name_registered_at_run_time_is_a_choice(monkeypatch):
    """A program that registers its own rule, strategy, stopper or cache and then runs the command
    line in its process (``main([... "--policy", "mine"])``) has it accepted, as when the choices
    were the imported registries; the decorators' source holds only the package's own names."""
    from dllm.cache.base import CACHE_ARGS, CACHES, register_cache
    from dllm.cli import build_parser
    from dllm.samplers.base import RULES, STOPPERS, STRATEGIES, register_rule, register_stopper, register_strategy

    for table, name in ((RULES, "own_rule"), (STRATEGIES, "own_strategy"), (STOPPERS, "own_stopper"),
                        (CACHES, "own_cache"), (CACHE_ARGS, "own_cache")):
        monkeypatch.setitem(table, name, None)  # undone after the test, whatever registers it
    for register, name in ((register_rule, "own_rule"), (register_strategy, "own_strategy"),
                           (register_stopper, "own_stopper"), (register_cache, "own_cache")):
        register(name)(type(name, (), {}))
    args = build_parser().parse_args(["generate", "hi", "--policy", "own_rule", "--strategy", "own_strategy",
                                      "--stopper", "own_stopper", "--cache", "own_cache"])
    assert (args.policy, args.strategy, args.stopper, args.cache) == ("own_rule", "own_strategy", "own_stopper",
                                                                      "own_cache")


def test_dir_of_dllm_models_lists_its_exports_before_they_load():
    """Tab completion and dir() see ``dllm.models``' names as the eager import listed them."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = "import sys, dllm.models as m; print(sorted(set(m.__all__) - set(dir(m))), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split("\n")[0] == "[] False", done.stderr


def test_submodules_of_dllm_models_are_reached_by_name_as_the_eager_package_had_them():
    """``import dllm`` then ``dllm.models.tiny`` / ``dllm.models.loading`` (README's spelling of the
    tiny checkpoint writer) worked while importing dllm loaded everything; the lazy package imports
    a named submodule on first use, and a name that is none stays an AttributeError."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = ("import dllm\n"
            "print(dllm.models.tiny.write_tiny_checkpoint.__name__, dllm.models.loading.__name__)\n"
            "try:\n    dllm.models.no_such_module\nexcept AttributeError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split("\n")[:2] == ["write_tiny_checkpoint dllm.models.loading", "refused"], done.stderr


def test_choices_come_from_the_registries_where_no_source_is_read(tmp_path):
    """An install that ships compiled modules without their ``.py`` sources has no decorators to
    read: the choices are then the registries' names (imported for it: a slower --help), never
    empty lists that would refuse every --policy and --cache. A fresh process, so that nothing
    imported the registries before."""
    code = ("import sys\nfrom dllm.cli import options\noptions.__file__ = sys.argv[1]\n"
            "names = options.policy_names()\nfrom dllm.cache import CACHES\n"
            "from dllm.samplers import RULES, STOPPERS, STRATEGIES\n"
            "print(names == {'policy': sorted(RULES), 'strategy': sorted(STRATEGIES), 'stopper': sorted(STOPPERS),"
            " 'cache': sorted(CACHES)}, min(map(len, names.values())) > 0)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cli" / "options.py")], env=env,
                          capture_output=True, text=True, timeout=300)  # a tree with no sources
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
