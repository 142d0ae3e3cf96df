"""Command line: ``dllm generate | chat | serve | models | bench parallelbench | bench throughput | bench serve | train-filter``.

Results go to stdout; diagnostics go through ``logging`` to stderr (-v / -q, on every command);
bad input is one ``dllm <command>: error: ...`` line and exit status 2, before any model work
(``dllm.cli.parser``); Ctrl-C is one ``interrupted`` line and exit status 130.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Sequence

import dllm

from dllm.api.inputs import check_text
from dllm.cli.options import (
    HelpFormatter, add_generation_options, add_model_argument, add_model_options, add_request_options,
    add_tensor_parallel_option, add_verbosity_options,
    generation_config, given_block, length_flag, load_from_args, model_block, output_request, positive_int,
    refuse_idle_pipeline_options,
)
from dllm.cli.parser import EXIT_USAGE, CommandParser, name_command_parsers
from dllm.cli.parser import subcommands as _subcommands  # tests walk the commands by this name
from dllm.cli.output import LOGGER_NAME, configure_logging
from dllm.cli.progress import answer_bar, describe, generate_batch
from dllm.cli.prompts import (
    STDIN, PromptLine, check_prompt_lengths, echo_text, read_prompts, read_stdin_prompt, refuse_messages_under_raw,
    with_system,
)
from dllm.cli.structured import add_structured_options, bounded_length, constraint_spec, row_constraint_of

log = logging.getLogger(LOGGER_NAME)

EXIT_INTERRUPTED = 128 + 2  # Ctrl-C, as SIGINT
EXIT_BROKEN_PIPE = 128 + 13  # the reader went away (``dllm generate | head``), as SIGPIPE


def cmd_generate(args: argparse.Namespace) -> int:
    config = generation_config(args)  # validate before loading anything
    refuse_idle_pipeline_options(args)
    request = output_request(args)
    constraint_spec(args, config)
    prompts = _generate_prompts(args)
    if args.tensor_parallel == 1:
        return _generate(args, config, prompts, print_=print)
    from dllm.parallel.dist import leave_together, run_rank
    from dllm.parallel.groups import check_layout

    check_layout(args.tensor_parallel, whole_world=True)  # one copy decodes every prompt (bench throughput: many)

    # every rank decodes every prompt with its share of the model; rank 0 prints
    run_rank(lambda rank: _generate(args, config, prompts, print_=print if rank == 0 else _silent))
    leave_together()
    return 0


def _silent(*_args, **_kwargs) -> None:
    pass


def _generate(args: argparse.Namespace, config, prompts: list[PromptLine], print_) -> int:
    from tqdm import tqdm

    request = output_request(args)
    model = load_from_args(args)
    request = output_request(args, model.model.config.vocab_size)
    config = model_block(args, model, config, request.max_tokens)
    request, config = bounded_length(args, model, request, config)
    chat = False if args.raw else None
    if args.system is not None:
        from dllm.cli.chat import require_chat_template

        require_chat_template(model, "--system")
    ids = check_prompt_lengths(model, with_system(prompts, args.system), config, chat, length_flag(args))
    constraint = row_constraint_of(args, model, request, config)
    log.debug("%s", describe(model, config))
    log.debug("decoding %d prompt(s) in batches of %d", len(ids), args.batch_size)
    bar = answer_bar(len(ids) * request.n, config, request, quiet=args.quiet or print_ is not print)
    for start in range(0, len(ids), args.batch_size):
        out = generate_batch(model, ids[start : start + args.batch_size], config, request, bar, constraint,
                             given_block(args))
        with tqdm.external_write_mode(file=sys.stderr):
            for row, (text, reason, stats) in enumerate(zip(out.texts, out.finish_reasons, out.stats)):
                sample = {"sample": row % request.n} if request.n > 1 else {}
                if args.echo and not request.echo:  # as written; request.echo: as the model saw it
                    text = echo_text(prompts[start + row // request.n].prompt, raw=args.raw) + text
                print_(json.dumps({"text": text, "finish_reason": reason, **sample, **stats}) if args.json else text,
                       flush=True)
                if not args.json and print_ is print:
                    tps = stats["tokens"] / stats["seconds"] if stats["seconds"] > 0 else float("inf")
                    log.info("[%s | NFE %d | TPF %.2f | %.1f tokens/s on %s]", reason, stats["nfe"], stats["tpf"],
                             tps, model.model.device)
    bar.close()
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from dllm.api.request import DEFAULT_BLOCK_LENGTH
    from dllm.cli.chat import HELP, banner, redraws_in_place, require_chat_template, run_chat
    from dllm.cli.chat_context import check_answer_room
    from dllm.cli.chat_settings import ChatSettings
    from dllm.engine.model_fit import check_model_fit

    config = generation_config(args)  # validate before loading anything
    check_system(args)
    model = load_from_args(args)
    require_chat_template(model, "dllm chat")
    config = model_block(args, model, config, args.max_tokens)
    # blocks of 32 as the server decodes them (an answer that ends early stops after its block), unless --block-length
    default_block = None if args.block_length is not None else DEFAULT_BLOCK_LENGTH
    merged = ChatSettings(config, given_block(args), args.max_tokens, model.model, default_block).config()
    check_model_fit(model.model, merged)  # not at each turn
    flag = length_flag(args)
    check_answer_room(model, merged, f"{flag} {merged.gen_length if args.max_tokens is None else args.max_tokens}",
                      f"{flag} ", args.system)
    interactive = sys.stdin.isatty()
    live = redraws_in_place(sys.stdout) if args.live is None else args.live
    log.debug("%s", describe(model, merged))
    if interactive:
        _line_editing()
        log.info("%s\n%s", banner(model), HELP)
    return run_chat(model, config, live=live, out=sys.stdout, max_tokens=args.max_tokens, interactive=interactive,
                    read_line=lambda: ask("> " if interactive else ""),
                    read_more=lambda: ask("... " if interactive else ""), system=args.system,
                    options=given_block(args), default_block=default_block)


def check_system(args: argparse.Namespace) -> None:
    """--system's text: not empty, and not beside --raw (it goes through the chat template)."""
    if args.system is None:
        return
    if not args.system.strip():
        raise ValueError("--system is empty; give the system message's text, or drop --system")
    if getattr(args, "raw", False):
        raise ValueError("--system goes through the chat template, which --raw turns off; drop one of them")


def ask(marker: str) -> str:
    """A line of stdin after ``marker``: on stdout when it is a terminal (``input``'s own, so line
    editing redraws it), else on stderr, so ``dllm chat > file`` records only the answers."""
    if marker and not sys.stdout.isatty():
        sys.stderr.write(marker)
        sys.stderr.flush()
        return input()
    return input(marker)


def _line_editing() -> None:
    """Arrow keys, history and the usual editing keys at the chat prompt: ``input()`` uses the
    standard library's readline once it is imported (absent on some builds: plain input then)."""
    try:
        import readline  # noqa: F401
    except ImportError:
        log.debug("readline is not available: no line editing at the prompt")


def _generate_prompts(args: argparse.Namespace) -> list[PromptLine]:
    if args.prompt and args.prompt_option:
        raise ValueError("give prompts as PROMPT arguments or with -p/--prompt, not both")
    texts = args.prompt or args.prompt_option or []
    if texts and args.prompts_file:
        raise ValueError("give prompts as arguments or with --prompts-file, not both")
    check_system(args)
    if args.prompts_file:
        prompts = read_prompts(args.prompts_file)
        if args.raw:
            refuse_messages_under_raw(prompts)
        with_system(prompts, args.system)  # a line with a system message of its own: refused before loading
        return prompts
    if not texts:
        if args.choice and len(args.choice) > 1:  # nargs="+": a prompt written after the choices joined them
            taken = ", ".join(map(repr, args.choice))
            raise ValueError(f"no prompt given: --choice took every word after it ({taken}); put the prompt before "
                             '--choice, or end the choices with -- (--choice yes no -- "PROMPT")')
        raise ValueError('no prompt given; pass "PROMPT" arguments (- reads one from stdin) or --prompts-file FILE '
                         "(- for stdin, one prompt per line)")
    if texts.count(STDIN) > 1:
        raise ValueError("the prompt argument - (stdin) was given twice; stdin holds one prompt, give - once")
    return [PromptLine("argument", i, read_stdin_prompt() if text == STDIN else check_text(text, f"prompt argument {i}"))
            for i, text in enumerate(texts, start=1)]


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``dllm`` parser; ``lazy``: each command's options are added when it is chosen (``main``),
    so ``dllm --help`` and ``dllm --version`` import no torch (the registries behind ``--policy``'s
    choices do)."""
    parser = CommandParser(prog="dllm", description="Parallel decoding for masked-diffusion LMs",
                           formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {dllm.__version__}")
    add_verbosity_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text for one or more prompts")
    gen.fill_later(_add_generate_options)
    gen.set_defaults(func=cmd_generate)
    chat = sub.add_parser("chat", help="a terminal chat with multi-turn history, showing the canvas filling")
    chat.fill_later(_add_chat_options)
    chat.set_defaults(func=cmd_chat)
    for register in _extra_commands():
        register(sub)
    for command in sub.choices.values():
        command.fill_later(_finish_command)
    name_command_parsers(parser)
    if not lazy:
        parser.fill_all()
    return parser


def _add_generate_options(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("prompt", nargs="*", help="prompt text (chat template applied when the tokenizer has one); "
                                               "- reads one prompt from stdin")
    gen.add_argument("-p", "--prompt", dest="prompt_option", action="append", metavar="TEXT",
                     help="a prompt, as a PROMPT argument (llama.cpp's -p), repeatable")
    gen.add_argument("--prompts-file", "--prompts", dest="prompts_file", metavar="FILE", default=None,  # bench's too
                     help="read prompts from FILE (- for stdin): one per text line, or .jsonl (or .json) lines "
                          'with "prompt" or "messages"')
    gen.add_argument("--batch-size", type=positive_int, default=8,
                     help="prompts decoded together (each with its --n samples)")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--system", "--system-prompt", "-sys", metavar="TEXT", default=None,
                     help="a system message before every prompt (through the chat template; llama.cpp's -sys)")
    gen.add_argument("--json", action="store_true", help="one JSON line per answer: text, finish_reason, stats (and sample with --n)")
    add_model_options(gen)
    add_tensor_parallel_option(gen)
    add_generation_options(gen)
    add_request_options(gen)
    add_structured_options(gen)


def _add_chat_options(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                      help="redraw the filling canvas in place (default: on when stdout is a terminal "
                           "other than TERM=dumb); "
                           "--no-live prints the final text as it becomes final")
    chat.add_argument("--system", "--system-prompt", metavar="TEXT", default=None,
                      help="a system message sent before the conversation at every turn, kept across /reset "
                           "(default: none)")
    add_model_argument(chat)
    add_model_options(chat)
    add_generation_options(chat)


def _finish_command(command: argparse.ArgumentParser) -> None:
    """After a command's own options: one way to show defaults and -v / -q, on it and on the
    commands below it (``bench throughput``), each of which names itself in errors."""
    for parser in (command, *_subcommands(command)):
        parser.formatter_class = HelpFormatter
        add_verbosity_options(parser, top_level=False)
    name_command_parsers(command)


def _extra_commands():
    """Subcommands contributed by other modules (bench, training of filters)."""
    from dllm.bench.cli import register_bench
    from dllm.cli.models import register as register_models
    from dllm.serve.cli import register as register_serve
    from dllm.train.filter_cli import register as register_train_filter

    yield register_serve
    yield register_bench
    yield register_train_filter
    yield register_models


def main(argv: Sequence[str] | None = None) -> int:
    prog = "dllm"
    try:
        parser = build_parser(lazy=True)
        args = parser.parse_args(argv)
        prog = args.command_parser.prog
        configure_logging(args.verbose, args.quiet)
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return status
    except (ValueError, FileNotFoundError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (the shell's "^C" ends its line first)
        print(("\n" if sys.stderr.isatty() else "") + f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
