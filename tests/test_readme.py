"""The README lists every registered rule, strategy, stopper and cache by name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import dllm.engine.decoding  # noqa: F401  registers every policy and cache
from dllm.cache.base import CACHES
from dllm.samplers.base import RULES, STOPPERS, STRATEGIES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("kind,table", [("policy", RULES), ("strategy", STRATEGIES),
                                        ("stopper", STOPPERS), ("cache", CACHES)])
def test_readme_names_every_registered_policy(kind, table):
    line = next((l for l in README.splitlines() if f"(`{kind}`):" in l), None)
    assert line is not None, f"README has no list of {kind} names"
    block = re.split(r"\n- |\n\n", README[README.index(line):], maxsplit=1)[0]  # the bullet
    missing = [name for name in table if f"`{name}`" not in block]
    assert not missing, f"README's {kind} list lacks {missing}"


# --- the command-line examples, run as written -----------------------------------------------

CLI_BLOCK = README.split("## CLI", 1)[1].split("```")[1]


def _example(start: str, contains: str) -> list[str]:
    """The argv of the README example line that starts with ``start`` and holds ``contains``, as
    a POSIX shell splits it (its comment dropped)."""
    import shlex

    [line] = [l for l in CLI_BLOCK.splitlines() if l.startswith(start) and contains in l]
    return shlex.split(line.split("   #", 1)[0])[1:]  # without "dllm"


def test_readme_stop_example_stops_at_a_newline(capsys):
    import json

    from dllm.cli import main

    argv = _example("dllm generate ", "--stop")
    assert argv[argv.index("--stop") + 1] == "\\n"  # what the shell passes: a backslash and an n
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all("\n" not in r["text"] for r in rows)
    assert {r["finish_reason"] for r in rows} <= {"stop", "eos", "length"}


def test_readme_echo_example_prints_the_prompt_as_written(capsys):
    from dllm.cli import main

    argv = _example("dllm generate ", "--echo")
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(argv[1] + "\n")  # "prompt", not its chat template


def test_readme_chat_settings_examples_are_accepted(monkeypatch, capsys):
    import io

    from dllm.cli import main

    chat = README[README.index("`dllm chat` edits the line"):].split("\n\n", 1)[0]
    commands = re.findall(r"`(/set [^`]+|/show)`", chat)
    assert len(commands) >= 4, commands
    argv = _example("dllm chat ", "--block-length")
    argv = [a for a in argv if a not in ("--model", "PATH")]  # the bundled model
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join([*commands, "Copy: Ann Lee", "/exit"]) + "\n"))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "error" not in err and err.count("(set ") == len([c for c in commands if c.startswith("/set")])
    assert "max_tokens=32" in err  # /show after /set max-tokens=32


def _commands() -> dict[str, set[str]]:
    """``"generate"``, ``"bench serve"``, ... -> the option strings that command takes."""
    import argparse

    from dllm.cli.main import build_parser

    found: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    key = f"{path} {name}".strip()
                    found[key] = {o for a in command._actions for o in a.option_strings}
                    walk(command, key)

    walk(build_parser(), "")
    return found


def unknown_cli_flags(block: str, commands: dict[str, set[str]]) -> list[str]:
    """Flags on the block's ``dllm ...`` lines (``torchrun ... -m dllm ...``, ``VAR=x dllm ...``
    too) that their command does not take, as ``"command --flag"``."""
    bad = []
    for line in block.splitlines():
        match = re.search(r"(?:^|\s)dllm ((?:bench )?[a-z-]+)(.*)", line.split("   #", 1)[0])
        if match and match.group(1) in commands:
            flags = re.findall(r"(?<![\w-])--[a-z][\w-]*", match.group(2))
            bad += [f"{match.group(1)} {f}" for f in flags if f not in commands[match.group(1)]]
    return bad


def test_readme_cli_examples_use_flags_their_commands_take():
    commands = _commands()
    assert {"generate", "chat", "serve", "models", "bench parallelbench", "bench throughput"} <= set(commands)
    blocks = README.split("```")[1::2]
    assert CLI_BLOCK in blocks and sum("dllm serve" in b for b in blocks) >= 2  # every code block
    assert unknown_cli_flags("\n".join(blocks), commands) == []


def test_cli_flag_check_sees_a_flag_the_command_lacks():
    commands = _commands()
    block = "dllm serve --model PATH --gen-length 8   # x\ntorchrun --nproc_per_node=2 -m dllm bench throughput --out x --rates 1"
    assert unknown_cli_flags(block, commands) == ["bench throughput --rates"]


def _names_in_sentence(anchor: str) -> list[str]:
    """The backticked names of the README sentence that holds ``anchor`` (up to its full stop)."""
    start = README.index(anchor)
    return re.findall(r"`(\w+)`", README[start:README.index(". ", start)])


def test_readme_lists_every_tool_call_parser_and_tiny_family():
    from dllm.api.tool_parsers import NAMES
    from dllm.models.registry import FAMILIES

    assert set(NAMES) <= set(_names_in_sentence("`--tool-call-parser NAME`"))
    assert set(FAMILIES) <= set(_names_in_sentence("write_tiny_checkpoint(dir, family)"))
