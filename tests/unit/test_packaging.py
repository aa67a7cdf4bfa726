"""What the product's wheel holds, and how the checkout's own packages are found without it.

setup.cfg's `[options.packages.find]` is the one list of what is installed: the product
(coordinator, replication, pipeline, shared, ripple), never testkit, tests or bench, which
run from a checkout. A child process that runs one of those gets the checkout's root on its
path (`testkit.process.checkout_env`), so it finds them from any working directory.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import setuptools

from testkit.process import CHECKOUT_ROOT, checkout_env

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("coordinator", "replication", "pipeline", "shared", "ripple")
CHECKOUT_ONLY = ("testkit", "tests", "bench")
CHILD_TIMEOUT_S = 60.0


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _wheel_packages() -> list[str]:
    """The packages setuptools puts in the wheel, read the way it reads setup.cfg."""
    cfg = _setup_cfg()
    assert cfg["options"]["packages"].strip() == "find:"
    include = cfg["options.packages.find"]["include"].split()
    return setuptools.find_packages(where=str(ROOT), include=include)


def test_the_wheel_holds_the_product_and_nothing_else() -> None:
    packages = _wheel_packages()
    tops = {p.split(".")[0] for p in packages}
    assert tops == set(PRODUCT)
    for name in CHECKOUT_ONLY:
        assert not [p for p in packages if p == name or p.startswith(name + ".")]
    # Subpackages come along (an include of only the top names would drop them).
    assert {"coordinator.core", "coordinator.service", "coordinator.service.http"} <= set(packages)


def test_the_wheel_holds_every_product_package_in_the_checkout() -> None:
    """A product folder with an __init__.py that the include patterns miss would be left out
    of the wheel and found only in a checkout."""
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in PRODUCT
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk == set(_wheel_packages())


def test_a_child_finds_the_checkout_from_another_directory(tmp_path: Path) -> None:
    """`python -m testkit.…` from a working directory outside the checkout, as a test's
    child may run: with `checkout_env` it imports this checkout's testkit, tests and bench."""
    assert CHECKOUT_ROOT == ROOT
    code = "import bench, testkit, tests; print(testkit.__file__, tests.__file__, bench.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, **checkout_env()},
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for path in done.stdout.split():
        assert Path(path).resolve().is_relative_to(ROOT), path
