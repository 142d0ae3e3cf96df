"""Every default a ``--help`` prints is written as a person types that option: an option that
reads one comma-separated word (``dllm bench serve --rates 0.5,1,2``) shows its default list as
such a word, one that takes several words shows them space-separated, and what is shown parses
back to the default."""
from __future__ import annotations

import argparse
import re

from dllm.cli import build_parser
from dllm.cli.main import _subcommands


def _list_defaults(parser: argparse.ArgumentParser):
    for command in _subcommands(parser):
        for action in command._actions:
            if action.option_strings and isinstance(action.default, list) and action.help is not argparse.SUPPRESS:
                yield command, action


def test_list_defaults_are_shown_as_typed_and_parse_back():
    parser = build_parser()
    checked = 0
    for command, action in _list_defaults(parser):
        text = " ".join(command._get_formatter()._format_action(action).split())  # this option's entry
        flag = action.option_strings[-1]
        shown = re.search(r"\(default: ([^)]*)\)", text)
        assert shown is not None, (command.prog, flag, text)
        value = shown.group(1)
        assert "[" not in value and "'" not in value, (command.prog, flag, value)
        words = value.split() if action.nargs in ("+", "*") else [value]
        typed = [action.type(w) if action.type else w for w in words]
        parsed = typed if action.nargs in ("+", "*") else typed[0]
        assert parsed == action.default, (command.prog, flag, value)
        checked += 1
    assert checked >= 3  # bench serve's --rates, --modes and --max-tokens at least
