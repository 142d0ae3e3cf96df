"""A stream whose decode fails after text went out ends as vLLM ends it: an error event (the
``openai`` client raises APIError with its message), then ``data: [DONE]``, so a client that
reads to [DONE] is not left waiting; the failed row leaves the batch and the server goes on."""
from __future__ import annotations

import json

import httpx
import openai
import pytest

from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from serve_helpers import RecordingScheduler, served_model, wait_until

FAILURE = "injected decode failure"
BODY = {"model": "m", "prompt": "hello world", "max_tokens": 32, "block_length": 8, "steps": 32,
        "stop_at_eos": False, "stream": True}


class FailingScheduler(RecordingScheduler):
    """The real scheduler whose decode raises at round ``fail_at`` (counted over its life)."""

    fail_at = 12  # one token a round, blocks of 8: the first block's text has been streamed

    def __init__(self, model, limits: SchedulerLimits | None = None) -> None:
        self.rounds = 0
        super().__init__(model, limits)

    def _step(self, batch) -> None:
        self.rounds += 1
        if self.rounds == self.fail_at:
            raise RuntimeError(FAILURE)
        super()._step(batch)


@pytest.fixture
def served(tiny_models):
    with served_model(tiny_models["llada"], ServerDefaults(), FailingScheduler) as (scheduler, url):
        yield scheduler, url


def test_raw_stream_sends_the_error_then_done(served):
    scheduler, url = served
    with httpx.stream("POST", url + "/v1/completions", json=BODY, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(e["choices"][0]["text"] for e in events[:-1])  # text went out before the failure
    assert not any(e["choices"][0]["finish_reason"] for e in events[:-1])  # cut, never finished
    error = events[-1]["error"]
    assert FAILURE in error["message"] and error["type"] == "server_error" and error["code"] == 500
    assert wait_until(lambda: scheduler.running_rows == 0)
    again = httpx.post(url + "/v1/completions", json={**BODY, "stream": False, "max_tokens": 8}, timeout=60)
    assert again.status_code == 200  # the server goes on


@pytest.mark.parametrize("chat", [False, True])
def test_openai_client_raises_the_error_mid_stream(served, chat):
    _, url = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    extra = {k: BODY[k] for k in ("block_length", "steps", "stop_at_eos")}
    if chat:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=32, stream=True, extra_body=extra)
        texts = lambda chunk: chunk.choices[0].delta.content or ""  # noqa: E731
    else:
        stream = client.completions.create(model="m", prompt="hello world", max_tokens=32, stream=True,
                                           extra_body=extra)
        texts = lambda chunk: chunk.choices[0].text  # noqa: E731
    got = []
    with pytest.raises(openai.APIError, match=FAILURE):
        for chunk in stream:
            got.append(texts(chunk))
    assert "".join(got)


def test_an_unexpected_error_in_the_stream_ends_it_alike(served, monkeypatch):
    """A bug while writing a chunk (headers already sent) is an error event and [DONE], not a
    cut connection, and the row is cancelled."""
    scheduler, url = served
    from dllm.serve.responses import ResponseWriter

    chunk = ResponseWriter.chunk

    def broken(self, index, text, *args, **kwargs):
        if text:
            raise KeyError("a writer bug")
        return chunk(self, index, text, *args, **kwargs)

    monkeypatch.setattr(ResponseWriter, "chunk", broken)
    scheduler.fail_at = -1
    with httpx.stream("POST", url + "/v1/completions", json=BODY, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][6:])["error"]
    assert "internal error (KeyError" in error["message"] and "a writer bug" in error["message"]
    assert wait_until(lambda: scheduler.finished.get(scheduler.submitted[-1].request_id) == "cancelled")
