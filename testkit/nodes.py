"""A cluster of node processes on 127.0.0.1: start them, find the one leader they agree on,
call them over HTTP, stop them by PID.

What each node runs is a `NodeProgram`: its command line, the path of its health answer and
how the answers of the live nodes name one agreed leader. `testkit.cluster.Cluster` runs
`ripple coordinator` on it; the benchmarks run their bare-Raft baseline nodes on it. Every
node is a `testkit.process.Proc` (its output in `<root>/logs/<node id>.log`); every wait is
bounded. `node_env` gives one node variables of its own over the inherited environment
(a fault shim's ``LD_PRELOAD`` for that node alone), on every start of that node.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.http import Reply, call
from testkit.process import Proc
from testkit.wait import GiveUp, wait_until

__all__ = ["HEALTH_TIMEOUT_S", "Healths", "NodeCluster", "NodeProgram"]

HEALTH_TIMEOUT_S = 2.0
WRITE_CALL_TIMEOUT_S = 3.0
WRITE_RETRY_S = 0.02
# A read a node sheds (503 `overloaded`, its loop lagging) is asked again, as every client
# does after Retry-After, within this bound; each wait is at most OVERLOADED_WAIT_S_MAX.
OVERLOADED_READ_S_MAX = 20.0
OVERLOADED_WAIT_S_MAX = 0.5

# Node id -> its health answer, for every node asked (all of them answered).
Healths = Mapping[str, dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeProgram:
    """What runs on each node of a `NodeCluster`."""

    argv: Callable[[str], list[str]]  # node id -> its command line
    health_path: str
    # The leader every answer agrees on, or None while they do not agree on one.
    agreed_leader: Callable[[Healths], str | None]


class NodeCluster:
    """Node processes of one `program`, at `urls` (node id -> base URL)."""

    def __init__(
        self,
        root: Path,
        program: NodeProgram,
        urls: Mapping[str, str],
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.root = root
        self.program = program
        self.urls = dict(urls)
        self.context = context  # trusted for https:// nodes
        self.procs: dict[str, Proc] = {}
        # Node id -> variables merged over the inherited environment on each of its starts.
        self.node_env: dict[str, dict[str, str]] = {}

    # -- processes ---------------------------------------------------------------------------

    def start(self, node_id: str) -> Proc:
        return self.spawn(node_id, self.program.argv(node_id))

    def spawn(self, node_id: str, argv: list[str]) -> Proc:
        """Start node `node_id` with `argv` (again, after its last process exited)."""
        proc = Proc(argv, self.root / "logs" / f"{node_id}.log", env=self.node_env.get(node_id))
        self.procs[node_id] = proc
        return proc

    def start_all(self) -> None:
        for node_id in self.urls:
            self.start(node_id)

    @contextlib.contextmanager
    def running(self, timeout_s: float = 60.0) -> Iterator[NodeCluster]:
        """Every node started and the cluster ready; every node stopped after."""
        self.start_all()
        try:
            self.ready(timeout_s)
            yield self
        finally:
            self.stop_all()

    def kill9(self, node_id: str) -> None:
        self.procs[node_id].kill9()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def alive(self) -> list[str]:
        # A copy first: load threads ask while the test adds and retires nodes.
        return [nid for nid, p in list(self.procs.items()) if p.alive()]

    # -- http ---------------------------------------------------------------------------------

    def url(self, node_id: str) -> str:
        return self.urls[node_id]

    def health(self, node_id: str) -> dict[str, Any] | None:
        try:
            r = call(
                "GET",
                self.url(node_id) + self.program.health_path,
                timeout_s=HEALTH_TIMEOUT_S,
                context=self.context,
            )
        except OSError:
            return None
        return r.body if r.status == 200 else None

    def leader(self, timeout_s: float = 30.0, among: list[str] | None = None) -> str:
        """The id of the single ready leader that every live node (or every node of
        `among`) agrees on."""

        def agreed() -> str | None:
            if among is None and self.procs and not self.alive():
                # Every node exited (a refused config, a port taken): say why at once
                # rather than wait out the timeout for a leader that cannot come.
                tails = {n: p.output()[-600:] for n, p in self.procs.items()}
                raise GiveUp(f"every node exited before electing a leader: {tails}")
            healths = {n: self.health(n) for n in among or self.alive()}
            answered = {n: h for n, h in healths.items() if h is not None}
            if len(answered) != len(healths):
                return None
            return self.program.agreed_leader(answered)

        return wait_until(agreed, "one agreed ready leader", timeout_s)

    def ready(self, timeout_s: float = 30.0) -> str:
        """The agreed leader once the cluster serves; a program with more to wait for than
        its leader says so by overriding this."""
        return self.leader(timeout_s)

    def post(self, node_id: str, path: str, body: Any, **kw: Any) -> Reply:
        return call("POST", self.url(node_id) + path, body, context=self.context, **kw)

    def get(self, node_id: str, path: str, **kw: Any) -> Reply:
        """GET from one node; a shed read (503 `overloaded`) is asked again within a bound,
        any other answer comes back as it is."""
        deadline = time.monotonic() + OVERLOADED_READ_S_MAX
        while True:
            r = call("GET", self.url(node_id) + path, context=self.context, **kw)
            shed = (
                r.status == 503 and isinstance(r.body, dict) and r.body.get("error") == "overloaded"
            )
            if not shed or time.monotonic() >= deadline:
                return r
            time.sleep(min(float(r.headers.get("Retry-After", "1")), OVERLOADED_WAIT_S_MAX))

    def write_via_any(self, path: str, body: Any, *, timeout_s: float = 30.0, **kw: Any) -> Reply:
        """POST to whichever node answers, following redirects and 503s, until it lands."""
        deadline = time.monotonic() + timeout_s
        last: Reply | None = None
        while time.monotonic() < deadline:
            for nid in self.alive():
                try:
                    r = self.post(nid, path, body, timeout_s=WRITE_CALL_TIMEOUT_S, **kw)
                    if r.status == 307:
                        loc = r.headers["Location"]
                        r = call(
                            "POST",
                            loc,
                            body,
                            timeout_s=WRITE_CALL_TIMEOUT_S,
                            context=self.context,
                            **kw,
                        )
                except OSError:
                    continue
                last = r
                if r.status < 500 and r.status != 307:
                    return r
            time.sleep(WRITE_RETRY_S)
        raise AssertionError(f"no write landed within {timeout_s} s (last: {last})")
