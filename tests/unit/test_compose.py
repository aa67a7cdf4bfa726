"""compose/docker-compose.yml and compose/cluster.toml must describe the same cluster.

Nothing here starts a container (compose/check does that, in CI where a Docker engine can
start): the test reads both files and checks that they agree (node ids, commands, mounted
config, ports, data volumes, health checks), that one service builds the one image the
others run, and that the pipeline services are wired to each other (workers ->
coordinators, the store volume shared with Spark at the same path, the Spark Connect
server). `problems()` returns every mismatch as a sentence; the mutation tests prove each
check can fail. It also holds compose/check to the repository: it names no path outside it
and makes its base image with compose/base-image.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from coordinator.config import ClusterConfig
from coordinator.config_file import load_config

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
CLUSTER_FILE = COMPOSE_DIR / "cluster.toml"
CHECK_SCRIPT = COMPOSE_DIR / "check"
BASE_IMAGE_SCRIPT = COMPOSE_DIR / "base-image"
CONFIG_IN_CONTAINER = "/etc/ripple/cluster.toml"
SECRET_ENV = ("RIPPLE_CLUSTER_SECRET", "RIPPLE_ADMIN_TOKEN", "RIPPLE_JOIN_TOKEN")
WORKER_ENV = ("RIPPLE_JOIN_TOKEN",)
IMAGE = "ripple:dev"
SPARK_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


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


def _flags(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, c in enumerate(command[:-1]) if c == name]


def _url_host_port(url: str | None, scheme: str) -> tuple[str, str] | None:
    prefix = f"{scheme}://"
    if not url or not url.startswith(prefix) or ":" not in url[len(prefix) :]:
        return None
    host, _, port = url[len(prefix) :].rstrip("/").partition(":")
    return host, port


def _env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        return dict(str(e).partition("=")[::2] for e in env)
    return {str(k): str(v) for k, v in env.items()}


def _mounts(svc: dict[str, Any]) -> list[list[str]]:
    return [str(v).split(":") for v in svc.get("volumes") or []]


def _services_running(doc: dict[str, Any], *words: str) -> dict[str, dict[str, Any]]:
    """Services whose command contains every one of ``words`` (as whole arguments)."""
    services = doc.get("services") or {}
    return {
        name: svc
        for name, svc in services.items()
        if isinstance(svc.get("command"), list) and all(w in svc["command"] for w in words)
    }


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
    return out + pipeline_problems(doc, config)


def image_problems(doc: dict[str, Any]) -> list[str]:
    """One service builds the image; every other runs it and never pulls it (there is no
    registry to pull it from, and a pull or a second build would recreate containers)."""
    out: list[str] = []
    services = doc.get("services") or {}
    builders = sorted(name for name, svc in services.items() if "build" in svc)
    if len(builders) != 1:
        out.append(f"services that build: {builders}; want exactly one")
    for name, svc in sorted(services.items()):
        if svc.get("image") != IMAGE:
            out.append(f"{name}: runs image {svc.get('image')!r}, not {IMAGE}")
        if name not in builders and svc.get("pull_policy") != "never":
            out.append(f"{name}: pull_policy is {svc.get('pull_policy')!r}, want 'never'")
    return out


def pipeline_problems(doc: dict[str, Any], config: ClusterConfig) -> list[str]:
    """The workers reach the coordinators and Spark, and share the store volume with Spark."""
    out: list[str] = image_problems(doc)
    services = doc.get("services") or {}
    declared_volumes = set((doc.get("volumes") or {}).keys())
    workers = {
        name: svc
        for name, svc in services.items()
        if isinstance(svc.get("command"), list) and svc["command"][:2] == ["ripple", "worker"]
    }
    if len(workers) != 3:
        out.append(f"worker services {sorted(workers)}: want three")
    sparks = _services_running(doc, SPARK_SERVER_CLASS)
    if len(sparks) != 1:
        out.append(f"spark services {sorted(sparks)}: want exactly one Spark Connect server")
    spark_ports: dict[str, str | None] = {}
    for name, svc in sparks.items():
        conf = dict(c.partition("=")[::2] for c in _flags(svc["command"], "--conf"))
        spark_ports[name] = conf.get("spark.connect.grpc.binding.port")
        if conf.get("spark.connect.grpc.binding.address") != "0.0.0.0":
            out.append(f"{name}: Spark Connect does not bind 0.0.0.0 (workers are elsewhere)")
        if str(spark_ports[name]) not in {str(e) for e in svc.get("expose") or []}:
            out.append(f"{name}: Spark Connect port {spark_ports[name]} is not exposed")
    coordinator_urls = sorted(n.url for n in config.nodes)
    state_volumes: dict[str, str] = {}
    for name, svc in sorted(workers.items()):
        command = svc["command"]
        urls = sorted(_flags(command, "--coordinator"))
        if urls != coordinator_urls:
            out.append(f"{name}: --coordinator {urls} != cluster http URLs {coordinator_urls}")
        if _flag(command, "--worker-id") != name:
            out.append(f"{name}: runs --worker-id {_flag(command, '--worker-id')}")
        listen = _flag(command, "--listen") or ""
        if _host(listen) != name:
            out.append(f"{name}: --listen {listen!r} does not name its own service")
        elif _port(listen) not in {str(e) for e in svc.get("expose") or []}:
            out.append(f"{name}: listen port {_port(listen)} is not exposed")
        if _flag(command, "--advertise") != f"http://{listen}":
            out.append(
                f"{name}: --advertise {_flag(command, '--advertise')} is not http://{listen}"
            )
        remote = _url_host_port(_flag(command, "--spark-remote"), "sc")
        if remote is None or spark_ports.get(remote[0]) != remote[1]:
            out.append(
                f"{name}: --spark-remote {_flag(command, '--spark-remote')} is not the Spark "
                f"service's port {spark_ports}"
            )
        env = _env(svc)
        for key in WORKER_ENV:
            if key not in env:
                out.append(f"{name}: {key} is not passed from the environment")
        out += _store_problems(name, svc, sparks, declared_volumes, config)
        out += _state_problems(name, svc, declared_volumes, state_volumes)
    return out


def _state_problems(
    name: str, svc: dict[str, Any], declared_volumes: set[str], claimed: dict[str, str]
) -> list[str]:
    """The worker keeps its token in a state directory on a named volume of its own, so the
    container started again or recreated (an upgrade) rejoins as the member it was."""
    state = _flag(svc["command"], "--state-dir") or _env(svc).get("RIPPLE_STATE_DIR")
    if not state:
        return [f"{name}: no --state-dir (RIPPLE_STATE_DIR): a restart cannot rejoin as itself"]
    under = [m for m in _mounts(svc) if len(m) >= 2 and m[1] == state]
    if len(under) != 1 or under[0][2:] not in ([], ["rw"]) or under[0][0] not in declared_volumes:
        return [f"{name}: the state directory {state} is not one writable named volume"]
    first = claimed.setdefault(under[0][0], name)
    if first != name:
        return [f"{name}: shares its state volume {under[0][0]!r} with {first}"]
    return []


def _store_problems(
    name: str,
    svc: dict[str, Any],
    sparks: dict[str, dict[str, Any]],
    declared_volumes: set[str],
    config: ClusterConfig,
) -> list[str]:
    """The worker's store is a directory on a named volume (it survives `stop`/`up` and
    `down`), the one the coordinators check references against, and Spark mounts that
    volume at the same path (the `files` data path hands Spark the workers' paths)."""
    command = svc["command"]
    store = _flag(command, "--store") or ""
    if store != config.store:
        return [f"{name}: --store {store!r} is not the cluster file's store {config.store!r}"]
    if not store.startswith("file:///"):
        return [f"{name}: --store {store!r} is not a directory on a volume"]
    if _flag(command, "--data-path") != "files":
        return [f"{name}: --data-path {_flag(command, '--data-path')}, want files"]
    path = store[len("file://") :]
    under = [m for m in _mounts(svc) if len(m) >= 2 and m[1] == path]
    if len(under) != 1 or under[0][2:] not in ([], ["rw"]):
        return [f"{name}: the store {path} is not one writable mounted volume"]
    volume = under[0][0]
    out = []
    if volume not in declared_volumes:
        out.append(f"{name}: store volume {volume!r} is not a declared named volume")
    for spark_name, spark in sparks.items():
        if [volume, path] not in [m[:2] for m in _mounts(spark)]:
            out.append(f"{spark_name}: does not mount {volume} at {path} like {name}")
    return out


# -- the real files ----------------------------------------------------------------------------


def test_compose_and_cluster_file_agree() -> None:
    assert problems(load_compose(), load_cluster()) == []


def test_cluster_file_has_three_nodes_and_no_secrets() -> None:
    config = load_cluster()
    assert [n.id for n in config.nodes] == ["n1", "n2", "n3"]
    assert config.cluster_secret == "" and config.admin_token == "" and config.join_token == ""


def test_cluster_file_is_valid_once_env_supplies_the_secrets() -> None:
    env = {"RIPPLE_CLUSTER_SECRET": "s" * 32, "RIPPLE_ADMIN_TOKEN": "a" * 32}
    env["RIPPLE_JOIN_TOKEN"] = "j" * 32
    config = load_config(CLUSTER_FILE, env=env)  # validates; raises ConfigError if not
    for node in config.nodes:
        assert config.node_dir(node.id) == Path(config.data_dir) / node.id


def test_raft_ports_are_not_published() -> None:
    config = load_cluster()
    for name, svc in _coordinators(load_compose()).items():
        published = " ".join(str(p) for p in svc.get("ports") or [])
        assert _port(config.node(name).raft) not in published
        assert all(str(p).startswith("127.0.0.1:") for p in svc.get("ports") or [])


# -- compose/check needs nothing outside the repository ------------------------------------------

# Ways a script names a place outside the repository. compose/check runs from a fresh clone
# on any machine, so what it needs must be in compose/ (or on the system, installed by it).
_OUTSIDE = (
    (re.compile(r"\bshared/tools\b"), "the shared tools directory beside the repository"),
    (re.compile(r"\.\./|/\.\.\b"), "a relative step up"),
    (re.compile(r"\.parent\.parent|\bREPO\.parent|\.parents\["), "a step above the repository"),
)
# A Python string that is an absolute host path; the nodes' HTTP routes (/v1/...) are not.
_ABSOLUTE = re.compile(r"""["'](/(?!v1/)[^"'\s]*)["']""")


def outside_references(text: str, *, absolute_paths: bool) -> list[str]:
    """Every reference in a script's text to a place outside the repository, as sentences.
    `absolute_paths`: also count absolute host paths in string literals (compose/check needs
    none; compose/base-image reads system files such as apt's sources by design)."""
    out = [f"{why}: {m.group(0)!r}" for pattern, why in _OUTSIDE for m in pattern.finditer(text)]
    if absolute_paths:
        out.extend(f"an absolute host path: {m.group(1)!r}" for m in _ABSOLUTE.finditer(text))
    return out


def test_check_names_no_path_outside_the_repository() -> None:
    assert outside_references(CHECK_SCRIPT.read_text(encoding="utf-8"), absolute_paths=True) == []
    base_image = BASE_IMAGE_SCRIPT.read_text(encoding="utf-8")
    assert outside_references(base_image, absolute_paths=False) == []


def test_check_makes_the_base_image_with_the_script_beside_it() -> None:
    assert 'COMPOSE_DIR / "base-image"' in CHECK_SCRIPT.read_text(encoding="utf-8")
    assert BASE_IMAGE_SCRIPT.stat().st_mode & 0o111, "compose/base-image is not executable"
    assert BASE_IMAGE_SCRIPT.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")


def test_detects_paths_outside_the_repository() -> None:
    found = outside_references(
        'tools = [REPO.parent / "shared" / "tools", Path("/srv/team/shared/tools")]\n'
        'run(["bash", "../tools/local-base-image"])\n'
        'url = "/v1/health"\n',
        absolute_paths=True,
    )
    assert "a step above the repository: 'REPO.parent'" in found
    assert "the shared tools directory beside the repository: 'shared/tools'" in found
    assert "a relative step up: '../'" in found
    assert "an absolute host path: '/srv/team/shared/tools'" in found
    assert not any("/v1/health" in f for f in found)


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


def test_only_coordinator_http_ports_are_published() -> None:
    coords = _coordinators(load_compose())
    for name, svc in (load_compose().get("services") or {}).items():
        if name not in coords:
            assert not svc.get("ports"), f"{name} publishes {svc['ports']}"


def _worker_flag_index(doc: dict[str, Any], worker: str, flag: str) -> int:
    return int(doc["services"][worker]["command"].index(flag)) + 1


def test_detects_worker_coordinator_url_mismatch() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w2"]["command"][_worker_flag_index(doc, "w2", "--coordinator")] = (
            "http://n1:8102"
        )

    found = _mutated(mutate)
    want = (
        "w2: --coordinator ['http://n1:8102', 'http://n2:8102', 'http://n3:8103'] != "
        "cluster http URLs ['http://n1:8101', 'http://n2:8102', 'http://n3:8103']"
    )
    assert want in found


def test_detects_worker_listening_as_another_service() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w3"]["command"][_worker_flag_index(doc, "w3", "--listen")] = "w1:9101"

    found = _mutated(mutate)
    assert "w3: --listen 'w1:9101' does not name its own service" in found
    assert "w3: --advertise http://w3:9101 is not http://w1:9101" in found


def test_detects_wrong_worker_id_and_advertise() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w1"]["command"][_worker_flag_index(doc, "w1", "--worker-id")] = "w2"
        doc["services"]["w1"]["command"][_worker_flag_index(doc, "w1", "--advertise")] = (
            "http://localhost:9101"
        )

    found = _mutated(mutate)
    assert "w1: runs --worker-id w2" in found
    assert "w1: --advertise http://localhost:9101 is not http://w1:9101" in found


def test_detects_spark_remote_mismatch() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w3"]["command"][_worker_flag_index(doc, "w3", "--spark-remote")] = (
            "sc://spark:15003"
        )
        conf = doc["services"]["spark"]["command"]
        i = conf.index("spark.connect.grpc.binding.address=0.0.0.0")
        conf[i] = "spark.connect.grpc.binding.address=127.0.0.1"

    found = " | ".join(_mutated(mutate))
    assert "w3: --spark-remote sc://spark:15003 is not the Spark service's port" in found
    assert "spark: Spark Connect does not bind 0.0.0.0 (workers are elsewhere)" in found


def test_detects_missing_join_token() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w2"]["environment"] = {}

    assert "w2: RIPPLE_JOIN_TOKEN is not passed from the environment" in _mutated(mutate)


def test_detects_missing_worker_and_spark() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        for name in ("w3", "spark"):
            del doc["services"][name]

    found = " | ".join(_mutated(mutate))
    assert "worker services ['w1', 'w2']: want three" in found
    assert "spark services []: want exactly one Spark Connect server" in found


def test_detects_a_second_build_or_a_pullable_image() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["n2"]["build"] = doc["services"]["n1"]["build"]
        del doc["services"]["w1"]["pull_policy"]
        doc["services"]["spark"]["image"] = "ripple-spark:dev"

    found = _mutated(mutate)
    assert "services that build: ['n1', 'n2']; want exactly one" in found
    assert "w1: pull_policy is None, want 'never'" in found
    assert "spark: runs image 'ripple-spark:dev', not ripple:dev" in found


def test_detects_store_not_shared_with_spark() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["spark"]["volumes"] = ["store:/tmp/store:ro"]

    found = _mutated(mutate)
    for worker in ("w1", "w2", "w3"):
        assert f"spark: does not mount store at /var/lib/ripple-store like {worker}" in found


def test_detects_a_store_off_the_volume_or_not_the_cluster_files() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w1"]["volumes"] = ["store:/srv/store"]
        doc["services"]["w2"]["command"][_worker_flag_index(doc, "w2", "--store")] = (
            "file:///tmp/elsewhere"
        )
        doc["services"]["w3"]["command"][_worker_flag_index(doc, "w3", "--data-path")] = "arrow"

    found = _mutated(mutate)
    assert "w1: the store /var/lib/ripple-store is not one writable mounted volume" in found
    assert (
        "w2: --store 'file:///tmp/elsewhere' is not the cluster file's store "
        "'file:///var/lib/ripple-store'"
    ) in found
    assert "w3: --data-path arrow, want files" in found


def test_detects_an_anonymous_store_volume() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        del doc["volumes"]["store"]

    found = _mutated(mutate)
    assert "w1: store volume 'store' is not a declared named volume" in found


def test_detects_a_missing_or_shared_state_volume() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["services"]["w1"]["environment"] = {"RIPPLE_JOIN_TOKEN": "x"}
        doc["services"]["w3"]["volumes"] = [
            "store:/var/lib/ripple-store",
            "w2-state:/var/lib/ripple-worker",
        ]

    found = _mutated(mutate)
    assert "w1: no --state-dir (RIPPLE_STATE_DIR): a restart cannot rejoin as itself" in found
    assert "w3: shares its state volume 'w2-state' with w2" in found
