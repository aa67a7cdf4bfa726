"""Security probes that need no cluster: the worker's HTTP API, the credentials, the
health digest and the token comparisons.

Probe -> test:
- worker: non-ASCII digits in a partition path     test_worker_non_ascii_partition_digits
- worker: non-ASCII / undecodable bearer           test_worker_non_ascii_and_undecodable_tokens
- tokens keyed like the Raft password; expiry      test_keys_are_derived_per_purpose,
                                                   test_worker_token_claims_and_expiry
- drain compared the admin token with ==           test_no_bearer_token_compared_with_eq
- ?digest=true encoded under the apply lock        test_digest_is_encoded_outside_the_lock
- wildcard binds by string compare; HTTP unchecked test_wildcard_binds_are_parsed,
                                                   test_worker_refuses_a_wildcard_listen
- cluster file briefly world-readable              test_cluster_file_is_private_from_creation
- new owner loaded another partition's checkpoint  test_new_owner_loads_only_what_it_was_sent
- coordinator and pipeline name objects alike      test_store_base_is_how_the_stores_name_objects
- a store mismatch message leaks user information  test_store_mismatch_names_stores_without_userinfo
- addresses restricted to configured networks      test_worker_networks_restrict_addresses
  (the coordinator side of the checkpoint references is tests/integration/test_duties.py:
  test_checkpoints_fenced_by_epoch_owner_and_offset, test_release_reply_with_a_foreign_...)
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coordinator.addresses import is_wildcard, split_host_port
from coordinator.config import ClusterConfig, NodeSpec
from coordinator.config_file import load_config
from coordinator.config_rules import validate as validate_config
from coordinator.core.snapshot import encode_state
from coordinator.core.state import ClusterState
from coordinator.core.versions import SPOKEN
from coordinator.service import address as address_module
from coordinator.service.address import HOST_VERDICTS_CACHED_MAX, check_address
from coordinator.service.auth import (
    call_token,
    derive_key,
    issue_token,
    raft_password,
    read_worker_token,
    token_matches,
)
from coordinator.service.http import views
from coordinator.service.http.context import DUTIES_KEY, NODE_KEY
from pipeline.lease import Lease
from pipeline.state import KeyState
from pipeline.store import LocalStore, open_store
from pipeline.worker import Worker
from shared.checkpoint_ref import (
    canonical_uri,
    checkpoint_key,
    shown_store,
    store_base,
    store_mismatch,
)
from shared.errors import ConfigError, RequestError
from shared.http_statuses import status_of
from testkit.process import python_argv
from tests.unit.test_pipeline_worker import offline_settings

SECRET = "unit-secret-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


def _worker(tmp_path: Path) -> Worker:
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "store")))
    worker.call_token, worker.total_partitions = call_token(SECRET, "w1", 1), 8
    worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
    return worker


async def _raw_status(port: int, request: bytes) -> int:
    """Send exactly these bytes (aiohttp's client would re-encode the header)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        reply = await asyncio.wait_for(reader.read(65_536), 10.0)
    finally:
        writer.close()
    assert b"Traceback" not in reply
    return int(reply.split(b" ", 2)[1])


async def test_worker_non_ascii_partition_digits(tmp_path: Path) -> None:
    """'%D9%A1' was read as partition 1; '%C2%B2' was a 500."""
    worker = _worker(tmp_path)
    try:
        async with TestClient(TestServer(worker.app())) as client:
            for digits in ("%C2%B2", "%D9%A1", "%EF%BC%91"):
                for path in (f"/v1/partitions/{digits}/keys/k", f"/v1/partitions/{digits}/state"):
                    r = await client.get(path)
                    assert r.status == 400, (path, r.status, await r.text())
                    assert (await r.json())["field"] == "partition"
    finally:
        await worker.client.close()


async def test_worker_non_ascii_and_undecodable_tokens(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        async with TestClient(TestServer(worker.app(), host="127.0.0.1")) as client:
            port = client.port
            assert port is not None
            for token in (b"\xc3\xa9", b"\xff\xfe", b"1.\xc2\xb2"):
                for path in (b"/v1/partitions/1/host", b"/v1/checkpoint"):
                    body = b'{"epoch": 2}'
                    request = (
                        b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        b"Authorization: Bearer " + token + b"\r\n"
                        b"Content-Type: application/json\r\n"
                        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                    )
                    status = await _raw_status(port, request)
                    assert status == 401, (token, path, status)
            # The genuine call token still works (the check is not just "refuse all").
            auth = {"Authorization": f"Bearer {call_token(SECRET, 'w1', 1)}"}
            r = await client.post("/v1/checkpoint", headers=auth)
            assert r.status == 202
    finally:
        await worker.client.close()


def test_keys_are_derived_per_purpose() -> None:
    keys = {
        derive_key(SECRET, b"ripple/worker-token/v1"),
        derive_key(SECRET, b"ripple/leader-call/v1"),
        bytes.fromhex(raft_password(SECRET)),
        SECRET.encode(),
    }
    assert len(keys) == 4  # no credential is another's key, nor the secret itself
    assert raft_password(SECRET) != raft_password(SECRET + "x")


def test_worker_token_claims_and_expiry() -> None:
    now = 1_700_000_000_000
    token = issue_token(SECRET, "w.1-a", 3, now + 1000)
    claims = read_worker_token(SECRET, f"Bearer {token}", now)
    assert (claims.worker_id, claims.incarnation, claims.expires_at_ms) == ("w.1-a", 3, now + 1000)
    with pytest.raises(RequestError, match="expired"):
        read_worker_token(SECRET, f"Bearer {token}", now + 1000)
    forged = [
        token.replace("w.1-a", "w.1-b"),  # another worker's id under this MAC
        token.replace(".3.", ".4."),  # another incarnation
        token.replace(str(now + 1000), str(now + 10**9)),  # a later expiry
        issue_token(SECRET + "x", "w.1-a", 3, now + 1000),  # another cluster
        call_token(SECRET, "w.1-a", 3),  # the leader's call token is no worker token
        "w.\u0663.1.ab",
        "",
    ]
    for bad in forged:
        with pytest.raises(RequestError) as exc:
            read_worker_token(SECRET, f"Bearer {bad}", now)
        assert status_of(exc.value) == 401, bad
    assert token_matches("admin-token-0123456789", "Bearer admin-token-0123456789")
    assert not token_matches("admin-token-0123456789", "Bearer \udcff")
    assert not token_matches("", "Bearer ")


def test_tokens_are_the_same_bytes_release_to_release() -> None:
    """Golden values: a token issued before an upgrade must verify after it (a rolling
    restart keeps workers' tokens), so the MAC's derivation and encoding never drift. These
    were computed with HKDF + `hmac.new(...).hexdigest()`, before `_mac` moved to
    `hmac.digest` and then to precomputed pad states."""
    secret = "golden-secret-0123456789abcdef0123"
    assert issue_token(secret, "w.1-a", 3, 1_700_000_001_000) == (
        "w.1-a.3.1700000001000.eacca192d69f3f933899194b80107b5e696400c2b7d393c91883cb0eef7df0bc"
    )
    assert call_token(secret, "w.1-a", 3) == (
        "3.6e9dcef0de9fc1c254492166e13b456b2b69355cdb873a2b117a8a07e28eb77c"
    )


def test_mac_is_hmac_sha256_of_the_derived_key() -> None:
    """`_mac` builds HMAC from pad states by hand: it must equal the library's HMAC for any
    message, shorter or longer than a block, and for each purpose's key."""
    import hmac

    from coordinator.service import auth

    for info in (auth.WORKER_TOKEN_INFO, auth.CALL_TOKEN_INFO):
        for parts in (("w", 1), ("x" * 200, 7, 1_700_000_000_000), ("", "")):
            msg = "\x00".join(str(p) for p in parts).encode()
            expected = hmac.new(derive_key(SECRET, info), msg, hashlib.sha256).hexdigest()
            assert auth._mac(SECRET, info, *parts) == expected


def test_verified_tokens_are_kept_bounded_and_forgeries_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coordinator.service import auth

    monkeypatch.setattr(auth, "VERIFIED_TOKENS_CACHED_MAX", 4)
    monkeypatch.setattr(auth, "_verified", {})
    macs = 0
    real_mac = auth._mac

    def counting_mac(*args: object) -> str:
        nonlocal macs
        macs += 1
        return real_mac(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(auth, "_mac", counting_mac)
    now = 1_700_000_000_000
    token = issue_token(SECRET, "w1", 1, now + 1000)
    macs = 0
    for _ in range(3):
        assert read_worker_token(SECRET, f"Bearer {token}", now).worker_id == "w1"
    assert macs == 1  # verified once, then read from the kept claims
    with pytest.raises(RequestError, match="expired"):
        read_worker_token(SECRET, f"Bearer {token}", now + 1000)  # a kept token still expires
    # The same text under another cluster's secret is checked afresh, and refused.
    with pytest.raises(RequestError, match="invalid"):
        read_worker_token(SECRET + "x", f"Bearer {token}", now)
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    for _ in range(2):
        with pytest.raises(RequestError, match="invalid"):
            read_worker_token(SECRET, f"Bearer {forged}", now)
    assert all(forged not in header for _, header in auth._verified)
    # Kept by the exact header: the same token sent otherwise is parsed and checked afresh,
    # and the claims carry the token itself (what a heartbeat hands back).
    macs = 0
    claims = read_worker_token(SECRET, f"Bearer {token}  ", now)
    assert macs == 1 and claims.token == token
    assert read_worker_token(SECRET, f"Bearer {token}", now).token == token
    for i in range(10):
        read_worker_token(SECRET, f"Bearer {issue_token(SECRET, f'w{i}', 1, now + 1000)}", now)
        assert len(auth._verified) <= 4


def test_no_bearer_token_compared_with_eq() -> None:
    """Every token comparison goes through hmac.compare_digest (auth.token_matches): no
    `==`/`!=` with a `Bearer ...` string anywhere in the HTTP handlers, the admission
    policy or the worker's API."""
    handlers = sorted(p.relative_to(ROOT) for p in (ROOT / "coordinator/service/http").glob("*.py"))
    assert Path("coordinator/service/http/worker_routes.py") in handlers
    others = ("coordinator/service/auth.py", "pipeline/http_api.py", "shared/messages/common.py")
    for rel in (*handlers, *map(Path, others)):
        tree = ast.parse((ROOT / rel).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                continue
            text = ast.unparse(node)
            assert "Bearer" not in text and "token" not in text.lower(), f"{rel}: {text}"


class _Node:
    """Just what the health handler reads; `read()` records whether the lock is held."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.locked = False
        self.node_id = "n1"
        self.config = ClusterConfig()
        self.speaks = SPOKEN  # what the node speaks, shown in health
        self.cluster_id = "c1"
        self.is_voter = True

    def voter_nodes(self) -> tuple[()]:
        return ()

    @contextlib.contextmanager
    def read(self) -> Iterator[ClusterState]:
        self.locked = True
        try:
            yield self.state
        finally:
            self.locked = False

    def leader_info(self) -> Any:
        from tests.unit.test_duty_loop import ready_leader_info

        return ready_leader_info(applied_index=5)


async def test_digest_is_encoded_outside_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    from coordinator.core.commands import Bootstrap
    from coordinator.core.state import apply

    state = ClusterState()
    apply(state, "r1", Bootstrap(total_partitions=64, now_ms=1))
    node = _Node(state)
    seen: list[bool] = []

    def encode_watched(s: ClusterState) -> bytes:
        seen.append(node.locked)
        return encode_state(s)

    monkeypatch.setattr(views, "encode_state", encode_watched)
    # create_app needs a real node (metrics, duties); the handler alone needs only this.
    web_app = web.Application()
    web_app[NODE_KEY] = node  # type: ignore[misc]
    web_app[DUTIES_KEY] = SimpleNamespace(running=True)  # health says if duties run
    web_app.router.add_get("/v1/health", views.health)
    async with TestClient(TestServer(web_app)) as client:
        r = await client.get("/v1/health?digest=true")
        assert r.status == 200, await r.text()
        body = await r.json()
    assert body["state_digest"] == hashlib.sha256(encode_state(state)).hexdigest()
    assert seen == [False]


WILDCARDS = ["0:7101", "0.0.0.0:7101", "[::]:7101", "[::0]:7101", "0x0:7101", "0.0:7101", ":7101"]


@pytest.mark.parametrize("where", ["raft_bind", "http"])
@pytest.mark.parametrize("addr", WILDCARDS)
def test_wildcard_binds_are_parsed(where: str, addr: str) -> None:
    """`0:7101` passed the string compare; HTTP binds were not checked at all."""
    base = {"id": "n1", "raft": "127.0.0.1:7001", "http": "127.0.0.1:8001"}
    node = NodeSpec(**{**base, where: addr})
    config = ClusterConfig(cluster_secret=SECRET, admin_token="a" * 20, nodes=(node,))
    with pytest.raises(ConfigError, match="every interface"):
        validate_config(config)
    validate_config(replace(config, allow_wildcard_bind=True))  # said explicitly: allowed


def test_bind_addresses_that_are_not_wildcards() -> None:
    for addr in ("127.0.0.1:1", "[::1]:7101", "n1:7101", "10.0.0.5:65535"):
        assert not is_wildcard(split_host_port(addr, "x")[0]), addr
    for bad in ("127.0.0.1", "::1:7101", "h:0", "h:65536", "h:\u0661"):
        with pytest.raises(ConfigError):
            split_host_port(bad, "x")


def test_worker_refuses_a_wildcard_listen(tmp_path: Path) -> None:
    argv = [
        *python_argv("-m", "ripple.cli", "worker"),
        *("--coordinator", "http://127.0.0.1:9", "--worker-id", "w1", "--listen", "0:9101"),
        *("--store", f"file://{tmp_path}", "--spark-remote", "sc://127.0.0.1:9"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "every interface" in done.stderr + done.stdout


def test_cluster_file_is_private_from_creation(tmp_path: Path) -> None:
    """`ripple up` wrote the file (0644 under the usual umask) and chmodded it after: every
    file under the data dir that holds secrets must be created with its mode in open(2)."""
    from ripple.local_cluster import up_config

    data_dir = str(tmp_path / "data")
    writes: list[tuple[str, object]] = []
    watching = True

    def hook(event: str, args: tuple[object, ...]) -> None:
        if watching and event == "open" and str(args[0]).startswith(data_dir):
            mode, flags = args[1], args[2]
            creating = (isinstance(mode, str) and ("w" in mode or "a" in mode or "x" in mode)) or (
                isinstance(flags, int) and flags & os.O_CREAT
            )
            if creating:
                writes.append((str(args[0]), mode))

    sys.addaudithook(hook)  # cannot be removed: `watching` turns it off
    try:
        path = up_config(data_dir, 3, {})
    finally:
        watching = False
    assert writes, "the cluster file was not written through open()"
    # os.open reports mode None (the permission bits go to open(2)); builtin open reports
    # its mode string and creates the file with 0666 & ~umask.
    assert all(mode is None for _, mode in writes), writes
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_config(path).cluster_secret


@pytest.mark.parametrize(
    "store", ["file:///tmp/rs", "file:///tmp/rs/", "file:///tmp/a%20b/../rs", "file://localhost/x"]
)
def test_store_base_is_how_the_stores_name_objects(store: str) -> None:
    """The coordinator computes the canonical URI from the `store` setting alone; it must be
    exactly what a worker's store (opened from the same URI) returns for the object."""
    opened = open_store(store)
    key = checkpoint_key(3, 7, 42)
    assert canonical_uri(store, 3, 7, 42) == opened.uri(key)
    assert store_base(store) == opened.uri("")


def test_s3_store_base_matches_the_s3_store() -> None:
    from pipeline.store import S3Store

    for store, (bucket, prefix) in {
        "s3://b/p": ("b", "/p"),
        "s3://b/p/q/": ("b", "/p/q/"),
        "s3://b": ("b", ""),
    }.items():
        s3 = S3Store(bucket, prefix, endpoint_url="http://127.0.0.1:9")
        assert canonical_uri(store, 1, 2, 3) == s3.uri(checkpoint_key(1, 2, 3)), store
    for bad in ("http://x/y", "s3:///p", "file://host/x", "file:relative", "s3://b/p?x=1"):
        with pytest.raises(ValueError):
            store_base(bad)


def test_store_mismatch_names_stores_without_userinfo() -> None:
    """Two spellings of one store match; another store is named in the refusal, and
    whatever user information a URI carries is not (the message goes to the registrant and
    into the leader's log)."""
    assert store_mismatch("s3://b/p", "s3://b/p/") is None
    assert store_mismatch("file:///tmp/rs", "file://localhost/tmp/a/../rs") is None
    assert store_mismatch("", "s3://anything") is None  # nothing to compare with
    problem = store_mismatch("s3://key:secret@b/p", "s3://KEY2:pw2@c/p")
    assert problem is not None
    assert "s3://***@b/p" in problem and "s3://***@c/p" in problem
    assert not any(word in problem for word in ("secret", "key:", "KEY2", "pw2"))
    assert shown_store("file:///tmp/rs") == "file:///tmp/rs"
    with pytest.raises(ValueError):
        store_mismatch("s3://b/p", "ftp://x/y")


async def test_new_owner_loads_only_what_it_was_sent(tmp_path: Path) -> None:
    """Partition 5's checkpoint sent as partition 3's, a checkpoint of another epoch or
    offset, or an object outside the store: refused (503, the leader falls back), never
    loaded. The right one loads."""
    worker = _worker(tmp_path)
    store_uri = f"file://{tmp_path / 'store'}"
    state = {"K": KeyState.of(1.0, 4)}
    five = worker.checkpoints.write(5, 1, 42, state)
    three = worker.checkpoints.write(3, 1, 40, state)
    auth = {"Authorization": f"Bearer {call_token(SECRET, 'w1', 1)}"}
    bad = [
        {"uri": five, "epoch": 1, "offset": 42},  # another partition's
        {"uri": three, "epoch": 1, "offset": 41},  # another offset than its name
        {"uri": three, "epoch": 2, "offset": 40},  # another epoch than its name
        {"uri": "file:///etc/passwd", "epoch": 1, "offset": 40},
        {"uri": canonical_uri("s3://other/x", 3, 1, 40), "epoch": 1, "offset": 40},
    ]
    try:
        async with TestClient(TestServer(worker.app())) as client:
            for ck in bad:
                body = {"epoch": 2, "checkpoint": ck}
                r = await client.post("/v1/partitions/3/host", json=body, headers=auth)
                assert r.status == 503, (ck, r.status, await r.text())
                assert 3 not in worker.parts
            for epoch in (0, 2**63, True, "2"):
                r = await client.post("/v1/partitions/3/host", json={"epoch": epoch}, headers=auth)
                assert r.status == 400 and (await r.json())["field"] == "epoch", epoch
            good = {"uri": canonical_uri(store_uri, 3, 1, 40), "epoch": 1, "offset": 40}
            assert good["uri"] == three
            r = await client.post(
                "/v1/partitions/3/host", json={"epoch": 2, "checkpoint": good}, headers=auth
            )
            assert r.status == 200, await r.text()
            assert (await r.json())["offset"] == 40 and worker.parts[3].state == state
    finally:
        await worker.client.close()


def test_worker_networks_restrict_addresses() -> None:
    base = {"cluster_secret": SECRET, "admin_token": "a" * 20}
    config = ClusterConfig(**base, worker_networks="10.0.0.0/8, fd00::/8")
    validate_config(config)
    nets = config.worker_network_list()
    assert check_address("http://10.1.2.3:9101", nets)
    assert check_address("https://[fd00::5]:9101", nets)
    for outside in ("http://192.168.0.1:9101", "http://[::1]:9101", "http://w1.internal:9101"):
        with pytest.raises(RequestError) as exc:
            check_address(outside, nets)
        assert exc.value.field == "address"
    assert check_address("http://w1.internal:9101")  # no networks set: names are fine
    # A host's kept verdict is per network list: allowed under none, refused under one that
    # does not hold it, allowed again under none (the order a shared cache would get wrong).
    only_other = ClusterConfig(**base, worker_networks="172.16.0.0/12").worker_network_list()
    assert check_address("http://10.1.2.3:9102")
    with pytest.raises(RequestError, match="not in worker_networks"):
        check_address("http://10.1.2.3:9102", only_other)
    assert check_address("http://10.1.2.3:9103", nets)
    for i in range(HOST_VERDICTS_CACHED_MAX + 50):  # distinct hosts: the kept ones stay bounded
        check_address(f"http://h{i}.internal:1")
    assert address_module._host_refusal.cache_info().currsize <= HOST_VERDICTS_CACHED_MAX
    with pytest.raises(ConfigError):
        validate_config(ClusterConfig(**base, worker_networks="10.0.0.0/8, nonsense"))


def test_generated_request_ids_never_repeat() -> None:
    """A request id without an Idempotency-Key is the dedup table's key: a repeat would answer
    a new command with an old one's result. Distinct within a process (the counter) and
    between processes (the random prefix), valid ids, and never the length of a hashed
    client key."""
    from coordinator.core.model import REQUEST_ID_LEN_MAX, valid_id
    from coordinator.service.stamps import new_request_id

    ids = [new_request_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert all(valid_id(i) and len(i) <= 32 < REQUEST_ID_LEN_MAX for i in ids)
    code = "from coordinator.service.stamps import new_request_id; print(new_request_id())"
    others = {
        subprocess.run(
            python_argv("-c", code), capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(others) == 2 and not others & set(ids)
    assert len({o[:16] for o in others} | {ids[0][:16]}) == 3
