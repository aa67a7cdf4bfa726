"""Reading and writing the cluster file: `load_config` (the TOML file, then `RIPPLE_<KEY>`
environment variables, then command-line overrides, each value coerced to its key's type
with an error naming the key) and `render_toml` (what `ripple up` writes: derived timings
left out so they keep following the timeout).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from typing import Any

from coordinator.config import DERIVED_TIMINGS, ClusterConfig, NodeSpec, per_worker_migrations
from coordinator.config_rules import validate as validate_config
from shared.errors import ConfigError

__all__ = ["NODE_KEYS", "SCALAR_KEYS", "load_config", "render_toml"]


_FIELDS = {f.name: f for f in dataclasses.fields(ClusterConfig)}
SCALAR_KEYS = tuple(k for k in _FIELDS if k != "nodes")


def _coerce(key: str, raw: Any) -> Any:
    """Coerce a TOML/env/flag value to the field's type, with a clear error."""
    default = getattr(ClusterConfig(), key)
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(raw)  # int(1.5) would silently make it 1
            return int(raw)
        if isinstance(default, float):
            if isinstance(raw, bool):
                raise ValueError(raw)
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError(raw)
            return number
        return str(raw)
    except (TypeError, ValueError) as exc:
        kind = "finite number" if isinstance(default, float) else type(default).__name__
        raise ConfigError(f"{key}: cannot use {raw!r}, need a {kind}", field=key) from exc


NODE_KEYS = frozenset({"id", "raft", "http", "raft_bind"})


def _parse_nodes(raw: Any) -> tuple[NodeSpec, ...]:
    if not isinstance(raw, list):
        raise ConfigError("nodes must be an array of tables", field="nodes")
    nodes = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not {"id", "raft", "http"} <= set(item) <= NODE_KEYS:
            raise ConfigError(
                f"nodes[{i}] needs id, raft and http (and optionally raft_bind)", field="nodes"
            )
        bind = item.get("raft_bind")
        nodes.append(
            NodeSpec(
                id=str(item["id"]),
                raft=str(item["raft"]),
                http=str(item["http"]),
                raft_bind=None if bind is None else str(bind),
            )
        )
    return tuple(nodes)


def load_config(
    path: str | os.PathLike[str] | None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    validate: bool = True,
) -> ClusterConfig:
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}", field="config") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {path} is not valid TOML: {exc}", field="config") from exc
        for key, raw in doc.items():
            if key == "nodes":
                values["nodes"] = _parse_nodes(raw)
            elif key in _FIELDS:
                values[key] = _coerce(key, raw)
            else:
                raise ConfigError(f"unknown config key {key!r}", field=key)
    env = os.environ if env is None else env
    for key in SCALAR_KEYS:
        env_key = f"RIPPLE_{key.upper()}"
        if env_key in env:
            values[key] = _coerce(key, env[env_key])
    for key, raw in (overrides or {}).items():
        if raw is not None:
            values[key] = _coerce(key, raw)
    config = ClusterConfig(**values)
    if validate:
        validate_config(config)
    return config


def render_toml(config: ClusterConfig) -> str:
    """The config as a TOML document (used by `ripple up` to write its cluster file)."""
    lines = []
    for key in SCALAR_KEYS:
        value = getattr(config, key)
        if key in DERIVED_TIMINGS and value == config.heartbeat_timeout_s * DERIVED_TIMINGS[key]:
            # Left out, it is derived again on load and keeps following heartbeat_timeout_s
            # when the environment or a flag changes the timeout.
            continue
        if key == "max_migrations_per_worker" and value == per_worker_migrations(
            config.max_concurrent_migrations
        ):
            continue  # derived again on load, from max_concurrent_migrations alike
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, int | float):
            lines.append(f"{key} = {value}")
        else:
            escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{key} = "{escaped}"')
    for n in config.nodes:
        lines += ["", "[[nodes]]", f'id = "{n.id}"', f'raft = "{n.raft}"', f'http = "{n.http}"']
        if n.raft_bind is not None:
            lines.append(f'raft_bind = "{n.raft_bind}"')
    return "\n".join(lines) + "\n"
