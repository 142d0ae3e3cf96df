"""``dllm serve``'s options for limits, access and threads, and the uvicorn server they configure."""
from __future__ import annotations

import argparse
import json
import logging
import os
import socket

from dllm.cli.options import positive_float, positive_int
from dllm.serve.limits import API_KEY_ENV, VLLM_API_KEY_ENV, AccessSettings, ServerLimits, default_allowed_hosts
from dllm.serve.listen import origin

log = logging.getLogger(__name__)


def add_server_options(p: argparse.ArgumentParser) -> None:
    d = ServerLimits()
    g = p.add_argument_group("limits and access (README: Serving)")
    g.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on every request (default: ${API_KEY_ENV}, else "
                        f"${VLLM_API_KEY_ENV} as vLLM reads it, else none; "
                        "an empty key is refused, never taken as 'no key')")
    g.add_argument("--protect-health-metrics", action="store_true",
                   help="/health, /metrics and /version need the API key too (default: open)")
    g.add_argument("--allowed-origins", type=_origins, default=(), metavar="ORIGIN,...",
                   help="browser origins allowed to call the server (CORS), e.g. https://app.example.com, or "
                        "vLLM's JSON list '[\"https://app.example.com\"]' (default: none)")
    g.add_argument("--allowed-hosts", type=_names, default=(), metavar="NAME,...",
                   help="Host header names accepted besides the loopback ones when bound to 127.0.0.1 (a "
                        "reverse proxy's public name); on another address, the only ones accepted (default: any)")
    g.add_argument("--max-body-mb", type=positive_float, default=d.max_body_bytes / (1 << 20),
                   help="largest request body in MiB (413 beyond, refused before it is read)")
    g.add_argument("--max-rows-per-request", type=positive_int, default=d.max_rows_per_request,
                   help="prompts x n of one request (400 beyond)")
    g.add_argument("--body-timeout", type=positive_float, default=d.body_timeout_s, metavar="S",
                   help="seconds a request body may take to arrive (408 and the connection closed)")
    g.add_argument("--header-timeout", type=positive_float, default=d.header_timeout_s, metavar="S",
                   help="seconds a connection may take to send a request's headers (then it is closed)")
    g.add_argument("--shutdown-timeout", type=positive_float, default=d.shutdown_timeout_s, metavar="S",
                   help="on SIGTERM / SIGINT, seconds open requests get to finish before streams get an error "
                        "event and the server exits (a second signal: at once)")
    g.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads for the model (default: OMP_NUM_THREADS when set, else the CPUs this process may run on)")
    g.add_argument("--uvicorn-log-level", default="warning", choices=UVICORN_LOG_LEVELS,
                   help="uvicorn's own log lines: info adds its start-up lines and one access line per request "
                        "(dllm's lines follow -v / -q)")
    add_vllm_names(p)


UVICORN_LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]


def add_vllm_names(p: argparse.ArgumentParser) -> None:
    """vLLM's serve flags that mean a dllm one, and those that change nothing in dllm (accepted so
    a vLLM command line runs, their help says why); vLLM flags dllm has no counterpart of are
    refused with what dllm does instead (``dllm.cli.parser.FOREIGN_NOTES``)."""
    g = p.add_argument_group("vLLM's names")
    g.add_argument("--max-num-seqs", dest="max_batch", type=positive_int, default=argparse.SUPPRESS, metavar="N",
                   help="vLLM's name for --max-batch")
    g.add_argument("--disable-log-requests", action="store_true",
                   help="accepted, changes nothing: dllm never logs requests' prompts or answers")
    g.add_argument("--disable-log-stats", action="store_true",
                   help="accepted, changes nothing: dllm logs no periodic statistics (GET /metrics has them)")
    g.add_argument("--enable-auto-tool-choice", action="store_true",
                   help='accepted, changes nothing: dllm answers tool_choice "auto" wherever the chat template '
                        "shows tools, or --tool-call-parser names the form of their calls")


def server_limits(args: argparse.Namespace) -> ServerLimits:
    return ServerLimits(max_body_bytes=int(args.max_body_mb * (1 << 20)), body_timeout_s=args.body_timeout,
                        header_timeout_s=args.header_timeout, max_rows_per_request=args.max_rows_per_request,
                        shutdown_timeout_s=args.shutdown_timeout)


def access_settings(args: argparse.Namespace) -> AccessSettings:
    key = api_key(args)
    if key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without an API key: anyone who reaches the port can use it; set --api-key "
                    "(or $%s) and put a TLS reverse proxy in front", args.host, API_KEY_ENV)
    return AccessSettings(api_key=key, protect_health_metrics=args.protect_health_metrics,
                          allowed_origins=args.allowed_origins,
                          allowed_hosts=default_allowed_hosts(args.host, args.allowed_hosts))


def api_key(args: argparse.Namespace) -> str | None:
    """The key from --api-key, else $DLLM_API_KEY, else $VLLM_API_KEY, else None. An empty one is a
    ValueError: a script's ``--api-key "$KEY"`` with KEY unset must not serve an open server."""
    given = [("--api-key", args.api_key)] if args.api_key is not None else []
    given += [(f"${name}", os.environ[name]) for name in (API_KEY_ENV, VLLM_API_KEY_ENV) if name in os.environ]
    source, key = given[0] if given else (None, None)
    if key is not None and not key.strip():
        raise ValueError(f"{source} is empty, which would serve without authentication; give a non-empty key "
                         f"(e.g. $(openssl rand -hex 16)), or to serve without one leave out --api-key and unset "
                         f"{API_KEY_ENV} and {VLLM_API_KEY_ENV}")
    return key


def torch_threads(args: argparse.Namespace) -> int:
    """Set torch's intra-op threads: --threads, else ``OMP_NUM_THREADS`` when it holds a positive
    count (as every other command and torch itself read it), else the CPUs this process may use."""
    import torch

    threads = args.threads or _omp_threads() or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    return threads


def _omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive count; None when unset. A value that is no positive
    count (OpenMP's lists such as ``4,2`` included) is refused naming the fix."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"OMP_NUM_THREADS={text!r} is not a positive thread count; set it to one "
                         "(e.g. OMP_NUM_THREADS=4), unset it, or pass --threads")
    return int(text)


def serve_forever(app, args: argparse.Namespace, limits: ServerLimits, sock: socket.socket) -> None:
    """uvicorn on ``app``, listening on ``sock`` (bound before the model loaded), with the header deadline (and JSON refusals) and the shutdown deadline;
    no WebSocket upgrades (the server has no WebSocket route: an upgrade request is plain HTTP, so
    the app answers it, never a WebSocket library's plain-text refusal)."""
    import uvicorn

    from dllm.serve.connections import header_deadline_protocol
    from dllm.serve.shutdown import DeadlineServer

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.uvicorn_log_level, lifespan="off",
                            http=header_deadline_protocol(limits.header_timeout_s), ws="none")
    DeadlineServer(config, app.state.shutdown, limits.shutdown_timeout_s).run(sockets=[sock])


def _names(text: str) -> tuple[str, ...]:
    """Comma-separated names, or vLLM's JSON list of them (``'["https://a.example"]'``)."""
    if text.lstrip().startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as err:
            raise argparse.ArgumentTypeError(f"{text!r} is not a JSON list ({err.msg}); give NAME,NAME or "
                                             '\'["NAME", "NAME"]\'') from None
        if not all(isinstance(name, str) for name in names):
            raise argparse.ArgumentTypeError(f"{text!r} holds a value that is not a string; give a list of names")
        return tuple(name.strip() for name in names if name.strip())
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _origins(text: str) -> tuple[str, ...]:
    try:
        return tuple(origin(name) for name in _names(text))
    except ValueError as err:  # argparse names the option before the message
        raise argparse.ArgumentTypeError(str(err).removeprefix("--allowed-origins: ")) from None
