"""Scripted worker processes (`python -m testkit.scripted_worker`) registered with one
coordinator cluster, each tracked by PID.

A worker started again keeps its port, so the address it registers does not change. Its
`/test/*` endpoints let a test read what it was told (`state`), make it fall silent
without killing it (`silence`), and stop it as a restarting process stops and register it
again as the restarted one (`restart`, `rejoin`).
"""

from __future__ import annotations

from typing import Any

from shared.ports import free_ports
from testkit.cluster import Cluster
from testkit.http import HTTP_TIMEOUT_S, call
from testkit.process import Proc, checkout_env, python_argv

__all__ = ["HEARTBEAT_INTERVAL_S", "ScriptedWorkers"]

HEARTBEAT_INTERVAL_S = 0.3


class ScriptedWorkers:
    def __init__(self, cluster: Cluster, *, call_timeout_s: float = HTTP_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.call_timeout_s = call_timeout_s
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}

    def start(self, wid: str, *profile: str) -> Proc:
        """Start `wid`; `profile`: more of its arguments (`--label K=V`, `--slots N`)."""
        port = self.ports.get(wid) or free_ports(1)[0]
        argv = python_argv("-m", "testkit.scripted_worker", "--worker-id", wid, "--port", str(port))
        argv += ["--heartbeat-interval", str(HEARTBEAT_INTERVAL_S)]
        argv += ["--store", self.cluster.config.store, *profile]
        for s in self.cluster.specs:
            argv += ["--coordinator", s.url]
        proc = Proc(argv, self.cluster.root / "logs" / f"{wid}.log", env=checkout_env())
        self.procs[wid], self.ports[wid] = proc, port
        return proc

    def url(self, wid: str) -> str:
        return f"http://127.0.0.1:{self.ports[wid]}"

    def state(self, wid: str) -> dict[str, Any]:
        """Its gates and the log of every call it was made."""
        return call("GET", self.url(wid) + "/test/state", timeout_s=self.call_timeout_s).body  # type: ignore[no-any-return]

    def silence(self, wid: str) -> None:
        """No more heartbeats from `wid`; its process keeps running."""
        call(
            "POST",
            self.url(wid) + "/test/heartbeats",
            {"enabled": False},
            timeout_s=self.call_timeout_s,
        )

    def restart(self, wid: str, *, notice: bool = True) -> dict[str, Any]:
        """`wid` stops as a restarting process (telling the leader when `notice`); the
        leader's answer to the notice."""
        r = call(
            "POST",
            self.url(wid) + "/test/restart",
            {"notice": notice},
            timeout_s=self.call_timeout_s,
        )
        assert r.status == 200, r
        return r.body  # type: ignore[no-any-return]

    def rejoin(self, wid: str, *, with_token: bool = True) -> tuple[int, dict[str, Any]]:
        """`wid` registers again as its restarted process, presenting its kept token or not:
        the registration's status and body."""
        r = call(
            "POST",
            self.url(wid) + "/test/rejoin",
            {"with_token": with_token},
            timeout_s=self.call_timeout_s,
        )
        return r.status, r.body

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.stop()
