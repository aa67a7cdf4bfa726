"""Fixtures the chaos tests share: `matrix`, the fault matrix's running pipeline with no
fault of a cell file's own wired in (a file that needs one, a disk shim or a Spark server of
its own, defines its own `matrix` over `open_matrix`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.matrix import Matrix, open_matrix


@pytest.fixture
def matrix(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[Matrix]:
    with open_matrix(tmp_path, spark_remote, moto_endpoint, s3_bucket[1]) as m:
        yield m
