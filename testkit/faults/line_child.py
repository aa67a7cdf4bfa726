"""A child process driven one line at a time: the probe the fault kit's tests put under a fault.

Owns one child (tracked by PID, ended by PID) that reads a command a line on stdin and answers
a line on stdout. Invariant: every answer is awaited at most ``ANSWER_TIMEOUT_S``, and `stop`
ends the child within a bound whatever state it is in.
"""

from __future__ import annotations

import os
import select
import subprocess

__all__ = ["LineChild"]

ANSWER_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class LineChild:
    """`argv` run with `env` added to this process's environment."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.pid = self.popen.pid

    def ask(self, line: str) -> str:
        """Send `line`; the child's one-line answer, without its newline."""
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()
        ready, _, _ = select.select([self.popen.stdout], [], [], ANSWER_TIMEOUT_S)
        if not ready:
            raise TimeoutError(f"no answer to {line!r} within {ANSWER_TIMEOUT_S} s")
        answer = self.popen.stdout.readline()
        if not answer:
            raise EOFError(f"the child exited (rc {self.popen.poll()}) on {line!r}")
        return answer.rstrip("\n")

    def stop(self) -> None:
        """End of input, then the child's own exit; SIGKILL to its PID if it does not."""
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        try:
            self.popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(STOP_TIMEOUT_S)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
