"""TLS for HTTP (without it, admin, join and worker tokens travel in clear text), with
certificates made in the test (tests/tls.py): a three-node cluster serving https://,
redirects and node URLs in https://, the SDK and the CLI verifying against the CA bundle,
the leader's calls to a TLS worker verified the same way, and the worker's own listener.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from coordinator.client import CoordinatorClient
from pipeline.store import LocalStore
from pipeline.worker import Worker
from shared.errors import ClientError
from shared.ports import free_ports
from testkit.cluster import Cluster
from testkit.http import call
from testkit.process import Proc, checkout_env, python_argv
from testkit.wait import wait_until
from tests.tls import TlsFiles, make_tls
from tests.unit.test_pipeline_worker import offline_settings


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tls: TlsFiles) -> Iterator[Cluster]:
    c = Cluster(
        Path(tmp_path_factory.mktemp("tls-cluster")),
        total_partitions=4,
        tls_cert=str(tls.cert),
        tls_key=str(tls.key),
        tls_ca=str(tls.ca),
    )
    with c.running() as running:
        yield running


def test_nodes_serve_https_only(cluster: Cluster, tls: TlsFiles) -> None:
    leader = cluster.ready()
    url = cluster.url(leader)
    assert url.startswith("https://127.0.0.1:")
    health = cluster.get(leader, "/v1/health")
    assert health.status == 200 and health.body["leader_url"].startswith("https://")
    # Clear text on the TLS port gets no answer from the API.
    host, port = url[len("https://") :].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5.0)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        conn.request("GET", "/v1/health")
        conn.getresponse()
    conn.close()
    # A client that does not trust the test CA refuses the server.
    with pytest.raises(ssl.SSLCertVerificationError):
        call("GET", url + "/v1/health", context=ssl.create_default_context())
    # A follower's redirect points at the leader's https:// URL.
    follower = next(s.id for s in cluster.specs if s.id != leader)
    r = cluster.post(follower, "/v1/workers", {"worker_id": "x", "address": "https://127.0.0.1:9"})
    assert r.status == 307 and r.headers["Location"].startswith(f"{url}/v1/workers")


async def test_sdk_verifies_against_the_ca_bundle(cluster: Cluster, tls: TlsFiles) -> None:
    urls = [s.url for s in cluster.specs]
    async with CoordinatorClient(urls, ca_file=str(tls.ca), deadline_s=20.0) as client:
        # Consistent: a follower may not have applied the bootstrap yet on a loaded machine.
        status = await client.get("/v1/status?consistent=true")
        assert status["cluster"]["total_partitions"] == 4
    async with CoordinatorClient(urls, deadline_s=2.0, timeout_s=1.0) as untrusting:
        with pytest.raises(ClientError) as exc:
            await untrusting.get("/v1/status")
        assert exc.value.code == "unreachable"


def test_cli_takes_a_ca_bundle(cluster: Cluster, tls: TlsFiles) -> None:
    leader = cluster.ready()
    base = python_argv("-m", "ripple.cli", "status", "--coordinator", cluster.url(leader))
    ok = subprocess.run(
        [*base, "--tls-ca", str(tls.ca), "--json"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0  # the system's roots do not include the test CA
    assert "certificate" in refused.stderr + refused.stdout


def test_leader_calls_a_tls_worker(cluster: Cluster, tls: TlsFiles) -> None:
    """The scripted worker serves https:// and verifies the coordinators; the leader's host
    calls reach it (verified against tls_ca), so its partitions go ONLINE."""
    cluster.ready()
    port = free_ports(1)[0]
    argv = python_argv("-m", "testkit.scripted_worker", "--worker-id", "tw", "--port", str(port))
    argv += ["--store", cluster.config.store, "--tls-cert", str(tls.cert)]
    argv += ["--tls-key", str(tls.key), "--tls-ca", str(tls.ca)]
    for s in cluster.specs:
        argv += ["--coordinator", s.url]
    proc = Proc(argv, cluster.root / "logs" / "tw.log", env=checkout_env())
    try:

        def online() -> Any:
            parts = cluster.get(cluster.leader(), "/v1/partitions?consistent=true").body
            return all(p["status"] == "online" and p["owner"] == "tw" for p in parts["partitions"])

        wait_until(online, "partitions ONLINE on the TLS worker", 60.0)
        ws = cluster.get(cluster.leader(), "/v1/workers").body["workers"]
        assert [w["address"] for w in ws if w["worker_id"] == "tw"] == [f"https://127.0.0.1:{port}"]
    finally:
        proc.stop()


async def test_worker_api_listens_with_tls(tmp_path: Path, tls: TlsFiles) -> None:
    port = free_ports(1)[0]
    settings = replace(
        offline_settings(tmp_path, "w1"),
        listen=f"127.0.0.1:{port}",
        tls_cert=str(tls.cert),
        tls_key=str(tls.key),
        tls_ca=str(tls.ca),
    )
    worker = Worker(settings, LocalStore(str(tmp_path / "store")))
    assert worker.address == f"https://127.0.0.1:{port}"
    runner = web.AppRunner(worker.app())
    await runner.setup()
    try:
        await worker.site(runner).start()
        trusted = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(tls.ca)))
        async with (
            aiohttp.ClientSession(connector=trusted) as session,
            session.get(f"https://127.0.0.1:{port}/v1/health") as r,
        ):
            assert r.status == 200 and (await r.json())["worker_id"] == "w1"
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"https://127.0.0.1:{port}/v1/health")
    finally:
        await runner.cleanup()
        await worker.client.close()
