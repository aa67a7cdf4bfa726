"""The aiohttp pin and the internals the front door uses, checked against the installed aiohttp.

setup.cfg accepts one minor series of aiohttp because coordinator/service/front_aiohttp.py
uses names aiohttp does not document (listed in its `INTERNALS`). These tests fail when the
installed aiohttp is outside the declared range, when the range is widened past one minor
series, or when any of those names is missing or has changed shape: bumping the pin means
running them against the new release and adjusting the adapter.
"""

from __future__ import annotations

import ast
import asyncio
import configparser
import inspect
import typing
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from aiohttp import web, web_protocol
from packaging.requirements import Requirement
from packaging.version import Version

from coordinator.service import front_aiohttp

ROOT = Path(__file__).resolve().parents[2]
FRONT = ROOT / "coordinator" / "service" / "front.py"


def _declared(name: str) -> Requirement:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    found = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    (req,) = [r for r in found if r.name == name]
    return req


def test_the_installed_aiohttp_is_in_the_declared_range() -> None:
    req = _declared("aiohttp")
    installed = metadata.version("aiohttp")
    assert req.specifier.contains(installed), (installed, str(req.specifier))


def test_the_declared_aiohttp_range_is_one_minor_series() -> None:
    """Nothing of the next minor release, nor of the one before, is accepted: a new minor
    may move an internal, so it is taken only by editing the pin after these tests pass."""
    spec = _declared("aiohttp").specifier
    installed = Version(metadata.version("aiohttp"))
    major, minor = installed.major, installed.minor
    assert not spec.contains(f"{major}.{minor + 1}.0", prereleases=True)
    assert not spec.contains(f"{major + 1}.0.0", prereleases=True)
    if minor > 0:
        assert not spec.contains(f"{major}.{minor - 1}.999")
    assert spec.contains(f"{major}.{minor}.{installed.micro}")


def _request_handler() -> None:
    handler = web_protocol.RequestHandler
    assert issubclass(handler, asyncio.Protocol)
    made = list(inspect.signature(handler.connection_made).parameters)
    received = list(inspect.signature(handler.data_received).parameters)
    assert (made, received) == (["self", "transport"], ["self", "data"])


def _runner_server() -> None:
    assert isinstance(inspect.getattr_static(web.BaseRunner, "server"), property)
    # Calling the server makes a RequestHandler, as TCPSite's listening socket does.
    assert typing.get_type_hints(web.Server.__call__)["return"] is web_protocol.RequestHandler
    assert list(inspect.signature(web.Server.__call__).parameters) == ["self"]


def _site_slot(name: str, init_parameter: str | None) -> Callable[[], None]:
    def check() -> None:
        assert name in web.BaseSite.__slots__
        init = inspect.getsource(web.BaseSite.__init__)
        if init_parameter is not None:
            assert init_parameter in inspect.signature(web.BaseSite.__init__).parameters
            assert f"self.{name} = {init_parameter}" in init
        else:
            assert f"self.{name}" in init

    return check


def _site_server() -> None:
    _site_slot("_server", None)()
    # BaseSite.stop closes it and BaseRunner.addresses reads it: setting it is what makes
    # the front door's listening socket the runner's like any site's.
    assert "self._server.close()" in inspect.getsource(web.BaseSite.stop)
    addresses = inspect.getattr_static(web.BaseRunner, "addresses")
    assert "site._server" in inspect.getsource(addresses.fget)


CHECKS: dict[str, Callable[[], None]] = {
    "aiohttp.web_protocol.RequestHandler": _request_handler,
    "aiohttp.web.BaseRunner.server": _runner_server,
    "aiohttp.web.BaseSite._runner": _site_slot("_runner", "runner"),
    "aiohttp.web.BaseSite._ssl_context": _site_slot("_ssl_context", "ssl_context"),
    "aiohttp.web.BaseSite._backlog": _site_slot("_backlog", "backlog"),
    "aiohttp.web.BaseSite._server": _site_server,
}


def test_every_internal_the_adapter_names_is_checked() -> None:
    named = [name for name, why in front_aiohttp.INTERNALS if why]
    assert len(named) == len(front_aiohttp.INTERNALS)  # each with its reason
    assert set(named) == set(CHECKS)


def test_every_internal_has_the_shape_the_adapter_uses() -> None:
    for name, check in CHECKS.items():
        try:
            check()
        except (AssertionError, AttributeError, KeyError, TypeError) as exc:
            raise AssertionError(f"aiohttp {metadata.version('aiohttp')}: {name}") from exc


def test_the_front_door_uses_no_internal_but_through_the_adapter() -> None:
    """front.py's code (not its prose) names none of them: they stay in one module."""
    tails = {name.rsplit(".", 1)[1] for name, _ in front_aiohttp.INTERNALS} | {"web_protocol"}
    used: set[str] = set()
    for node in ast.walk(ast.parse(FRONT.read_text())):
        if isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update((node.module or "").split("."))
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Name):
            used.add(node.id)
    assert not tails & used
