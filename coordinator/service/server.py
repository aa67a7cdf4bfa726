"""Process wiring for one coordinator node: Raft log + leader duties + HTTP server.

`serve()` runs until SIGTERM or SIGINT, then stops the HTTP server, the duties (the
leader's, the version records' and the pipelines' steps) and the Raft node in that order (so
no request is answered from a closed log).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from coordinator.addresses import is_loopback, split_host_port
from coordinator.config import ClusterConfig
from coordinator.service.duties import LeaderDuties
from coordinator.service.front import FrontDoorSite
from coordinator.service.http.app import create_app
from coordinator.service.membership import MembershipChanges
from coordinator.service.node import CoordinatorNode
from coordinator.service.pipeline_duty import PipelineDuty
from coordinator.service.versions import VersionDuty
from shared.tls import server_context
from shared.version import PACKAGE_VERSION

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0
# How long a thread may hold the GIL while another waits for it (CPython's default is 5 ms).
# A thread beside the event loop (the Raft stall guard here, pysyncobj's own tick thread in
# the raw benchmark node) gives the GIL up at every socket call and waits up to this long to
# get it back from a busy loop, and commits wait with it. docs/benchmarks.md says where
# the comparison is.
GIL_SWITCH_INTERVAL_S = 0.001
# The cyclic collector's thresholds (CPython's default is 700, 10, 10). A leader allocates
# objects per request that die young: at 700 the young generation is collected dozens of
# times a second and its survivors promoted, and full collections of a large worker table
# pause the leader. These keep collections rare and short at the same peak memory
# (docs/benchmarks.md, "Settings chosen by a one-off comparison").
GC_THRESHOLDS = (10_000, 50, 10)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop (a dependency wherever it builds), else asyncio's: the leader
    answers more heartbeats with the same core on it (docs/benchmarks.md); nothing in Ripple
    depends on which loop runs."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not build on
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_node_process(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` as a node's process does: with `GIL_SWITCH_INTERVAL_S` and `GC_THRESHOLDS`
    set, on `new_event_loop()` (the benchmarks' raw node runs the same way)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(main)


def run(config: ClusterConfig, node_id: str) -> None:
    """Serve one node until SIGTERM or SIGINT."""
    run_node_process(serve(config, node_id))


async def serve(config: ClusterConfig, node_id: str) -> None:
    config.check_can_serve()
    node = CoordinatorNode(config, node_id)
    duties = LeaderDuties(node)
    node.log.on_role_change(duties.on_role)
    node.log.on_role_change(lambda _role: node.metrics.on_role(node))
    changes = MembershipChanges(node)
    node.log.on_role_change(changes.on_role)
    app = create_app(node, duties, changes)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    host, port = split_host_port(node.spec.http, "http")
    ssl_context = None
    if config.tls_cert:
        ssl_context = server_context(config.tls_cert, config.tls_key)
    elif not is_loopback(host):
        log.warning(
            "node %s serves HTTP on %s without TLS: tokens cross the network in clear text "
            "(set tls_cert and tls_key)",
            node_id,
            node.spec.http,
        )
    site: web.BaseSite
    if config.http_front_door:
        site = FrontDoorSite(
            runner,
            host,
            port,
            body_bytes_max=config.body_bytes_max,
            ssl_context=ssl_context,
            grace_s=SHUTDOWN_GRACE_S,
            clock=node.clock,
        )
    else:
        site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    node.start()
    versions = VersionDuty(node)
    versions.start()
    pipeline_steps = PipelineDuty(node)
    pipeline_steps.start()
    await site.start()
    loop = asyncio.get_running_loop()
    log.info(
        "node %s runs ripple %s, command-set versions %s", node_id, PACKAGE_VERSION, node.speaks
    )
    log.info(
        "node %s: raft %s, http %s%s, event loop %s, GIL switch interval %g ms, gc thresholds %s",
        node_id,
        node.spec.raft,
        node.spec.url,
        " (front door)" if config.http_front_door else "",
        type(loop).__module__.split(".")[0],
        sys.getswitchinterval() * 1000,
        ",".join(map(str, gc.get_threshold())),
    )

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("node %s stopping", node_id)
        with contextlib.suppress(Exception):
            await runner.cleanup()
        await changes.close()
        await duties.close()
        await versions.close()
        await pipeline_steps.close()
        node.close()
