"""compose/docker-compose.yml and compose/cluster.toml must describe the same cluster.

Docker is not available where these tests run, so nothing here starts a container: the
test reads both files and checks that they agree (node ids, commands, mounted config,
ports, data volumes, health checks). `problems()` returns every mismatch as a sentence;
the mutation tests prove each check can fail.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from coordinator.config import ClusterConfig, load_config

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
CLUSTER_FILE = COMPOSE_DIR / "cluster.toml"
CONFIG_IN_CONTAINER = "/etc/ripple/cluster.toml"
SECRET_ENV = ("RIPPLE_CLUSTER_SECRET", "RIPPLE_ADMIN_TOKEN")


def load_compose() -> dict[str, Any]:
    with open(COMPOSE_FILE, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    assert isinstance(doc, dict), "docker-compose.yml is not a mapping"
    return doc


def load_cluster() -> ClusterConfig:
    return load_config(CLUSTER_FILE, env={}, validate=False)


def _port(addr: str) -> str:
    return addr.rsplit(":", 1)[1]


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0]


def _flag(command: list[str], name: str) -> str | None:
    if name in command:
        i = command.index(name)
        return command[i + 1] if i + 1 < len(command) else None
    return None


def _coordinators(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = doc.get("services") or {}
    return {
        name: svc
        for name, svc in services.items()
        if isinstance(svc.get("command"), list) and svc["command"][:2] == ["ripple", "coordinator"]
    }


def problems(doc: dict[str, Any], config: ClusterConfig) -> list[str]:
    """Every way the compose document and the cluster config disagree."""
    out: list[str] = []
    coords = _coordinators(doc)
    node_ids = [n.id for n in config.nodes]
    if sorted(coords) != sorted(node_ids):
        out.append(f"coordinator services {sorted(coords)} != cluster nodes {sorted(node_ids)}")
    declared_volumes = set((doc.get("volumes") or {}).keys())
    data_volumes: dict[str, str] = {}
    for name, svc in sorted(coords.items()):
        command = svc["command"]
        if _flag(command, "--node-id") != name:
            out.append(f"{name}: command runs --node-id {_flag(command, '--node-id')}")
        if _flag(command, "--config") != CONFIG_IN_CONTAINER:
            out.append(f"{name}: command uses --config {_flag(command, '--config')}")
        mounts = [str(v).split(":") for v in svc.get("volumes") or []]
        config_mounts = [v for v in mounts if len(v) >= 2 and v[1] == CONFIG_IN_CONTAINER]
        if len(config_mounts) != 1:
            out.append(f"{name}: {CONFIG_IN_CONTAINER} is mounted {len(config_mounts)} times")
        else:
            source = (COMPOSE_DIR / config_mounts[0][0]).resolve()
            if source != CLUSTER_FILE.resolve():
                out.append(f"{name}: mounts {source} as the cluster file, not {CLUSTER_FILE}")
            if config_mounts[0][2:] != ["ro"]:
                out.append(f"{name}: the cluster file is not mounted read-only")
        data_mounts = [v for v in mounts if len(v) >= 2 and v[1] == config.data_dir]
        if len(data_mounts) != 1:
            out.append(f"{name}: data_dir {config.data_dir} is mounted {len(data_mounts)} times")
        else:
            volume = data_mounts[0][0]
            if volume not in declared_volumes:
                out.append(f"{name}: data volume {volume!r} is not a declared named volume")
            if volume in data_volumes:
                out.append(f"{name}: shares data volume {volume!r} with {data_volumes[volume]}")
            data_volumes[volume] = name
        env = svc.get("environment") or {}
        for key in SECRET_ENV:
            if key not in env:
                out.append(f"{name}: {key} is not passed from the environment")
        if name not in node_ids:
            continue
        spec = config.node(name)
        for kind, addr in (("raft", spec.raft), ("http", spec.http)):
            if _host(addr) != name:
                out.append(f"{name}: toml {kind} host {_host(addr)!r} is not the service name")
        exposed = {str(p) for p in svc.get("expose") or []}
        for kind, addr in (("raft", spec.raft), ("http", spec.http)):
            if _port(addr) not in exposed:
                out.append(f"{name}: {kind} port {_port(addr)} not in expose {sorted(exposed)}")
        if exposed - {_port(spec.raft), _port(spec.http)}:
            out.append(f"{name}: exposes ports the node does not use: {sorted(exposed)}")
        published = [str(p).rsplit(":", 1)[-1] for p in svc.get("ports") or []]
        if published != [_port(spec.http)]:
            out.append(f"{name}: publishes container ports {published}, want [{_port(spec.http)}]")
        test = (svc.get("healthcheck") or {}).get("test") or []
        if not any(f"'{spec.url}/v1/health'" in str(t) for t in test):
            out.append(f"{name}: healthcheck does not hit {spec.url}/v1/health")
    # Every node must reach every other. All services mount the one cluster file (checked
    # above), so node X's Raft partners are the file's other nodes: each must be a service.
    for nid in node_ids:
        partners = sorted(n.id for n in config.nodes if n.id != nid)
        if partners != sorted(s for s in coords if s != nid):
            out.append(f"{nid}: Raft partners {partners} are not the other coordinator services")
    return out


# -- the real files ----------------------------------------------------------------------------


def test_compose_and_cluster_file_agree() -> None:
    assert problems(load_compose(), load_cluster()) == []


def test_cluster_file_has_three_nodes_and_no_secrets() -> None:
    config = load_cluster()
    assert [n.id for n in config.nodes] == ["n1", "n2", "n3"]
    assert config.cluster_secret == "" and config.admin_token == ""


def test_cluster_file_is_valid_once_env_supplies_the_secrets() -> None:
    env = {"RIPPLE_CLUSTER_SECRET": "s" * 32, "RIPPLE_ADMIN_TOKEN": "a" * 32}
    config = load_config(CLUSTER_FILE, env=env)  # validates; raises ConfigError if not
    for node in config.nodes:
        assert config.node_dir(node.id) == Path(config.data_dir) / node.id


def test_raft_ports_are_not_published() -> None:
    config = load_cluster()
    for name, svc in _coordinators(load_compose()).items():
        published = " ".join(str(p) for p in svc.get("ports") or [])
        assert _port(config.node(name).raft) not in published
        assert all(str(p).startswith("127.0.0.1:") for p in svc.get("ports") or [])


# -- the checks can fail ------------------------------------------------------------------------


def _mutated(fn: Any) -> list[str]:
    doc = copy.deepcopy(load_compose())
    fn(doc)
    return problems(doc, load_cluster())


def test_detects_wrong_node_id_in_command() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["n2"]["command"][-1] = "n3"

    assert "n2: command runs --node-id n3" in _mutated(mutate)


def test_detects_wrong_config_path() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["n1"]["command"][3] = "/etc/ripple/other.toml"

    assert "n1: command uses --config /etc/ripple/other.toml" in _mutated(mutate)


def test_detects_missing_service() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        del doc["services"]["n3"]

    found = _mutated(mutate)
    assert "coordinator services ['n1', 'n2'] != cluster nodes ['n1', 'n2', 'n3']" in found


def test_detects_port_mismatch() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["n1"]["expose"] = ["7101", "8102"]
        doc["services"]["n1"]["ports"] = ["127.0.0.1:8102:8102"]

    found = _mutated(mutate)
    assert "n1: http port 8101 not in expose ['7101', '8102']" in found
    assert "n1: publishes container ports ['8102'], want [8101]" in found


def test_detects_writable_or_missing_config_mount_and_shared_volume() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        n1 = doc["services"]["n1"]
        n1["volumes"] = ["./cluster.toml:/etc/ripple/cluster.toml", *n1["volumes"][1:]]
        doc["services"]["n2"]["volumes"] = ["n3-data:/var/lib/ripple"]

    found = _mutated(mutate)
    assert "n1: the cluster file is not mounted read-only" in found
    assert "n2: /etc/ripple/cluster.toml is mounted 0 times" in found
    assert "n3: shares data volume 'n3-data' with n2" in found


def test_detects_healthcheck_on_another_node() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        test = doc["services"]["n3"]["healthcheck"]["test"]
        test[-1] = test[-1].replace("n3:8103", "n1:8101")

    assert "n3: healthcheck does not hit http://n3:8103/v1/health" in _mutated(mutate)


def test_detects_secret_not_passed() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        del doc["services"]["n2"]["environment"]["RIPPLE_ADMIN_TOKEN"]

    assert "n2: RIPPLE_ADMIN_TOKEN is not passed from the environment" in _mutated(mutate)


def test_detects_node_missing_from_cluster_file() -> None:
    config = load_cluster()
    short = ClusterConfig(data_dir=config.data_dir, nodes=config.nodes[:2])
    found = problems(load_compose(), short)
    assert "coordinator services ['n1', 'n2', 'n3'] != cluster nodes ['n1', 'n2']" in found
    assert "n1: Raft partners ['n2'] are not the other coordinator services" in found
