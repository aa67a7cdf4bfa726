"""The node table of the TOML config: `raft_bind` (listen somewhere other than the address
the peers dial) round-trips, defaults to `raft`, and bad node tables are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import ClusterConfig, NodeSpec, load_config, render_toml
from coordinator.errors import ConfigError

SECRET = "unit-secret-0123456789abcdef"
ADMIN = "unit-admin-token-0123456789"


def nodes(*specs: NodeSpec) -> ClusterConfig:
    return ClusterConfig(cluster_secret=SECRET, admin_token=ADMIN, nodes=specs)


def spec(i: int, bind: str | None = None) -> NodeSpec:
    return NodeSpec(id=f"n{i}", raft=f"127.0.0.1:70{i}0", http=f"127.0.0.1:80{i}0", raft_bind=bind)


def test_raft_bind_round_trips_and_defaults_to_raft(tmp_path: Path) -> None:
    config = nodes(spec(1, "127.0.0.1:7111"), spec(2), spec(3))
    path = tmp_path / "cluster.toml"
    path.write_text(render_toml(config))
    loaded = load_config(path, env={})
    assert loaded.nodes == config.nodes
    assert [n.raft_listen for n in loaded.nodes] == [
        "127.0.0.1:7111",
        "127.0.0.1:7020",
        "127.0.0.1:7030",
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('id = "n1"\nraft = "127.0.0.1:1"', "needs id, raft and http"),
        ('id = "n1"\nraft = "127.0.0.1:1"\nhttp = "127.0.0.1:2"\nport = 3', "needs id, raft"),
        (
            'id = "n1"\nraft = "127.0.0.1:1"\nhttp = "127.0.0.1:2"\nraft_bind = "0.0.0.0:1"',
            "explicit address",
        ),
    ],
)
def test_bad_node_tables_are_clear_errors(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(f'cluster_secret = "{SECRET}"\nadmin_token = "{ADMIN}"\n\n[[nodes]]\n{table}\n')
    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


def test_two_nodes_may_not_listen_on_one_raft_port() -> None:
    clash = nodes(spec(1, "127.0.0.1:7020"), spec(2), spec(3))
    with pytest.raises(ConfigError, match="raft_listen addresses must be unique"):
        clash.validate()
