"""argparse takes any unique prefix of a long flag, so a typo that happens to begin another flag
ran as that flag: ``dllm serve --prot 8000`` (``--port`` mistyped) was ``--protect-health-metrics``
and then an error about a model named '8000'. Such a prefix is now ambiguous and the error names
both flags; a prefix that is a typo of the flag it begins (``--step``, ``--max-token``) keeps its meaning."""
from __future__ import annotations

import pytest

from dllm.cli import build_parser
from dllm.cli.parser import one_edit_apart


@pytest.mark.parametrize("a, b, expected", [
    ("--prot", "--port", True),     # two neighbours swapped
    ("--sedd", "--seed", True),     # one letter changed
    ("--step", "--steps", True),    # one dropped
    ("--stepss", "--steps", True),  # one added
    ("--step", "--stop", True),
    ("--port", "--port", False),
    ("--pnrt", "--tnrp", False),    # two letters swapped but not neighbours
    ("--max-token", "--max-batch", False),
])
def test_one_edit_apart(a, b, expected):
    assert one_edit_apart(a, b) is expected and one_edit_apart(b, a) is expected


def test_a_prefix_that_is_a_typo_of_another_flag_is_ambiguous(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--prot", "8000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == ("dllm serve: error: ambiguous option: --prot could match --protect-health-metrics, --port "
                   "(see dllm serve --help)\n")


@pytest.mark.parametrize("argv, dest, value", [
    (["generate", "hi", "--step", "4"], "steps", 4),            # a typo of --steps too, never of --stop
    (["generate", "hi", "--max-token", "4"], "max_tokens", 4),
    (["generate", "--prompts", "p.txt"], "prompts_file", "p.txt"),  # bench throughput's name of the option
    (["serve", "--protect"], "protect_health_metrics", True),
])
def test_prefixes_of_one_flag_keep_their_meaning(argv, dest, value):
    assert getattr(build_parser().parse_args(argv), dest) == value
