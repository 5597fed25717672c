"""The ``dramatiq-cron`` command as an operator runs it: a subprocess
(``python -m dramatiq_cron_middleware``) from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.instances import ROOT


def dramatiq_cron(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``dramatiq-cron *args`` with ``env`` on top of this process's
    environment (the repository on ``PYTHONPATH``); returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "dramatiq_cron_middleware", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
