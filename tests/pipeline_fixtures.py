"""Shared fixtures of the pipeline tests: a real S3 protocol endpoint and one Spark server.

Import them explicitly (``from tests.pipeline_fixtures import moto_endpoint``). Both are
session-scoped: ONE moto server and ONE Spark Connect server per test run, each started as a
subprocess bound to 127.0.0.1 on a free port, waited for with a bounded poll, and stopped by
its PID at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.spark_server import SparkConnectServer, free_port

MOTO_START_TIMEOUT_S = 30.0
MOTO_STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.1
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto S3 server subprocess (dummy credentials are set in the environment)."""
    saved = {k: os.environ.get(k) for k in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto exited {proc.returncode}: {log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"moto not up in {MOTO_START_TIMEOUT_S}s") from None
                time.sleep(POLL_INTERVAL_S)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=MOTO_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=MOTO_STOP_TIMEOUT_S)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> tuple[Any, str]:
    """A boto3 client on the moto endpoint and a fresh, empty bucket for one test."""
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"ripple-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


@pytest.fixture(scope="session")
def spark_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the one Spark Connect server of this test run."""
    server = SparkConnectServer(str(tmp_path_factory.mktemp("spark")))
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
