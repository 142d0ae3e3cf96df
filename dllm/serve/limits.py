"""The server's limits and access settings: what one request may cost before any model work,
and who may ask. Each is a command-line option of ``dllm serve`` (README, "Serving")."""
from __future__ import annotations

from dataclasses import dataclass

# A generous bound on the characters one token covers: BPE vocabularies of 32k-150k entries
# average 3-5 characters per token on prose and code, and their longest entries (runs of
# spaces, long words) stay under 32 characters on average over any prompt. A prompt longer
# than context x this many characters cannot fit, so it is refused before it is tokenized.
CHARS_PER_TOKEN_BOUND = 32
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# Where the server's API key may come from besides --api-key; vLLM's variable is read after ours,
# so a server moved from vLLM keeps the key its users set.
API_KEY_ENV = "DLLM_API_KEY"
VLLM_API_KEY_ENV = "VLLM_API_KEY"


@dataclass(kw_only=True, slots=True)
class ServerLimits:
    """max_body_bytes: a request body's size (413 beyond; refused from Content-Length before it is
    read, or as soon as a streamed body passes it); body_timeout_s: the whole body must arrive
    within this many seconds of the request's headers (408 and the connection closed);
    header_timeout_s: a connection must send a request's complete headers within this many seconds
    (else it is closed); max_rows_per_request: prompts x n (400 beyond; the queue's capacity
    bounds it too); chars_per_token: the prompt's character cap is the model's context x this;
    shutdown_timeout_s: on SIGTERM / SIGINT, open requests get this long to finish, then open
    streams get a final error event and the process exits (a second signal: at once);
    tokenizer_threads: threads that parse and tokenize request bodies off the event loop."""

    max_body_bytes: int = 4 << 20
    body_timeout_s: float = 30.0
    header_timeout_s: float = 10.0
    max_rows_per_request: int = 64
    chars_per_token: int = CHARS_PER_TOKEN_BOUND
    shutdown_timeout_s: float = 30.0
    tokenizer_threads: int = 2

    def max_prompt_chars(self, context: int) -> int:
        """Characters a prompt (all of a chat's message contents together) may have."""
        return context * self.chars_per_token


@dataclass(kw_only=True, slots=True)
class AccessSettings:
    """api_key: the Bearer token every request must carry (None: no authentication);
    protect_health_metrics: /health, /metrics and /version need it too; allowed_origins: CORS
    origins a browser page may call from (none by default: no CORS headers at all);
    allowed_hosts: Host header values accepted (None: any; the loopback default accepts only
    loopback names, so a DNS-rebinding page cannot reach a local server)."""

    api_key: str | None = None
    protect_health_metrics: bool = False
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] | None = None


def default_allowed_hosts(bind_host: str, extra: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Host names accepted for a server bound to ``bind_host``: loopback names (and ``extra``)
    when it is bound to a loopback address, else any (None) unless ``extra`` names some."""
    if bind_host in LOOPBACK_HOSTS:
        return LOOPBACK_HOSTS + tuple(extra)
    return tuple(extra) or None
