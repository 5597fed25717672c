"""Ctrl+C reaches the processes the tests start, however the suite was
started (tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.support.instances import ROOT

CHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_process_a_test_starts_takes_ctrl_c_even_when_the_suite_was_started_ignoring_it() -> None:
    """Given the suite's process started with SIGINT ignored (a background
    job of a non-interactive shell: ``bash scripts/test.sh &``), when it
    has loaded the tests' conftest and starts a Python process, then that
    process turns SIGINT into KeyboardInterrupt, as at a terminal.  (It
    inherited SIG_IGN: ``backfill``'s Ctrl+C test waited 120 s for a
    command that never heard it, in a newcomer's background run only.)"""
    suite = (
        "import subprocess, sys; import tests.conftest; "
        f"print(subprocess.run([sys.executable, '-c', {CHILD!r}], capture_output=True, text=True).stdout.strip())"
    )
    done = subprocess.run(
        [sys.executable, "-c", suite],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_ignore_interrupts,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "True", done.stderr
