"""The `ripple` command run as an operator runs it: a child process of this interpreter, with
no `RIPPLE_*` settings from the caller's environment, its output captured, bounded in time."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["CLI_TIMEOUT_S", "ripple"]

CLI_TIMEOUT_S = 120.0


def ripple(*args: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ripple.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={"PATH": "/usr/bin:/bin"},  # no RIPPLE_URL or token from the caller's environment
    )
