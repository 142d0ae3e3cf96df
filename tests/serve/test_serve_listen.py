"""``dllm serve`` binds its port and checks its origins before the model loads: a port in use, a
port out of range or an origin that is no origin is one error line naming the option, where a
port in use was uvicorn's log line after a load that announced the server, 99999 a traceback."""
from __future__ import annotations

import socket

import pytest

import dllm.serve.cli as serve_cli
from dllm.cli.main import main
from dllm.serve.listen import listening_socket, origin


@pytest.fixture
def no_model_load(monkeypatch):
    def load(_args):
        raise AssertionError("the model was loaded before the option was checked")
    monkeypatch.setattr(serve_cli, "load_from_args", load)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_port_in_use_is_named_before_the_model_loads(capsys, no_model_load):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--host", "127.0.0.1", "--port", str(port)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"dllm serve: error: port {port} on 127.0.0.1 is in use") and "--port" in line


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(port, capsys, no_model_load):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", port])
    assert exit_.value.code == 2 and "--port" in capsys.readouterr().err


def test_an_address_of_another_machine_names_host(capsys, no_model_load):
    """192.0.2.1 (TEST-NET-1, no lookup) is no address of this machine: binding it fails."""
    assert main(["serve", "--host", "192.0.2.1", "--port", "0", "--api-key", "k"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("dllm serve: error: cannot listen on 192.0.2.1:0") and "--host" in line


def test_port_zero_binds_a_free_port_and_the_socket_is_the_servers():
    with listening_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        assert port > 0
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is in use"):
            sock.listen()
            listening_socket("127.0.0.1", port)


@pytest.mark.parametrize("text", ["notaurl", "app.example.com", "ftp://x.org", "https://x.org/path", "http://h:port"])
def test_an_origin_that_is_no_origin_is_refused(text, capsys, no_model_load):
    with pytest.raises(ValueError, match="not a browser origin"):
        origin(text)
    with pytest.raises(SystemExit):
        main(["serve", "--allowed-origins", f"https://ok.example,{text}"])
    assert "--allowed-origins" in capsys.readouterr().err


def test_origins_as_browsers_send_them():
    assert [origin(o) for o in ("https://app.example.com", "http://localhost:3000/", "*")] == \
        ["https://app.example.com", "http://localhost:3000", "*"]
