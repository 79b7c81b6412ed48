"""Lines the plugin prints for its user while pytest runs: a capacity search's points as they
finish, the ``--llm-server-cmd`` server's start-up.

pytest captures what a test writes (unless ``-s``), so these lines go past its capture, as its
live logging does: through the terminal reporter, each on a line of its own (after the result
letters of ``-q``, which pytest leaves open, too). An xdist worker's terminal reporter writes
nowhere (execnet takes the worker's stdout), so on a worker the lines go to its stderr, which
reaches the terminal of the ``pytest -n`` run, each behind the worker's id as xdist writes it
(``[gw0] point 1/12 ...``). With no terminal reporter (``-p no:terminal``) nothing is printed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import pytest


def line_writer(config: pytest.Config) -> Callable[[str], None] | None:
    """A function that prints one line to the user's terminal, whenever it is called (capture
    or not); None where nothing can be printed (see the module docstring)."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if worker is None and terminal is None:
        return None
    capture = config.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if worker is not None:
                sys.stderr.write(f"[{worker}] {line}\n")
                sys.stderr.flush()
                return
            assert terminal is not None  # not on a worker, so there is one (checked above)
            terminal.ensure_newline()  # ends the line of "file.py .." that pytest knows is open
            if config.get_terminal_writer().width_of_current_line:  # -q's letters: one it does not
                terminal.write("\n")
            terminal.write_line(line)

    return write
