"""Session-wide test servers: ONE Spark Connect server and ONE moto S3 server per run.

Both are real processes on 127.0.0.1 free ports, started lazily by the first test that
asks, tracked by PID and stopped by that PID at the end of the session. `--soak` enables
the long chaos runs (tests marked `soak`). Hypothesis runs without per-example deadlines.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from shared.ports import free_ports
from testkit.process import Proc
from testkit.wait import wait_until

MOTO_START_TIMEOUT_S = 60.0

# No per-example deadline: the property tests judge results, never speed, and on a shared
# machine one example can stall for a second behind the other processes' work.
settings.register_profile("ripple", deadline=None)
settings.load_profile("ripple")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak/chaos tests")
    parser.addoption(
        "--rewrite-testdata",
        action="store_true",
        help="regenerate the expected output of the planner scenario files",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        # The marker, not `item.keywords`: keywords hold every directory name on the path,
        # so a checkout under a directory called "soak" would skip the whole suite.
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from pipeline.spark_server import SparkConnectServer

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    server = SparkConnectServer(str(tmp_path_factory.mktemp("spark")))
    url = server.start()
    try:
        yield url
    finally:
        _stop_spark_client_session()
        server.stop()


def _stop_spark_client_session() -> None:
    """Stop this process's Spark Connect client session (tests share it via getOrCreate).

    Its gRPC threads are not daemons: left open, they keep pytest alive after the last test
    (the summary prints, the process never exits). Stop it while the server still answers.
    """
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is None:
        return
    session = connect.SparkSession._get_default_session()
    if session is not None:
        session.stop()


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3 protocol endpoint (moto's server) for boto3; dummy credentials."""
    import urllib.request

    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)
    port = free_ports(1)[0]
    log = Path(tmp_path_factory.mktemp("moto")) / "moto.log"
    proc = Proc([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with urllib.request.urlopen(url + "/moto-api/", timeout=1) as r:
            return bool(r.status == 200)

    try:
        wait_until(up, "moto server", MOTO_START_TIMEOUT_S)
        yield url
    finally:
        proc.stop()


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> tuple[Any, str]:
    """A boto3 client on the moto endpoint and a fresh, empty bucket for one test."""
    import uuid

    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"ripple-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket
