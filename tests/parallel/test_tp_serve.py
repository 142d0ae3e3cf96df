"""``dllm serve --tensor-parallel 2`` under torchrun (gloo, CPU): one HTTP front on rank 0, both
ranks step the batches rank 0 decides; the answers, streamed or not, concurrent or alone, stopped
by a stop string or not, equal a one-process server's. A rank that fails ends the job with its
message; without torchrun the option is refused before any model work."""
from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai

from dllm.cli.main import main
from torchrun_helpers import cpu_env, torchrun, torchrun_command

MODEL = "dllm-waitingline-llada"
SERVE = ["-m", "dllm", "serve", "--model", MODEL, "--device", "cpu", "--dtype", "float32", "--threads", "1",
         "--gen-length", "16", "--block-length", "8", "--steps", "16", "--served-model-name", "m"]
START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(argv: list[str], port: int, log):
    """A server process on 127.0.0.1:``port``; yields its base URL once /health answers, ends it
    (SIGTERM, bounded wait) on exit."""
    proc = subprocess.Popen(argv + ["--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=cpu_env(),
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None, f"the server exited with {proc.returncode}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"no server on {url} within {START_TIMEOUT} s"
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _answers(url: str) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    out = {}
    batch = client.completions.create(model="m", prompt=["copy the list [a, b, c]", "reverse: x y z"])
    out["batch"] = [c.text for c in sorted(batch.choices, key=lambda c: c.index)]
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "sort: bob, al, cy"}])
    out["chat"] = chat.choices[0].message.content
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "count to five"}],
                                            stream=True)
    out["stream"] = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    first = out["batch"][0]  # stop at a character from the middle of this prompt's own answer
    stop = first[len(first) // 2] if first else "]"
    out["stopped"] = client.completions.create(model="m", prompt="copy the list [a, b, c]", stop=[stop]).choices[0].text
    prompts = [f"copy the list [{', '.join('abcdefg'[:k])}]" for k in range(2, 6)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # rows arrive while others decode: joins
        out["concurrent"] = list(pool.map(
            lambda p: client.completions.create(model="m", prompt=p, max_tokens=8 + 8 * (len(p) % 2)).choices[0].text,
            prompts))
    return out


def test_tp2_server_answers_as_one_process_server(tmp_path):
    with open(tmp_path / "tp.log", "w") as tp_log, open(tmp_path / "one.log", "w") as one_log, \
            _server(torchrun_command([*SERVE, "--tensor-parallel", "2"], 2), _free_port(), tp_log) as tp_url, \
            _server([sys.executable, *SERVE], _free_port(), one_log) as one_url:
        tp, one = _answers(tp_url), _answers(one_url)
    assert tp == one
    assert one["stream"] and one["batch"][0].startswith(one["stopped"]) and len(one["stopped"]) < len(one["batch"][0])
    log = (tmp_path / "tp.log").read_text()
    assert "tensor parallel 2" in log and log.count("serving ") == 1, log[-3000:]  # one HTTP front


def test_a_failing_rank_ends_the_server_job_with_its_message():
    start = time.monotonic()
    done = torchrun([*SERVE, "--tensor-parallel", "2", "--port", str(_free_port())], 2,
                    env={"DLLM_FAIL_RANK": "1"}, timeout=90)
    assert done.returncode != 0
    assert "rank 1 failed: injected failure on rank 1" in done.stderr
    assert time.monotonic() - start < 60


def test_server_options_the_model_refuses_end_the_tensor_parallel_job_at_start():
    """As a one-process server: the defaults are checked against the loaded model before the port opens
    (it used to start and refuse every request that kept them)."""
    done = torchrun([*SERVE, "--tensor-parallel", "2", "--strategy", "apd", "--port", str(_free_port())], 2,
                    timeout=90)
    assert done.returncode != 0 and "serving " not in done.stderr
    assert "failed: the server's options cannot decode this model: strategy 'apd' needs an autoregressive helper" \
        in done.stderr


def test_tensor_parallel_serve_without_torchrun_is_refused_before_loading(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert main([*SERVE[2:], "--tensor-parallel", "2", "--model", "no-such-model"]) == 2
    assert "needs 2 processes: launch it with torchrun --nproc_per_node 2 (a dllm command: torchrun " \
           "--nproc_per_node 2 -m dllm COMMAND ...; dllm starts no processes of its own)" in capsys.readouterr().err
