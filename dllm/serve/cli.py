"""``dllm serve``: the OpenAI-compatible server on one model, with the scheduler's limits and the
decoding options as server-wide defaults (a request's extra fields override them)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import TYPE_CHECKING

from dllm.cli.options import (
    add_generation_options, add_model_argument, add_model_options, add_tensor_parallel_option, generation_config,
    load_from_args, positive_int,
)
from dllm.api.tool_parsers import NAMES as PARSER_NAMES
from dllm.cli.output import LOGGER_NAME
from dllm.serve.listen import listening_socket, port_number
from dllm.serve.serve_options import add_server_options

if TYPE_CHECKING:
    from dllm.serve.limits import AccessSettings, ServerLimits
    from dllm.serve.protocol import SchedulerLimits
    from dllm.serve.requests import ServerDefaults

log = logging.getLogger(LOGGER_NAME)
SEED_MEANING = ("dllm serve gives each request without a seed a fresh random one, reported in its response, "
                "and a request that sends it back replays the answer")
DEFAULT_PROMPT_CACHE_MB = 256.0  # a 7B Fast-dLLM v2 (28 layers, 4 K/V heads of 128, bf16): ~4,600 tokens


def server_defaults(args: argparse.Namespace):
    """The decoding options as defaults: validated once (before loading the model); --gen-length
    is the default max_tokens, block_length and steps stay unset unless given."""
    from dllm.serve.requests import ServerDefaults

    if "seed" in getattr(args, "given_options", ()):
        raise ValueError(f"--seed {args.seed}: {SEED_MEANING}; drop --seed (a client sends seed to replay an answer)")
    config = generation_config(args)
    options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    options.pop("gen_length")
    options.update(block_length=args.block_length, steps=args.steps)
    return ServerDefaults(options=options, max_tokens=args.gen_length, tool_call_parser=args.tool_call_parser)


def make_scheduler(model, limits):
    """The continuous-batching scheduler over ``model`` (static batching with
    ``limits.continuous`` False)."""
    try:
        from dllm.serve.scheduler import BatchScheduler
    except ImportError as err:
        raise ValueError(f"this build of dllm has no batching scheduler ({err})") from err
    return BatchScheduler(model, limits)


def cmd_serve(args: argparse.Namespace) -> int:
    from dllm.parallel.groups import check_layout
    from dllm.serve.protocol import SchedulerLimits
    from dllm.serve.requests import check_server_defaults
    from dllm.serve.serve_options import access_settings, server_limits, torch_threads

    check_layout(args.tensor_parallel, whole_world=True)  # one copy of the model: the job's process count fits it
    defaults = server_defaults(args)
    limits = SchedulerLimits(max_batch=args.max_batch, max_queue=args.max_queue, continuous=not args.static,
                             forward_overhead_tokens=args.forward_overhead_tokens,
                             prompt_cache_bytes=int(args.prompt_cache_mb * (1 << 20)))
    server, access = server_limits(args), access_settings(args)
    threads = torch_threads(args)
    if args.tensor_parallel > 1:
        return _serve_tensor_parallel(args, ServeSetup(defaults, limits, server, access, threads))
    with listening_socket(args.host, args.port) as sock:  # a port in use is told before the model loads
        model = load_from_args(args)
        check_server_defaults(model, defaults)  # before serving requests that could never decode
        _run_server(args, model, make_scheduler(model, limits), ServeSetup(defaults, limits, server, access, threads),
                    sock)
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class ServeSetup:
    """The server's checked options, made before the model loads."""

    defaults: ServerDefaults
    limits: SchedulerLimits
    server: ServerLimits
    access: AccessSettings
    threads: int


def _run_server(args: argparse.Namespace, model, scheduler, setup: ServeSetup, sock) -> None:
    """Serve on ``sock`` (``listen.listening_socket``, bound before the model loaded) until shut down."""
    from dllm.serve.app import create_app
    from dllm.serve.serve_options import serve_forever

    warn_split_markers(model, args.tool_call_parser)
    try:
        app = create_app(model, scheduler, defaults=setup.defaults, served_name=args.served_model_name,
                         limits=setup.server, access=setup.access)
        log.info("serving %s on http://%s:%d/v1 (%s batching, max batch %d, max queue %d, %d threads%s%s)",
                 model.path.name, args.host, sock.getsockname()[1], "static" if args.static else "continuous", args.max_batch,
                 args.max_queue, setup.threads, ", API key required" if setup.access.api_key else "",
                 f", tensor parallel {args.tensor_parallel}" if args.tensor_parallel > 1 else "")
        serve_forever(app, args, setup.server, sock)
    finally:
        scheduler.close()


def warn_split_markers(model, parser_name: str | None) -> None:
    """Warn at start-up when the named --tool-call-parser's markers are not single tokens of the
    model's vocabulary: served all the same (calls are read from text, and a forced call writes
    them), but "auto" calls in that form are unlikely from a model never trained on them."""
    from dllm.api.tool_parsers import split_markers, tool_parser

    if parser_name is None:
        return
    split = split_markers(tool_parser(parser_name), model.tokenizer)
    if split:
        log.warning("--tool-call-parser %s: %s %s not one token of %s's vocabulary, so the model was likely not "
                    "trained to write calls in this form; forced calls (tool_choice \"required\" or named) still "
                    "work, \"auto\" calls may not come; pick the parser of the model's chat template",
                    parser_name, ", ".join(split), "is" if len(split) == 1 else "are", model.path.name)


def _serve_tensor_parallel(args: argparse.Namespace, setup: ServeSetup) -> int:
    """One copy of the model over the job's ranks: rank 0 serves HTTP and schedules, the others
    follow its batches (``dllm.serve.mirror``); a rank that fails ends the job with its error."""
    import signal

    from dllm.parallel.dist import leave_together, run_rank
    from dllm.serve.mirror import LeaderScheduler, OpChannel, follow
    from dllm.serve.requests import check_server_defaults

    sock = None

    def body(rank: int) -> None:
        nonlocal sock
        if rank == 0:  # the HTTP rank: a port in use is told before the model loads
            sock = listening_socket(args.host, args.port)
        model = load_from_args(args)
        check_server_defaults(model, setup.defaults)  # every rank alike: the job ends with the reason, exit 2
        channel = OpChannel()
        # torchrun passes a SIGTERM / SIGINT to every rank: rank 0 shuts the server down (uvicorn
        # re-raises the signal once it returns: ignored here, so that rank 0 lives to stop the
        # others) and its scheduler's last operation stops the others, which ignore the signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if rank == 0:
            _run_server(args, model, LeaderScheduler(model, setup.limits, channel), setup, sock)
        else:
            follow(model, setup.limits, channel)

    try:
        run_rank(body)
    finally:
        if sock is not None:
            sock.close()
    leave_together()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (completions, chat, streaming)")
    p.fill_later(_add_serve_options)
    p.set_defaults(func=cmd_serve)


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=port_number, default=8000, help="port to listen on (0: any free port, logged)")
    p.add_argument("--served-model-name", default=None, nargs="+", action=_OneName, metavar="NAME",
                   help="model name clients use (default: the directory's name)")
    p.add_argument("--max-batch", type=positive_int, default=8, help="rows decoded together")
    p.add_argument("--max-queue", type=positive_int, default=64,
                   help="rows waiting beyond them (then 429; a request of more rows than this is a 400)")
    p.add_argument("--static", action="store_true",
                   help="static batching: the batch drains before new rows join (default: continuous)")
    p.add_argument("--forward-overhead-tokens", type=non_negative_float, default=None, metavar="T",
                   help="continuous batching: a forward's fixed cost in canvas tokens; waiting rows that would "
                        "pad the running batch by more start a batch of their own (default: fitted from "
                        "the rounds the server times; inf: always join)")
    p.add_argument("--prompt-cache-mb", type=megabytes, default=DEFAULT_PROMPT_CACHE_MB, metavar="MB",
                   help="block-causal models under the prefix / dual cache: prompt blocks already computed for "
                        "earlier requests (a shared system prompt) are reused, exactly, from a store of at most "
                        "this many MiB on the model's device, least recently used out first (0: off)")
    p.add_argument("--tool-call-parser", type=tool_call_parser_name, default=None, metavar="NAME",
                   help='the form the model writes tool calls in, read from tool_choice "auto" answers, as '
                        f"vLLM's --tool-call-parser: {', '.join(PARSER_NAMES)} (default: hermes, served only "
                        "where the chat template shows tools in its <tool_call> form; a named parser is trusted)")
    add_server_options(p)
    add_model_argument(p)
    add_model_options(p)
    add_tensor_parallel_option(p)
    add_generation_options(p)
    _serve_help(p)


def _serve_help(p: argparse.ArgumentParser) -> None:
    """The shared decoding flags' help as a server reads them (``server_defaults``): defaults of
    each request, not one decode's."""
    from dllm.engine.config import DEFAULT_BLOCK_LENGTH

    meanings = {
        "--gen-length": "max_tokens of a request that sends none (fewer when its prompt leaves fewer whole blocks "
                        "in the context)",
        "--max-tokens": "max_tokens of a request that sends none, as --gen-length (default: --gen-length's)",
        "--block-length": f"block size of every request that sets no block_length; requests join running batches "
                          f"at block boundaries (default: {DEFAULT_BLOCK_LENGTH})",
        "--steps": "step budget of a request of --gen-length tokens (default: one token per step)",
        "--seed": f"refused: {SEED_MEANING} (default: a fresh seed per request)",
    }
    for action in p._actions:
        flag = next((f for f in action.option_strings if f in meanings), None)
        if flag is not None:
            action.help = meanings[flag]


def tool_call_parser_name(text: str) -> str:
    """--tool-call-parser's value: a parser dllm has (``dllm.api.tool_parsers``), else the known ones."""
    if text not in PARSER_NAMES:
        raise argparse.ArgumentTypeError(f"unknown parser {text!r}; dllm reads {', '.join(PARSER_NAMES)}")
    return text


class _OneName(argparse.Action):
    """--served-model-name takes words as vLLM's does, so that vLLM's second name is refused here
    (dllm serves one name) rather than read as the positional MODEL."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if len(values) > 1:
            raise argparse.ArgumentError(self, f"dllm serves one name, got {len(values)} ({' '.join(values)}); "
                                               "give one (and a positional MODEL before --served-model-name)")
        setattr(namespace, self.dest, values[0])


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens (or inf), got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in MiB, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite size >= 0 (0: off), got {text!r}")
    return value
