"""The bundled uniform-state model decodes with the defaults: generate's default block (one block of
the answer) becomes the model's canvas, as its decode requires. ``dllm generate --model
dllm-waitingline-gemma "hi"`` and ``load("dllm-waitingline-gemma").generate("hi")`` used to fail
with "set block_length=32" on a bundled model's first command."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli.main import main

PROMPT = "Reverse the list: [\"Ann Lee\", \"Bo Park\"]"


@pytest.fixture(scope="module")
def gemma():
    return dllm.load("dllm-waitingline-gemma")


def test_generate_defaults_decode_whole_canvases(gemma):
    canvas = gemma.model.config.canvas_length
    cut = gemma.generate(PROMPT, max_tokens=16)
    explicit = gemma.generate(PROMPT, max_tokens=16, block_length=canvas)  # what the user had to write
    assert cut.token_ids == explicit.token_ids and len(cut.token_ids[0]) <= 16
    whole = gemma.generate(PROMPT, gen_length=2 * canvas)
    assert whole.token_ids == gemma.generate(PROMPT, gen_length=2 * canvas, block_length=canvas).token_ids
    assert gemma.generate(PROMPT).finish_reasons[0] in ("eos", "length")  # gen_length 128: four canvases
    last = list(gemma.stream(PROMPT, max_tokens=16))[-1]
    assert last.finished and last.final_text == cut.texts[0]


def test_a_length_that_is_not_whole_canvases_is_still_refused(gemma):
    """gen_length is the canvas itself: it is not stretched to whole canvases behind the user's back."""
    with pytest.raises(ValueError, match="canvas_length"):
        gemma.generate(PROMPT, gen_length=48)
    with pytest.raises(ValueError, match="canvas_length"):
        gemma.generate(PROMPT, max_tokens=16, block_length=16)  # a block the user chose


def test_cli_generate_on_the_bundled_uniform_state_model(capsys):
    assert main(["-q", "generate", "--model", "dllm-waitingline-gemma", PROMPT, "--max-tokens", "16"]) == 0
    assert capsys.readouterr().out.strip()


def test_cli_chat_on_the_bundled_uniform_state_model(capsys, monkeypatch):
    """Each turn decodes whole canvases, also after /set max-tokens; a block the user sets that is
    not the canvas is refused with the fix (at /set: the next turn keeps the canvas)."""
    lines = f"{PROMPT}\n/set max-tokens=20\n{PROMPT}\n/set block-length=16\n{PROMPT}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["chat", "--model", "dllm-waitingline-gemma", "--max-tokens", "16"]) == 1  # piped: the /set failed
    out, err = capsys.readouterr()
    assert err.count("| NFE ") == 3 and out.strip()  # three answers (some may be empty text)
    assert err.count("error") == 1 and "set block_length=32" in err and "block_length=16" in err
    assert "options unchanged" in err


def test_chat_refuses_what_the_model_cannot_decode_before_the_first_turn(capsys, monkeypatch):
    """Command-line options the loaded model refuses end the chat at once (exit 2, one error line),
    and a /set that makes them is refused with the options unchanged; every turn used to fail
    with the same error while the chat went on (exit 0)."""
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{PROMPT}\n{PROMPT}\n"))
    assert main(["chat", "--model", "dllm-waitingline-gemma", "--temperature", "1"]) == 2
    out, err = capsys.readouterr()
    assert not out.strip() and err.count("error") == 1 and err.startswith("dllm chat: error: ")
    assert "t_min / t_max" in err
    monkeypatch.setattr("sys.stdin", io.StringIO(f"/set temperature=1\n{PROMPT}\n"))
    assert main(["chat", "--model", "dllm-waitingline-gemma", "--max-tokens", "16"]) == 1  # piped: the /set failed
    out, err = capsys.readouterr()
    assert "options unchanged" in err and err.count("error") == 1 and err.count("| NFE ") == 1
