"""The commands' diagnostics on stderr: an INFO line (a stats line) as written, a warning or error
prefixed with the command, ``dllm`` unless the record names another; an ``--out`` refused before any work."""
from __future__ import annotations

import logging

import pytest

from dllm.cli.output import LOGGER_NAME, configure_logging


def test_info_is_written_as_is_and_warnings_name_the_command(capsys):
    configure_logging()
    log = logging.getLogger(LOGGER_NAME)
    log.info("3 prompts, 24 tokens")
    log.warning("no GPU")
    log.error("bad input", extra={"prog": "dllm chat"})
    log.debug("hidden")
    assert capsys.readouterr().err == ("3 prompts, 24 tokens\ndllm: warning: no GPU\n"
                                       "dllm chat: error: bad input\n")


def test_an_out_directory_without_write_permission_is_refused(tmp_path, monkeypatch):
    """Root writes anywhere, so the permission is denied by the check's own question."""
    from dllm.cli import output

    asked = []
    monkeypatch.setattr(output.os, "access", lambda path, mode: asked.append((path, mode)) or False)
    with pytest.raises(ValueError, match=r"--out .*new cannot be written \(.* is not writable\)"):
        output.check_output_dir(tmp_path / "new")
    assert asked == [(tmp_path, output.os.W_OK | output.os.X_OK)]  # the nearest existing folder
