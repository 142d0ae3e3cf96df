"""``dllm chat`` through stdin / stdout: each turn answers the whole conversation exactly as
``generate`` does; /reset, /set and /exit; the live display shows the canvas filling."""
from __future__ import annotations

import io

import pytest

import dllm
from dllm.cli.chat import MASK_GLYPH, run_chat
from dllm.cli import main
from tests.chat_helpers import line_reader

GEN = dict(gen_length=16, block_length=8)
ARGS = ["--gen-length", "16", "--block-length", "8"]


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def _conversation_answers(lm, turns: list[tuple[str, dict]]) -> list[str]:
    """What generate answers for each user turn given the history before it (None: /reset)."""
    history, answers = [], []
    for text, options in turns:
        if text is None:
            history = []
            continue
        history.append({"role": "user", "content": text})
        answer = lm.generate(history, **{**GEN, **options}).texts[0]
        history.append({"role": "assistant", "content": answer})
        answers.append(answer)
    return answers


def test_turns_answer_the_whole_conversation_with_reset_set_and_exit(lm, monkeypatch, capsys):
    expected = _conversation_answers(lm, [("Copy: Ann Lee", {}), ("Reverse: Bo Kim, Cy Dunn", {}),
                                          ("again", {"steps": 8}), (None, {}), ("Copy: Ann Lee", {"steps": 8})])
    stdin = "Copy: Ann Lee\nReverse: Bo Kim, Cy Dunn\n/set steps=8\nagain\n/reset\nCopy: Ann Lee\n/exit\nnever\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["chat", "--no-live", *ARGS]) == 0
    captured = capsys.readouterr()
    assert captured.out == "".join(answer + "\n" for answer in expected)
    assert "(conversation cleared)" in captured.err and "(set steps=8)" in captured.err
    assert captured.err.count("| NFE") == 4


def test_end_of_input_ends_the_session(lm):
    out = io.StringIO()
    assert run_chat(lm, dllm.GenerationConfig(**GEN), live=False, read_line=line_reader(["Copy: Ann Lee"]), out=out) == 0
    assert out.getvalue() == _conversation_answers(lm, [("Copy: Ann Lee", {})])[0] + "\n"


def test_piped_input_with_a_failed_line_exits_1_and_a_prompt_session_0(lm):
    """A script piping lines learns that one failed, as from any command; a person at the prompt
    saw the error and the session went on, so leaving it is no failure."""
    config = dllm.GenerationConfig(**GEN)
    for interactive, status in ((False, 1), (True, 0)):
        out = io.StringIO()
        assert run_chat(lm, config, live=False, read_line=line_reader(["/nope", "Copy: Ann Lee"]), out=out,
                        interactive=interactive) == status
        answer = _conversation_answers(lm, [("Copy: Ann Lee", {})])[0]
        assert out.getvalue() == answer + "\n" + ("\n" if interactive else "")  # a prompt's line ends at Ctrl-D
    assert run_chat(lm, config, live=False, read_line=line_reader(["/nope", "/exit"]), out=io.StringIO()) == 1


def test_live_display_redraws_the_filling_canvas_then_prints_the_final_text(lm):
    out = io.StringIO()
    run_chat(lm, dllm.GenerationConfig(**GEN), live=True, read_line=line_reader(["Copy: Ann Lee"]), out=out)
    frames = out.getvalue().split("\r\x1b[K")
    answer = _conversation_answers(lm, [("Copy: Ann Lee", {})])[0]
    assert frames[-1] == answer + "\n"
    drawn = frames[1:-1]
    assert len(drawn) > 1 and MASK_GLYPH in drawn[0]
    assert sum(f.count(MASK_GLYPH) for f in drawn[:1]) >= sum(f.count(MASK_GLYPH) for f in drawn[-1:])


def test_bad_set_and_failed_turns_leave_the_session_as_it_was(lm, monkeypatch, capsys):
    expected = _conversation_answers(lm, [("Copy: Ann Lee", {}), ("again", {})])
    stdin = ("Copy: Ann Lee\n/set block_length=5\n/set bogus=1\n/set temperature\n/set gen_length=488\n" + "again\n"
             "/set gen_length=16\n/nope\nagain\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["chat", "--no-live", *ARGS]) == 1  # piped input whose lines failed: a script sees it
    captured = capsys.readouterr()
    # block_length=5 and bogus are refused at /set; gen_length=488 leaves room for a message in
    # the context of 512, but not for this conversation: that turn fails and is forgotten
    assert "not a multiple of block_length" in captured.err and "unknown generation option" in captured.err
    assert "expected key=value, got 'temperature' (e.g. /set temperature=0.7, " in captured.err
    assert "context" in captured.err and "unknown command '/nope'" in captured.err
    assert captured.out == "".join(answer + "\n" for answer in expected)


def test_a_tokenizer_without_chat_template_is_refused(lm, monkeypatch):
    monkeypatch.setattr(lm.tokenizer, "chat_template", None)
    with pytest.raises(ValueError, match="no chat template"):
        run_chat(lm, dllm.GenerationConfig(**GEN), live=False, read_line=line_reader([]), out=io.StringIO())


def test_live_is_the_default_on_a_terminal_and_no_live_on_a_pipe(lm, monkeypatch, capsys):
    import sys

    for tty, live in ((True, True), (False, False)):
        monkeypatch.setattr("sys.stdin", io.StringIO("Copy: Ann Lee\n"))
        monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
        assert main(["chat", *ARGS]) == 0
        assert ("\r\x1b[K" in capsys.readouterr().out) == live


def test_a_failed_turn_reads_as_the_cli_s_errors_and_the_chat_goes_on(lm, monkeypatch, capsys):
    """Each error line is ``dllm chat: error: ...``, as ``main`` prints bad input for every command;
    a decode that fails (here: out of memory) costs its turn only."""
    expected = _conversation_answers(lm, [("Copy: Ann Lee", {})])
    real_stream = lm.stream
    calls = iter([RuntimeError("CUDA out of memory"), None])

    def stream(*args, **kwargs):
        failure = next(calls)
        if failure is not None:
            raise failure
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(lm, "stream", stream)
    monkeypatch.setattr("dllm.load", lambda *args, **kwargs: lm)
    monkeypatch.setattr("sys.stdin", io.StringIO("Copy: Ann Lee\n/nope\n/set bogus=1\nCopy: Ann Lee\n"))
    assert main(["chat", "--no-live", *ARGS]) == 1  # piped lines that failed
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "error" in line]
    assert len(errors) == 3 and all(line.startswith("dllm chat: error: ") for line in errors), errors
    assert "CUDA out of memory" in errors[0]
    assert captured.out == expected[0] + "\n"  # the failed turn left no trace in the conversation


def test_a_block_longer_than_max_tokens_is_the_canvas_generate_decodes(lm, monkeypatch, capsys):
    """--block-length 32 --max-tokens 6: one 32-position block, as generate(block_length=32,
    max_tokens=6); the config's block equalled its gen_length, so it was read as derived from the
    length and shrank to the 6-token answer (another canvas, another text)."""
    turn = [{"role": "user", "content": "Copy: Ann Lee"}]
    expected = lm.generate(turn, block_length=32, max_tokens=6).texts[0]
    assert expected != lm.generate(turn, max_tokens=6).texts[0]  # the block changes this answer
    monkeypatch.setattr("sys.stdin", io.StringIO("Copy: Ann Lee\n"))
    assert main(["chat", "--no-live", "--block-length", "32", "--max-tokens", "6"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_ollamas_commands_and_set_without_equals(lm, monkeypatch, capsys):
    """/set key value (and ollama's /set parameter key value) set as key=value does; /clear, /?
    and /bye are ollama's /reset, /help and /exit."""
    expected = _conversation_answers(lm, [("Copy: Ann Lee", {"steps": 8}), (None, {}),
                                          ("Copy: Ann Lee", {"steps": 8, "temperature": 0.5})])
    stdin = ("/set steps 8\nCopy: Ann Lee\n/clear\n/set parameter temperature 0.5\n/?\nCopy: Ann Lee\n/bye\n"
             "never\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["chat", "--no-live", *ARGS]) == 0  # no line failed
    captured = capsys.readouterr()
    assert captured.out == "".join(answer + "\n" for answer in expected)
    assert "(set steps=8)" in captured.err and "(set temperature=0.5)" in captured.err
    assert "(conversation cleared)" in captured.err and "commands: /reset" in captured.err


def test_the_live_line_is_the_default_on_terminals_that_move_the_cursor(monkeypatch):
    from dllm.cli.chat import redraws_in_place

    class Out(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    for tty, term, live in ((True, "xterm-256color", True), (True, "dumb", False), (False, "xterm", False)):
        monkeypatch.setenv("TERM", term)
        assert redraws_in_place(Out(tty)) is live
