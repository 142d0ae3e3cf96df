"""``dllm generate --regex | --choice | --json-schema FILE | --grammar FILE``: structured output on
the command line, checked before the model loads (a bad pattern, an unreadable or invalid schema,
a grammar that does not parse)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_structured_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("structured output (one of; every answer a word of it, ending within --max-tokens)")
    g.add_argument("--regex", metavar="PATTERN", default=None,
                   help="each whole answer matches PATTERN (Python's regex syntax, no lookarounds)")
    g.add_argument("--choice", nargs="+", metavar="TEXT", default=None, help="each answer is one of TEXT ...")
    g.add_argument("--json-schema", metavar="FILE", default=None,
                   help="each answer is a JSON instance of the JSON schema in FILE")
    g.add_argument("--grammar", metavar="FILE", default=None,
                   help="each answer is a sentence of the Lark EBNF grammar in FILE (start rule 'start')")


def constraint_spec(args: argparse.Namespace, config=None):
    """The ConstraintSpec the options ask for (None: free answers); with ``config``, a decoding
    the constraint does not cover is refused here, before the model loads."""
    from dllm.samplers.constraints import ConstraintSpec, check_supported

    schema = None
    if args.json_schema is not None:
        path = Path(args.json_schema)
        if not path.is_file():
            raise FileNotFoundError(f"--json-schema {path}: no such file; give a file holding a JSON schema")
        try:
            schema = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark dropped
        except json.JSONDecodeError as err:
            raise ValueError(f"--json-schema {path} is not JSON ({err}); give a file holding a JSON schema") from err
    grammar = None
    if args.grammar is not None:
        path = Path(args.grammar)
        if not path.is_file():
            raise FileNotFoundError(f"--grammar {path}: no such file; give a file holding a Lark grammar")
        grammar = path.read_text(encoding="utf-8-sig")
    spec = ConstraintSpec.parse(regex=args.regex, choice=args.choice, json_schema=schema, grammar=grammar)
    if spec is not None and config is not None:
        check_supported(config)
    return spec


def bounded_length(args: argparse.Namespace, model, request, config):
    """(request, config) with the answer length of a constraint whose words have a longest one,
    when neither --max-tokens nor --gen-length was given (``api.structured.default_max_tokens``:
    ``--choice yes no`` decodes a few positions, not the default canvas)."""
    import dataclasses

    from dllm.api.request import merge_config
    from dllm.api.structured import default_max_tokens
    from dllm.cli.options import given_block

    given = request.max_tokens is not None or "gen_length" in getattr(args, "given_options", ())
    bounded = default_max_tokens(model, constraint_spec(args), request.max_tokens, given, config.gen_length)
    if bounded == request.max_tokens:
        return request, config
    return dataclasses.replace(request, max_tokens=bounded), merge_config(config, given_block(args), bounded,
                                                                         model=model.model)


def row_constraint_of(args: argparse.Namespace, model, request, config):
    """Every row's constraint for ``model`` (None: free), refused with its reason when the
    decoding or the request (stops, a too short --max-tokens) cannot honour it."""
    from dllm.api.structured import row_constraint

    return row_constraint(model, constraint_spec(args), request.stops, request.max_tokens, config)
