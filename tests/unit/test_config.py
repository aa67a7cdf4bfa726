"""The node table of the TOML config: `raft_bind` (listen somewhere other than the address
the peers dial) round-trips, defaults to `raft`, and bad node tables are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import ClusterConfig, NodeSpec
from coordinator.config_file import load_config, render_toml
from coordinator.config_rules import validate as validate_config
from coordinator.core.versions import COMMAND_SET_VERSION
from shared.errors import ConfigError

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
        validate_config(clash)


# -- worker timings derived from heartbeat_timeout_s ----------------------------------------


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(f'cluster_secret = "{SECRET}"\nadmin_token = "{ADMIN}"\n{body}\n')
    return path


def test_setting_only_heartbeat_timeout_gives_a_valid_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "heartbeat_timeout_s = 3"), env={})
    assert (config.heartbeat_interval_s, config.suspect_after_s, config.lease_s) == (
        pytest.approx(0.5),
        pytest.approx(1.5),
        pytest.approx(2.0),
    )


def test_the_defaults_are_the_documented_fractions_of_30_s() -> None:
    config = ClusterConfig()
    assert config.heartbeat_timeout_s == 30.0
    assert (config.heartbeat_interval_s, config.suspect_after_s, config.lease_s) == (
        pytest.approx(5.0),
        pytest.approx(15.0),
        pytest.approx(20.0),
    )


def test_the_timeout_from_the_environment_moves_the_derived_timings(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={"RIPPLE_HEARTBEAT_TIMEOUT_S": "12"})
    assert (config.suspect_after_s, config.lease_s) == (pytest.approx(6.0), pytest.approx(8.0))


def test_an_explicit_timing_wins_over_the_derived_one(tmp_path: Path) -> None:
    path = write(tmp_path, "heartbeat_timeout_s = 3\nsuspect_after_s = 2.5")
    config = load_config(path, env={}, overrides={"lease_s": 1.0})
    assert (config.suspect_after_s, config.lease_s) == (2.5, 1.0)
    assert config.heartbeat_interval_s == pytest.approx(0.5)


def test_render_leaves_derived_timings_out_so_they_keep_following(tmp_path: Path) -> None:
    derived = ClusterConfig(cluster_secret=SECRET, admin_token=ADMIN, heartbeat_timeout_s=9)
    text = render_toml(derived)
    assert "heartbeat_timeout_s = 9" in text
    assert "suspect_after_s" not in text and "lease_s" not in text
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    assert load_config(path, env={}) == derived
    shorter = load_config(path, env={"RIPPLE_HEARTBEAT_TIMEOUT_S": "3"})
    assert shorter.lease_s == pytest.approx(2.0)
    chosen = ClusterConfig(cluster_secret=SECRET, admin_token=ADMIN, lease_s=7.0)
    assert "lease_s = 7.0" in render_toml(chosen)


# -- every validation error names the setting and the rule ----------------------------------


@pytest.mark.parametrize(
    ("body", "key", "rule"),
    [
        (
            "heartbeat_timeout_s = 3\nsuspect_after_s = 15",
            "suspect_after_s",
            "< heartbeat_timeout_s",
        ),
        ("heartbeat_timeout_s = 3\nlease_s = 20", "lease_s", "< heartbeat_timeout_s"),
        ("heartbeat_timeout_s = 3\nheartbeat_interval_s = 5", "heartbeat_interval_s", "< lease_s"),
        ("suspect_after_s = 0", "suspect_after_s", "> 0"),
        ("heartbeat_timeout_s = -1", "heartbeat_timeout_s", "> 0"),
        ("checkpoint_interval_s = 0", "checkpoint_interval_s", "> 0"),
        ("body_bytes_max = 0", "body_bytes_max", "> 0"),
        ("min_cluster_size = 0", "min_cluster_size", "> 0"),
        ("total_partitions = 0", "total_partitions", "1..1000000"),
        ("propose_retries_max = -1", "propose_retries_max", ">= 0"),
        (
            "host_retry_base_ms = 900\nhost_retry_cap_ms = 100",
            "host_retry_cap_ms",
            ">= host_retry_base_ms",
        ),
        ("raft_min_timeout_s = 0.1", "raft_min_timeout_s", "> 3 * append_entries_period_s"),
        ("raft_max_timeout_s = 0.2", "raft_max_timeout_s", "> raft_min_timeout_s"),
        ("raft_max_timeout_s = 2.0", "raft_max_timeout_s", "<= 1.5"),
        (
            "leader_fallback_timeout_s = 0.01",
            "leader_fallback_timeout_s",
            "> append_entries_period_s",
        ),
        ("log_compaction_min_entries = 1", "log_compaction_min_entries", ">= 2"),
        ('placement_strategy = "random"', "placement_strategy", "balanced or hash_ring"),
        ("lease_s = nan", "lease_s", "finite number"),
        ('heartbeat_timeout_s = "soon"', "heartbeat_timeout_s", "finite number"),
        ("min_cluster_size = 1.5", "min_cluster_size", "int"),
        ("no_such_key = 1", "no_such_key", "unknown config key"),
        ("raft_transport_version_min = 4", "raft_transport_version_min", "2 or 3"),
        ("raft_transport_version_max = 1", "raft_transport_version_max", "2 or 3"),
        (
            "raft_transport_version_min = 3\nraft_transport_version_max = 2",
            "raft_transport_version_max",
            ">= raft_transport_version_min",
        ),
        ("membership_catch_up_timeout_s = 0", "membership_catch_up_timeout_s", "> 0"),
        (
            f"command_set_version_max = {COMMAND_SET_VERSION + 1}",
            "command_set_version_max",
            f"1..{COMMAND_SET_VERSION}",
        ),
        ("retire_after_s = -1", "retire_after_s", "0 (never retire"),
        ("retire_after_s = 40000000", "retire_after_s", "a year"),
        (
            "max_migrations_per_worker = 9",
            "max_migrations_per_worker",
            "1..max_concurrent_migrations = 8",
        ),
        ("max_migrations_per_worker = -1", "max_migrations_per_worker", "(0 or unset"),
        ("command_set_version_max = -1", "command_set_version_max", "0 (no cap)"),
    ],
)
def test_validation_errors_name_the_setting_and_the_rule(
    tmp_path: Path, body: str, key: str, rule: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, body), env={})
    assert err.value.field == key
    assert key in err.value.message
    assert rule in err.value.message


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"raft_frame_bytes_max": 1_000_000}, "raft_frame_bytes_max"),  # < 4 x body_bytes_max
        ({"raft_handshake_timeout_s": 0.0}, "raft_handshake_timeout_s"),
        ({"raft_idle_timeout_s": -1.0}, "raft_idle_timeout_s"),
        ({"raft_unauthenticated_connections_max": 0}, "raft_unauthenticated_connections_max"),
    ],
)
def test_raft_transport_bounds_are_checked(settings: dict[str, float], field: str) -> None:
    config = ClusterConfig(cluster_secret=SECRET, admin_token=ADMIN, **settings)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as exc:
        validate_config(config)
    assert exc.value.field == field


def test_raft_transport_settings_come_from_the_environment() -> None:
    env = {"RIPPLE_RAFT_FRAME_BYTES_MAX": "8388608", "RIPPLE_RAFT_HANDSHAKE_TIMEOUT_S": "0.75"}
    loaded = load_config(
        None, env={**env}, overrides={"cluster_secret": SECRET, "admin_token": ADMIN}
    )
    assert (loaded.raft_frame_bytes_max, loaded.raft_handshake_timeout_s) == (8388608, 0.75)


def test_the_per_worker_move_cap_follows_the_cluster_cap_unless_set(tmp_path: Path) -> None:
    assert ClusterConfig().max_migrations_per_worker == 4  # half of max_concurrent_migrations
    assert (
        load_config(
            write(tmp_path, "max_concurrent_migrations = 3"), env={}
        ).max_migrations_per_worker
        == 2
    )
    assert (
        load_config(
            write(tmp_path, "max_concurrent_migrations = 1"), env={}
        ).max_migrations_per_worker
        == 1
    )
    chosen = load_config(write(tmp_path, "max_migrations_per_worker = 1"), env={})
    assert (chosen.max_concurrent_migrations, chosen.max_migrations_per_worker) == (8, 1)
    derived = ClusterConfig(cluster_secret=SECRET, admin_token=ADMIN, max_concurrent_migrations=6)
    assert "max_migrations_per_worker" not in render_toml(derived)
    assert "max_migrations_per_worker = 1" in render_toml(chosen)
