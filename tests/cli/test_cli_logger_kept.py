"""A command run in the test process (``main([...])``, as most CLI tests do) configures the
``dllm`` logger for a terminal: a handler on the stderr of that moment, no propagation. The suite
puts it back after each test (tests/conftest.py), so the next test in the worker does not log to
a closed capture stream nor lose its records to the root logger."""
from __future__ import annotations

import logging

from dllm.cli import main
from tests.conftest import logger_kept


def test_a_command_in_process_leaves_the_dllm_logger_as_it_found_it(request, capsys):
    assert "_keep_dllm_logger" in request.fixturenames  # every test gets the restore
    logger = logging.getLogger("dllm")
    before = list(logger.handlers), logger.level, logger.propagate
    with logger_kept("dllm"):
        assert main(["generate", "--model", "no/such/dir", "hi"]) == 2  # logging configured, then refused
        assert "does not exist" in capsys.readouterr().err
        assert (list(logger.handlers), logger.level, logger.propagate) != before  # what there is to undo
    assert (list(logger.handlers), logger.level, logger.propagate) == before
