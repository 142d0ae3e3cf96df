"""The command line: ``dllm generate | chat | serve | models | bench ... | train-filter``.

main.py builds the parser and runs a command; options.py, prompts.py and output.py are the
helpers every command shares; chat.py, demo.py and models.py are commands of their own.
"""
try:
    from dllm.cli.main import build_parser, main
except KeyboardInterrupt:  # Ctrl-C while torch imports: the ``dllm`` script imports this before main() runs
    import sys

    print("dllm: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

__all__ = ["build_parser", "main"]
