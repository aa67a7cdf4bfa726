"""A duty a node runs beside its HTTP server: one `step` every `interval_s`, for its life.

Owns the loop the duties that read the applied state and propose what it asks for share
(the version records', the pipelines' steps): started once, cancelled and awaited at close,
and never ended by a failed step. A RippleError (no leader yet, an election, a refusal) is
logged at the duty's `quiet_level` and the next round reads the state again; any other
exception is logged with its traceback, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from shared.errors import RippleError

__all__ = ["PeriodicDuty"]


class PeriodicDuty:
    """Subclasses give `step` and `interval_s` (and may lower `quiet_level`'s noise)."""

    interval_s: float
    quiet_level: int = logging.DEBUG

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._log = logging.getLogger(type(self).__module__)

    async def step(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        name = type(self).__name__
        while True:
            try:
                await self.step()
            except RippleError as exc:
                self._log.log(self.quiet_level, "%s: not done this round: %s", name, exc.message)
            except Exception:
                self._log.exception("%s step raised; continuing", name)
            await asyncio.sleep(self.interval_s)
