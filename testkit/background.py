"""A step run in a thread every `every_s` until stopped: the watchers and load generators
tests run beside what they check. A context manager: the thread starts on entry and is
stopped and joined (bounded) on exit; `steps_max` bounds how often the step runs. A step
that raises ends the thread, and the exit raises it in the test: a watcher that died would
otherwise leave the test checking less than it says."""

from __future__ import annotations

import threading
from typing import Self

__all__ = ["Background"]

JOIN_TIMEOUT_S = 30.0


class Background:
    """Subclasses define `step`; an exception in it ends the thread (a watcher catches what
    it expects itself)."""

    every_s: float = 0.1
    steps_max: int | None = None

    def __init__(self) -> None:
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None  # what ended the thread, if a step raised

    def step(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        if self.error is not None and exc[0] is None:
            raise AssertionError(f"{type(self).__name__} failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                if self.steps_max is not None and self.steps >= self.steps_max:
                    return
                self.step()
                self.steps += 1
        except Exception as exc:  # raised in the test by __exit__
            self.error = exc
