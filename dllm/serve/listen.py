"""The server's listening socket, bound before the model loads.

A port in use, a host that is not an address of this machine, or an origin that is no origin is
one error naming the option to change, given before minutes of loading; uvicorn would report the
first two only after the log line announcing the server.
"""
from __future__ import annotations

import argparse
import errno
import socket
from urllib.parse import urlsplit


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1-65535, or 0 for one the system picks (logged once bound)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 1-65535 (0: any free port), got {value}")
    return value


def origin(text: str) -> str:
    """A browser origin for CORS: ``scheme://host[:port]`` with no path, or ``*`` for any."""
    if text == "*" or _is_origin(text):
        return text.rstrip("/")
    raise ValueError(f"--allowed-origins: {text!r} is not a browser origin; give scheme://host[:port] such as "
                     "https://app.example.com or http://localhost:3000 (no path), or * for any")


def _is_origin(text: str) -> bool:
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - a port that is no number raises
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/")
            and not (parts.query or parts.fragment or parts.username))


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (uvicorn listens on it), or a ValueError naming
    --host or --port."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise ValueError(f"--host {host!r} does not resolve ({err.strerror}); give an address of this machine "
                         "such as 127.0.0.1, or 0.0.0.0 for every interface") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses the port
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ValueError(f"port {port} on {host} is in use (another server?); stop it or give another --port") \
                from None
        raise ValueError(f"cannot listen on {host}:{port} ({err.strerror}); give an address of this machine with "
                         "--host (127.0.0.1, 0.0.0.0) or another --port") from None
    sock.set_inheritable(True)
    return sock
