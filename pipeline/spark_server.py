"""One local Spark Connect server, started from the pyspark package and stopped by its PID.

Invariant: the server binds 127.0.0.1 only, and the PID we track IS the server's JVM:
``bin/spark-submit`` execs ``bin/spark-class`` which execs ``java``, and we run it in the
foreground (not ``sbin/start-connect-server.sh``, which daemonizes and leaves us a pidfile
instead of a child). Everything runs offline from the jars pyspark ships
(``jars/spark-connect_*.jar``); nothing is downloaded.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from types import TracebackType

from shared.clock import Clock, monotonic_s
from shared.ports import free_ports
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["SparkConnectServer", "SparkServerError", "free_port", "spark_home"]

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
KILL_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 2.0
LOG_TAIL_BYTES = 4000
# Local micro-batches are small: 200 shuffle partitions (Spark's default) only add task overhead.
SHUFFLE_PARTITIONS_DEFAULT = 8
DRIVER_MEMORY_DEFAULT = "1g"
MASTER_DEFAULT = "local[*]"

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.connect.name = org.apache.spark.sql.connect
logger.connect.level = info
"""


class SparkServerError(Exception):
    """The Spark Connect server did not start, or died."""


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    return free_ports(1)[0]


class SparkConnectServer:
    """Start with ``start()`` (or ``with``), get ``url`` ("sc://127.0.0.1:PORT"), ``stop()``;
    ``kill()`` then ``start(port=...)`` is a crash and a restart on the same address."""

    def __init__(
        self,
        log_dir: str,
        *,
        shuffle_partitions: int = SHUFFLE_PARTITIONS_DEFAULT,
        driver_memory: str = DRIVER_MEMORY_DEFAULT,
        extra_conf: dict[str, str] | None = None,
        master: str = MASTER_DEFAULT,
        env: dict[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock  # the start-up deadline and `start_s` are read on it
        self.log_dir = os.path.abspath(log_dir)
        self.shuffle_partitions = shuffle_partitions
        self.driver_memory = driver_memory
        self.extra_conf = dict(extra_conf or {})
        self.master = master  # "spark://127.0.0.1:PORT" submits to a standalone cluster
        self.extra_env = dict(env or {})
        self.port: int | None = None
        self.pid: int | None = None
        self.start_s: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise SparkServerError("server not started")
        return f"sc://{HOST}:{self.port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.log_dir, "spark-connect.log")

    def command(self, port: int) -> list[str]:
        home = spark_home()
        log4j = os.path.join(self.log_dir, "log4j2.properties")
        conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            # Arrow batches are plans that hold their rows; a plan cache would keep every one
            # of them per session, until the driver runs out of memory.
            "spark.connect.session.planCache.enabled": "false",
            **self.extra_conf,
        }
        cmd = [
            os.path.join(home, "bin", "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "ripple-spark-connect",
            "--master",
            self.master,
            "--driver-memory",
            self.driver_memory,
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{log4j}",
        ]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        return cmd

    def start(self, port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> str:
        if self._proc is not None:
            raise SparkServerError(f"already started (pid {self.pid})")
        os.makedirs(self.log_dir, exist_ok=True)
        with open(os.path.join(self.log_dir, "log4j2.properties"), "w") as f:
            f.write(_LOG4J2)
        self.port = port if port is not None else free_port()
        env = dict(os.environ)
        env.update(
            SPARK_HOME=spark_home(),
            SPARK_LOCAL_IP=HOST,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            # Keep spark-class from daemonizing or reading a stray conf dir of the host.
            SPARK_CONF_DIR=self.log_dir,
        )
        env.update(self.extra_env)
        began = monotonic_s(self.clock)
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(  # fixed argv, no shell
                self.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                # Own process group: a Ctrl-C aimed at the caller's terminal must not hit the
                # JVM behind our back; we stop it ourselves, by PID.
                start_new_session=True,
            )
        self.pid = self._proc.pid
        log.info("spark connect server starting pid=%d port=%d", self.pid, self.port)
        try:
            self._wait_ready(began + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.start_s = monotonic_s(self.clock) - began
        log.info("spark connect server ready pid=%d in %.1fs", self.pid, self.start_s)
        return self.url

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None and self.port is not None
        # First the port (cheap), then a real session and query: the gRPC port opens a moment
        # before the server can run a plan.
        while monotonic_s(self.clock) < deadline:
            if self._proc.poll() is not None:
                raise SparkServerError(
                    f"spark connect server exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((HOST, self.port), timeout=PROBE_TIMEOUT_S):
                    break
            except OSError:
                time.sleep(POLL_INTERVAL_S)
        else:
            raise SparkServerError(f"port {self.port} not open in time:\n{self.log_tail()}")
        from pyspark.sql import SparkSession

        while monotonic_s(self.clock) < deadline:
            try:
                session = SparkSession.builder.remote(self.url).create()
                try:
                    session.range(1).collect()
                finally:
                    session.stop()
                return
            except Exception:  # any failure here means "not ready yet"
                if self._proc.poll() is not None:
                    break
                time.sleep(POLL_INTERVAL_S)
        raise SparkServerError(f"no Spark Connect session in time:\n{self.log_tail()}")

    def rss_bytes(self) -> int | None:
        """Resident memory of the server JVM (Linux), for reports."""
        if self.pid is None:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the JVM by PID, wait (bounded), SIGKILL if it lingers. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("spark connect server pid=%d ignored SIGTERM; killing", proc.pid)
                proc.kill()
                proc.wait(timeout=KILL_TIMEOUT_S)
        log.info("spark connect server pid=%d stopped rc=%s", proc.pid, proc.returncode)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the JVM by PID and reap it (a crash: no session survives, nothing is
        flushed). `start(port=self.port)` brings a new server up where it was."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=KILL_TIMEOUT_S)
        log.info("spark connect server pid=%d killed rc=%s", proc.pid, proc.returncode)
        self._proc = None

    def __enter__(self) -> SparkConnectServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
