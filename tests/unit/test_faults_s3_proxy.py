"""The S3 fault proxy against a real moto server: faithful outside its windows; inside them
S3's error answers at the scheduled rate, resets, latency, held requests and a refused port,
each counted and each ending with its window."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from testkit.faults.s3_proxy import Fault, S3FaultProxy, Window
from testkit.wait import wait_until

SEED = 39
REQUESTS = 200
READ_TIMEOUT_S = 0.5


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(moto_endpoint, seed=SEED) as p:
        yield p


@pytest.fixture
def stored(proxy: S3FaultProxy, s3_bucket: tuple[Any, str]) -> tuple[Any, str]:
    """A client through the proxy and a bucket holding the object k = b"v"."""
    direct, bucket = s3_bucket
    direct.put_object(Bucket=bucket, Key="k", Body=b"v")
    return client(proxy.url), bucket


def client(url: str) -> Any:
    """boto3 with retries off, so each call is one raw request and its fault shows."""
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        config=Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=1,
            read_timeout=READ_TIMEOUT_S,
        ),
    )


def test_forwards_put_and_get_whole(proxy: S3FaultProxy, s3_bucket: tuple[Any, str]) -> None:
    direct, bucket = s3_bucket
    via = client(proxy.url)
    body = bytes(range(256)) * 4096
    via.put_object(Bucket=bucket, Key="k", Body=body)
    assert direct.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    assert via.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    assert proxy.forwarded == 2 and proxy.refused == 0


def test_error_rate_hits_its_share_with_s3_codes(
    proxy: S3FaultProxy, stored: tuple[Any, str]
) -> None:
    via, bucket = stored
    proxy.schedule(
        [
            Window(fault=Fault.SLOW_DOWN, start_s=0, end_s=60, rate=0.2),
            Window(fault=Fault.INTERNAL_ERROR, start_s=0, end_s=60, rate=0.125),
        ]
    )
    seen: dict[tuple[str, int], int] = {}
    ok = 0
    for _ in range(REQUESTS):
        try:
            via.get_object(Bucket=bucket, Key="k")["Body"].read()
            ok += 1
        except ClientError as exc:
            key = (
                exc.response["Error"]["Code"],
                exc.response["ResponseMetadata"]["HTTPStatusCode"],
            )
            seen[key] = seen.get(key, 0) + 1
    counts = proxy.counts()
    # Both scheduled faults answer, each with S3's own code and status, counted by the proxy.
    assert set(seen) == {("SlowDown", 503), ("InternalError", 500)}
    assert seen[("SlowDown", 503)] == counts[Fault.SLOW_DOWN]
    assert seen[("InternalError", 500)] == counts[Fault.INTERNAL_ERROR]
    failed = REQUESTS - ok
    assert 0.2 * REQUESTS <= failed <= 0.4 * REQUESTS, (failed, proxy.seed)
    assert proxy.forwarded == ok


def test_same_seed_hits_the_same_requests(moto_endpoint: str, s3_bucket: tuple[Any, str]) -> None:
    direct, bucket = s3_bucket
    direct.put_object(Bucket=bucket, Key="k", Body=b"v")
    runs = []
    for _ in range(2):
        with S3FaultProxy(moto_endpoint, seed=SEED) as p:
            via = client(p.url)
            p.inject(Fault.SLOW_DOWN, duration_s=60, rate=0.5)
            pattern = []
            for _ in range(30):
                try:
                    via.head_object(Bucket=bucket, Key="k")
                    pattern.append(True)
                except ClientError:
                    pattern.append(False)
            runs.append(pattern)
    assert runs[0] == runs[1] and True in runs[0] and False in runs[0]


def test_fault_ends_with_its_window(proxy: S3FaultProxy, stored: tuple[Any, str]) -> None:
    via, bucket = stored
    began = time.monotonic()
    proxy.inject(Fault.SERVICE_UNAVAILABLE, duration_s=1.0)
    with pytest.raises(ClientError) as down:
        via.get_object(Bucket=bucket, Key="k")
    assert down.value.response["Error"]["Code"] == "ServiceUnavailable"

    def back() -> bool:
        return bool(via.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v")

    wait_until(back, "the store answering after its window", 5.0, 0.1)
    assert time.monotonic() - began >= 1.0
    refused = proxy.refused
    for _ in range(5):
        assert via.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    assert proxy.refused == refused


def test_latency_adds_at_least_the_delay(proxy: S3FaultProxy, stored: tuple[Any, str]) -> None:
    via, bucket = stored
    proxy.inject(Fault.LATENCY, duration_s=10, delay_s=0.3)
    for _ in range(3):
        began = time.monotonic()
        via.head_object(Bucket=bucket, Key="k")
        assert time.monotonic() - began >= 0.3
    assert proxy.counts()[Fault.LATENCY] == 3 and proxy.forwarded == 3
    proxy.clear()
    began = time.monotonic()
    via.head_object(Bucket=bucket, Key="k")
    assert time.monotonic() - began < 0.3


def test_reset_and_timeout_reach_the_client(proxy: S3FaultProxy, stored: tuple[Any, str]) -> None:
    via, bucket = stored
    proxy.inject(Fault.RESET, duration_s=10)
    with pytest.raises(ConnectionClosedError):
        via.get_object(Bucket=bucket, Key="k")
    proxy.clear()
    proxy.inject(Fault.TIMEOUT, duration_s=10, delay_s=3 * READ_TIMEOUT_S)
    began = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        via.get_object(Bucket=bucket, Key="k")
    assert READ_TIMEOUT_S <= time.monotonic() - began < 3 * READ_TIMEOUT_S
    counts = proxy.counts()
    assert counts[Fault.RESET] == 1 and counts[Fault.TIMEOUT] == 1 and proxy.forwarded == 0


def test_unreachable_refuses_connects_then_listens_again(
    proxy: S3FaultProxy, stored: tuple[Any, str]
) -> None:
    via, bucket = stored
    via.head_object(Bucket=bucket, Key="k")  # a keep-alive connection open before the outage
    proxy.inject(Fault.UNREACHABLE, duration_s=1.5)
    assert not proxy.listening
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
    with pytest.raises((EndpointConnectionError, ConnectionClosedError)):
        via.head_object(Bucket=bucket, Key="k")
    assert proxy.counts()[Fault.UNREACHABLE] == 1

    def back() -> bool:
        return bool(via.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v")

    wait_until(back, "the proxy listening on its port again", 5.0, 0.1)
    assert proxy.listening


def test_windows_are_bounded() -> None:
    with pytest.raises(ValueError):
        Window(fault=Fault.SLOW_DOWN, start_s=0, end_s=10_000)
    with pytest.raises(ValueError):
        Window(fault=Fault.UNREACHABLE, start_s=0, end_s=1, rate=0.5)
    with pytest.raises(ValueError):
        Window(fault=Fault.LATENCY, start_s=0, end_s=1)
    with pytest.raises(ValueError):
        Window(fault=Fault.SLOW_DOWN, start_s=2, end_s=1)


def test_ended_windows_are_dropped(proxy: S3FaultProxy) -> None:
    # Internal, on purpose: what is kept is what every request scans.
    proxy.inject(Fault.SLOW_DOWN, duration_s=0.05)
    wait_until(lambda: proxy._windows[0].end <= time.monotonic(), "the window's end", 5.0)
    proxy.inject(Fault.INTERNAL_ERROR, duration_s=60)
    assert [s.window.fault for s in proxy._windows] == [Fault.INTERNAL_ERROR]
