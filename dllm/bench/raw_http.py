"""Raw HTTP/1.1 exchanges on a socket, for requests no client library sends: half-sent headers or
bodies, a body announced larger than it is, chunked bodies of any size (the abuse measurement,
bench/serve_abuse.py, and the server's limit tests)."""
from __future__ import annotations

import socket
import time


def head(port: int, length: int | None = None, chunked: bool = False, path: str = "/v1/completions",
         close: bool = False) -> bytes:
    """A POST's request line and headers (JSON), with Content-Length ``length`` and/or chunked
    transfer; ``close``: ask the server to close the connection after its answer."""
    lines = [f"POST {path} HTTP/1.1".encode(), f"Host: 127.0.0.1:{port}".encode(), b"Content-Type: application/json"]
    if close:
        lines.append(b"Connection: close")
    if length is not None:
        lines.append(f"Content-Length: {length}".encode())
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def status_of(answer: bytes) -> int:
    """The status code of a raw answer; 0 when there is none (the server closed first)."""
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def raw_exchange(port: int, data: bytes, *, more: bytes = b"", chunks: int = 0, timeout: float = 10.0) -> bytes:
    """Send ``data`` (then ``chunks`` copies of ``more`` while the server listens) on a fresh
    connection; everything the server answers before it closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            for _ in range(chunks):
                sock.sendall(more)
        except OSError:  # the server answered and closed while we were still sending
            pass
        answer = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not piece:
                break
            answer += piece
        return answer
