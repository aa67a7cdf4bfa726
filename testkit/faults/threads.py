"""The threads of one fault tool (a proxy's accept loop, its connections' pumps).

Invariant: every thread started here is a daemon, and `join` waits for each at most
``JOIN_TIMEOUT_S``, so closing a tool never hangs a test on a stuck peer. Finished threads
drop out at each start, so the set stays as long as the live one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["JOIN_TIMEOUT_S", "Threads"]

JOIN_TIMEOUT_S = 5.0


class Threads:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=self.name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def join(self) -> None:
        """Wait for every thread started so far (each at most JOIN_TIMEOUT_S)."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(JOIN_TIMEOUT_S)

    def alive(self) -> int:
        with self._lock:
            return sum(t.is_alive() for t in self._threads)
