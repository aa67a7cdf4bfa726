"""A Spark standalone cluster from the pyspark package, with no disk shared with the test.

A Master and one Worker (`bin/spark-class ... Master|Worker` in the foreground, 127.0.0.1,
one core, small memory) and a Spark Connect server submitted to the Master
(`spark-submit --master spark://127.0.0.1:PORT --class ...SparkConnectServer`). The Spark
Worker, and so every executor it starts, runs in its own mount namespace (`unshare --mount`)
with a tmpfs over each `hidden` directory: the directories the run wrote its files to (its
ripple workers' staging copies, any file store). Executors see them empty, as on another
host, so anything a micro-batch hands Spark by path fails there instead of passing through
the shared disk by accident. Only those are hidden, never a directory that holds the Spark
installation or this interpreter's environment (the checkout may live anywhere, /tmp
included): such a `hidden` is refused when the cluster is made.

Every process is a `testkit.process.Proc` (the JVM itself: `unshare` and `sh` exec into it),
ended by its PID.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from pipeline.spark_server import SparkConnectServer, spark_home
from shared.ports import free_ports
from testkit.process import Proc
from testkit.wait import wait_until

HOST = "127.0.0.1"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
DAEMON_MEMORY = "256m"  # Master and Worker JVM heaps: they only schedule
DRIVER_MEMORY = "1g"
# Inside the Worker's namespace, on the first hidden directory's tmpfs: its own work and
# scratch directories, which nothing outside the namespace sees or has to clean up.
WORKER_SCRATCH = "spark-worker-scratch"
REGISTER_TIMEOUT_S = 90.0
CONNECT_START_TIMEOUT_S = 120.0


def unshare_available() -> str | None:
    """None if a mount namespace with a tmpfs can be made here, else why not."""
    probe = ["unshare", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt && echo ok"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --mount cannot run here: {exc}"
    if out.returncode != 0 or "ok" not in out.stdout:
        return f"unshare --mount with a tmpfs is not permitted here: {out.stderr.strip()[:300]}"
    return None


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def check_hidden(hidden: list[str]) -> None:
    """Refuse to hide what the Spark Worker itself runs from: the Spark installation (its
    `spark-class`) and this interpreter's environment (the executors' Python)."""
    needed = {
        "the Spark installation": spark_home(),
        "the Python environment": sys.prefix,
        "the base Python": sys.base_prefix,
    }
    for h in hidden:
        for what, path in needed.items():
            if _within(os.path.realpath(path), h):
                raise ValueError(
                    f"hiding {h} from the Spark Worker would hide {what} ({path}): "
                    "hide only the directories the run writes to"
                )


class SparkCluster:
    def __init__(self, root: Path, hidden: list[Path]) -> None:
        """`hidden`: the directories this run writes its files to (at least one)."""
        self.root = root
        # A directory under another hidden one is hidden with it (and would not exist to
        # mount on once its parent's tmpfs is in place).
        resolved = sorted({os.path.realpath(h) for h in hidden})
        self.hidden = [h for h in resolved if not any(_within(h, o) and h != o for o in resolved)]
        if not self.hidden:
            raise ValueError("a SparkCluster hides at least one directory")
        check_hidden(self.hidden)
        self.scratch = f"{self.hidden[0]}/{WORKER_SCRATCH}"
        self.master_port, self.master_ui, self.worker_ui = free_ports(3)
        self.master: Proc | None = None
        self.worker: Proc | None = None
        self.connect: SparkConnectServer | None = None
        self._conf_dir = root / "conf"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def _env(self) -> dict[str, str]:
        return {
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_CONF_DIR": str(self._conf_dir),  # no stray conf of the host
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "PYSPARK_PYTHON": sys.executable,
        }

    def start(self) -> str:
        """Start Master, Worker (in its namespace) and the Connect server; its sc:// URL."""
        self._conf_dir.mkdir(parents=True, exist_ok=True)
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        self.master = Proc(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                HOST,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_ui),
            ],
            self.root / "master.log",
            env=self._env(),
        )
        worker_cmd = [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            HOST,
            "--cores",
            str(WORKER_CORES),
            "--memory",
            WORKER_MEMORY,
            "--webui-port",
            str(self.worker_ui),
            "--work-dir",
            f"{self.scratch}/work",
            self.master_url,
        ]
        # tmpfs over every hidden directory, then the Worker's own scratch space on the first
        # of them, then exec: the PID we track is the Worker's JVM.
        mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(h)}" for h in self.hidden)
        work, local = shlex.quote(f"{self.scratch}/work"), shlex.quote(f"{self.scratch}/local")
        script = f"{mounts} && mkdir -p {work} {local} && exec {shlex.join(worker_cmd)}"
        env = {**self._env(), "SPARK_LOCAL_DIRS": f"{self.scratch}/local"}
        self.worker = Proc(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            self.root / "worker.log",
            env=env,
        )
        wait_until(
            lambda: "Successfully registered with master" in self.worker_log(),
            "the Spark Worker registers with the Master",
            REGISTER_TIMEOUT_S,
            0.5,
        )
        self.connect = SparkConnectServer(
            str(self.root / "connect"),
            driver_memory=DRIVER_MEMORY,
            master=self.master_url,
            extra_conf={
                "spark.executor.memory": EXECUTOR_MEMORY,
                "spark.executor.cores": str(WORKER_CORES),
                "spark.cores.max": str(WORKER_CORES),
            },
        )
        return self.connect.start(timeout_s=CONNECT_START_TIMEOUT_S)

    def worker_log(self) -> str:
        return "" if self.worker is None else self.worker.output()

    def stop(self) -> None:
        """Connect server first (it holds the executor), then Worker, then Master."""
        if self.connect is not None:
            self.connect.stop()
        for proc in (self.worker, self.master):
            if proc is not None:
                proc.stop()
