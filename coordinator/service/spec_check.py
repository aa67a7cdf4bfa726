"""Checking a pipeline spec at create: `shared/spec`'s parse, run in a child process.

Owns where the owner's Python runs when the leader checks a spec. `parse_spec` compiles and
loads the spec's transform, which is code the coordinator did not write: it may loop, take
all memory, crash the interpreter or print without end. So the check never runs in the
coordinator's own process. Each check is one short-lived child (this module run with `-m`)
under an address-space and CPU-time limit it cannot raise, with its output bounded, killed by
its process group's id (its own PID) when it overruns `timeout_s`. Invariant: `check_spec`
returns only for a spec the child parsed whole, and otherwise raises a `RequestError` whose
`field` is a path into the request (`spec_text` or `spec_text.<the spec's field>`); at most
`CHECKS_IN_FLIGHT_MAX` children run at once, a check past that is a 503 to retry.

The bounds protect the coordinator from a transform's mistakes; they are not a sandbox
against a hostile one. The child gets none of the node's environment (its secrets may be
there), but it runs as the node's user: only the admin token may create a pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
import tomllib
from dataclasses import dataclass
from typing import Any

from shared.errors import RequestError, RippleError, UnavailableError
from shared.spec.ddl import DdlError, parse_ddl

__all__ = [
    "CHECKS_IN_FLIGHT_MAX",
    "CHECK_MEMORY_BYTES_MAX",
    "CHECK_TIMEOUT_S",
    "SpecChecker",
    "SpecSummary",
    "key_of",
]

# How long one check may take, start-up included (about 0.2 s on a quiet machine), before it
# is killed and the spec refused.
CHECK_TIMEOUT_S = 10.0
# The child's address space: room for the interpreter, pandas and a transform's own data.
CHECK_MEMORY_BYTES_MAX = 1024 * 1024 * 1024
# Children at once: each costs an interpreter's start, and creates are an operator's act.
CHECKS_IN_FLIGHT_MAX = 2
# The child's answer is one short JSON line; anything longer is not an answer.
ANSWER_BYTES_MAX = 64 * 1024
# The field every refusal is named under: the request's own.
FIELD = "spec_text"
# What the child keeps of this process's environment: where programs and locales are.
_ENV_KEPT = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecSummary:
    """What the child learned of a spec that parsed: its key column and output names."""

    key: str
    key_type: str  # the key column's type as DDL spells it (STRING, INT, BIGINT)
    outputs: tuple[str, ...]


def _refused(field: str | None, message: str, request_field: str = FIELD) -> RequestError:
    where = request_field if field in (None, "", "spec") else f"{request_field}.{field}"
    return RequestError(f"{where}: {message}", field=where, code="invalid")


def key_of(text: str) -> tuple[str, str] | None:
    """(the key column, its DDL type) of a spec the cluster already holds, read as TOML and
    DDL only (its transform is not loaded, so no owner's code runs); None if it has none."""
    try:
        schema = tomllib.loads(text).get("schema", {})
        key = schema["key"]
        column = parse_ddl(schema["ddl"]).column(key)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError, DdlError):
        return None
    return None if column is None else (key, column.type.ddl)


def window_of(text: str) -> dict[str, Any] | None:
    """A spec's `[window]` table as written (None: no window), read as TOML only (no owner's
    code runs). A spec update must keep it: open windows mean nothing under another one."""
    try:
        table = tomllib.loads(text).get("window")
    except tomllib.TOMLDecodeError:
        return None
    return dict(table) if isinstance(table, dict) else None


class SpecChecker:
    """Runs checks in children, at most `in_flight_max` at once."""

    def __init__(
        self,
        *,
        timeout_s: float = CHECK_TIMEOUT_S,
        memory_bytes_max: int = CHECK_MEMORY_BYTES_MAX,
        in_flight_max: int = CHECKS_IN_FLIGHT_MAX,
    ) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes_max = memory_bytes_max
        self.in_flight_max = in_flight_max
        self._in_flight = 0

    async def check(self, text: str, field: str = FIELD) -> SpecSummary:
        """The spec's summary, or the RequestError naming the field at fault (under the
        request's `field`: a create's `spec_text`, an update's `spec`)."""
        if self._in_flight >= self.in_flight_max:
            raise UnavailableError(
                f"{self._in_flight} spec checks are running, the most at once; retry",
                code="overloaded",
            )
        self._in_flight += 1
        try:
            return await self._run(text, field)
        finally:
            self._in_flight -= 1

    async def _run(self, text: str, field: str) -> SpecSummary:
        # Not this process's environment: it may hold the cluster's secrets (RIPPLE_*), which
        # the owner's code has no business reading.
        env = {k: os.environ[k] for k in _ENV_KEPT if k in os.environ}
        env |= {
            # The child imports what this process imports, from the same places.
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if os.path.isabs(p)),
            "OPENBLAS_NUM_THREADS": "1",  # numpy's thread pool would reserve memory per core
            "OMP_NUM_THREADS": "1",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            str(self.memory_bytes_max),
            str(max(1, int(self.timeout_s) + 1)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group, whose id is its PID
            cwd="/",  # not the node's directory
        )
        try:
            raw = await asyncio.wait_for(self._exchange(proc, text), self.timeout_s)
        except TimeoutError:
            raise _refused(
                "transform",
                f"checking the spec took longer than {self.timeout_s:g} s (does the transform "
                "loop or wait while it loads?)",
                field,
            ) from None
        finally:
            _kill(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()
        return _answer(raw, proc.returncode, field)

    @staticmethod
    async def _exchange(proc: asyncio.subprocess.Process, text: str) -> bytes:
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(text.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        raw = await proc.stdout.read(ANSWER_BYTES_MAX)
        await proc.wait()
        return raw


def _kill(pid: int) -> None:
    """End the child and anything it started: its process group, named by its PID."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _answer(raw: bytes, returncode: int | None, request_field: str) -> SpecSummary:
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        # No answer: the interpreter died (a signal, a memory limit, os._exit in the transform).
        raise _refused(
            "transform",
            f"checking the spec ended without an answer (exit status {returncode}); a "
            "transform that exhausts memory or ends the process while it loads is refused",
            request_field,
        )
    if answer.get("ok") is True:
        return SpecSummary(
            key=str(answer["key"]),
            key_type=str(answer["key_type"]),
            outputs=tuple(map(str, answer["outputs"])),
        )
    field = answer.get("field")
    message = str(answer.get("message", "is not a valid spec"))
    # parse_spec's messages start with their field, which the refusal says in its own way.
    message = message.removeprefix(f"{field}: ")
    raise _refused(None if field is None else str(field), message, request_field)


# -- the child ---------------------------------------------------------------------------------


def _child(memory_bytes_max: int, cpu_s: int) -> None:
    """Read a spec on stdin, parse it, write one JSON line on the original stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes_max, memory_bytes_max))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    out = os.fdopen(os.dup(1), "w")
    # What the owner's code prints goes nowhere: the answer is the one line written below.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (lives as long as the process)

    from shared.spec.parse import parse_spec

    try:
        spec = parse_spec(text)
    except RippleError as exc:
        answer: dict[str, object] = {"ok": False, "field": exc.field, "message": exc.message}
    except MemoryError:
        answer = {"ok": False, "field": "transform", "message": "ran out of memory while loading"}
    except BaseException as exc:  # the owner's code may raise anything, SystemExit included
        answer = {"ok": False, "field": "transform", "message": f"{type(exc).__name__}: {exc}"}
    else:
        key_column = spec.schema.column(spec.key)
        answer = {
            "ok": True,
            "key": spec.key,
            "key_type": "" if key_column is None else key_column.type.ddl,
            "outputs": [a.name for a in spec.aggregations],
        }
    out.write(json.dumps(answer)[:ANSWER_BYTES_MAX] + "\n")
    out.flush()
    os._exit(0)  # no interpreter shutdown: the owner's atexit hooks and threads do not run


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]))
