"""A thread beside a test: the watchers and load generators tests run next to what they
check. A subclass either defines `step`, run every `every_s` (at most `steps_max` times), or
overrides `_run` with a loop of its own that ends once `_stop` is set. `start` and `stop`,
or a context manager (started on entry, stopped on exit). `stop` waits for the thread with
a bound and raises what ended it early: a thread whose step or loop raised ends, and a
watcher or writer that died would otherwise leave the test checking less than it says."""

from __future__ import annotations

import threading
from typing import Self

__all__ = ["Background"]

JOIN_TIMEOUT_S = 30.0


class Background:
    every_s: float = 0.1
    steps_max: int | None = None
    join_timeout_s: float = JOIN_TIMEOUT_S  # longer for a loop whose one call may take longer

    def __init__(self, name: str | None = None) -> None:
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._guarded, name=name or type(self).__name__, daemon=True
        )
        self.error: BaseException | None = None  # what ended the thread, if it raised

    def step(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if self.steps_max is not None and self.steps >= self.steps_max:
                return
            self.step()
            self.steps += 1

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # raised in the test by stop()
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop the thread and wait for it (bounded); raise what ended it early, if anything."""
        self._stop.set()
        self._thread.join(self.join_timeout_s)
        name = self._thread.name
        assert not self._thread.is_alive(), f"the {name} thread did not stop"
        if self.error is not None:
            raise AssertionError(f"the {name} thread failed: {self.error!r}") from self.error

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
            return
        # The test failed already: stop the thread without hiding that failure.
        self._stop.set()
        self._thread.join(self.join_timeout_s)
