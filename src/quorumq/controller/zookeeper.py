"""A ZooKeeper server on this machine, standalone or one node of an ensemble, for development and tests.

It runs Debian bookworm's `zookeeper` package (3.8.0) on the JVM:

    java ... -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar
        org.apache.zookeeper.server.quorum.QuorumPeerMain DATA_DIR/zoo.cfg

zookeeper.jar's manifest names every jar the server needs (netty, jute, slf4j-api, ...) but no SLF4J
binding, so Debian's own classpath (/etc/zookeeper/conf:/usr/share/java/zookeeper.jar) logs nothing.
A "/usr/share/java/*" classpath is worse: it holds six SLF4J bindings and the JVM picks whichever the
directory lists first (slf4j-nop on this machine: no log at all, and SLF4J's warnings on stderr).
Hence the explicit log4j 1.2 binding, configured by DATA_DIR/log4j.properties to write
DATA_DIR/zookeeper.log; the JVM's own stdout and stderr are appended to the same file.

Everything the server writes lives in DATA_DIR: zoo.cfg, log4j.properties, zookeeper.log and data/
(snapshots and transaction logs, and myid for a node of an ensemble). It listens on 127.0.0.1:PORT
only, without the AdminServer (no Jetty port) and with ZooKeeper's default four-letter-word whitelist (only `srvr`).

Session timeouts: the server grants a client's requested timeout clamped to 2..20 ticks, so with
the default tickTime of 500 ms sessions last between 1 s and 10 s (kazoo: KazooClient(timeout=1.0)
gets 1 s, its minimum). A session's expiry is checked once a tick, so a dead client's ephemeral
nodes go between about one session timeout and one timeout plus a tick after its last ping.
"""

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from quorumq.clock import Clock

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
CLASSPATH = ":".join(JARS)
HOST = "127.0.0.1"
TICK_TIME_MS = 500
HEAP_MB = 256
STOP_GRACE_S = 10.0
READY_TIMEOUT_S = 30.0
READY_PROBE_S = 1.0
PAUSE_TIMEOUT_S = 5.0
PR_SET_PDEATHSIG = 1
CONFIG_FILE = "zoo.cfg"
LOG4J_FILE = "log4j.properties"
# wait_ready's probing clients log every refused connection while the JVM starts: keep that quiet.
_PROBE_LOG = logging.getLogger("quorumq.controller.zookeeper.probe")
_PROBE_LOG.addHandler(logging.NullHandler())
_PROBE_LOG.propagate = False


def min_session_timeout_ms(tick_time_ms: int = TICK_TIME_MS) -> int:
    """The shortest session a client can negotiate: ZooKeeper's default minSessionTimeout, 2 ticks."""
    return 2 * tick_time_ms


def max_session_timeout_ms(tick_time_ms: int = TICK_TIME_MS) -> int:
    """The longest session a client can negotiate: ZooKeeper's default maxSessionTimeout, 20 ticks."""
    return 20 * tick_time_ms


def server_argv(data_dir: Path, heap_mb: int = HEAP_MB) -> list[str]:
    """The server's argv, given the zoo.cfg and log4j.properties that write_config left in data_dir:
    what starts a node again by hand (its stdout and stderr appended to its zookeeper.log)."""
    java = shutil.which("java") or "/usr/bin/java"
    return [
        java,
        f"-Xmx{heap_mb}m",
        "-XX:+UseSerialGC",
        "-XX:+ExitOnOutOfMemoryError",
        f"-Dlog4j.configuration=file:{data_dir / LOG4J_FILE}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp", CLASSPATH,
        MAIN_CLASS,
        str(data_dir / CONFIG_FILE),
    ]


def _die_with_parent() -> None:
    """Runs in the child before exec: the server gets SIGTERM when the thread that started it ends."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalZooKeeper:
    """One standalone ZooKeeper server, a child process in its own session and process group.

    start() then wait_ready(); stop() always, also after a failed start (it is idempotent). Or use
    it as a context manager, which does all three.
    """

    def __init__(self, data_dir: Path, port: int, tick_time_ms: int = TICK_TIME_MS, heap_mb: int = HEAP_MB,
                 ensemble: Sequence[tuple[int, int]] = (), my_id: int = 0, clock: Clock | None = None) -> None:
        """ensemble: each node's (peer port, election port), the node with server id i at index
        i - 1, this one (`my_id`) among them; empty for a standalone server."""
        assert not ensemble or 1 <= my_id <= len(ensemble)
        self.data_dir = Path(data_dir).resolve()
        self.clock = clock or Clock()
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb
        self.ensemble = tuple(ensemble)
        self.my_id = my_id
        self._process: subprocess.Popen | None = None

    # Where things are.

    @property
    def address(self) -> str:
        """host:port, the connect string for KazooClient(hosts=...)."""
        return f"{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_FILE

    @property
    def log4j_path(self) -> Path:
        return self.data_dir / LOG4J_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def snapshot_dir(self) -> Path:
        """ZooKeeper's dataDir: snapshots and transaction logs (under version-2/)."""
        return self.data_dir / "data"

    @property
    def min_session_timeout_s(self) -> float:
        return min_session_timeout_ms(self.tick_time_ms) / 1000

    @property
    def max_session_timeout_s(self) -> float:
        return max_session_timeout_ms(self.tick_time_ms) / 1000

    @property
    def pid(self) -> int | None:
        """The server's pid while start() has run and stop() has not."""
        return self._process.pid if self._process else None

    def running(self) -> bool:
        """Whether the server process exists and has not exited (a paused server is running)."""
        return self._process is not None and self._process.poll() is None

    # The command.

    def write_config(self) -> None:
        """Write zoo.cfg and log4j.properties into data_dir (creating it); start() and command() call it."""
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={self.tick_time_ms}",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.snapshot_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={HOST}",
            # No Jetty AdminServer (it would take port 8080); four-letter words stay at the default (srvr).
            "admin.enableServer=false",
            # Every process of a local cluster connects from 127.0.0.1: no per-address connection cap.
            "maxClientCnxns=0",
            # Transaction logs grow by 4 MiB at a time instead of 64 MiB; old snapshots go hourly.
            "preAllocSize=4096",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            *(f"server.{server_id}={HOST}:{peer}:{election}"
              for server_id, (peer, election) in enumerate(self.ensemble, start=1)),
            "",
        ]))
        if self.ensemble:
            (self.snapshot_dir / "myid").write_text(f"{self.my_id}\n")
        self.log4j_path.write_text("\n".join([
            "log4j.rootLogger=INFO, FILE",
            "log4j.appender.FILE=org.apache.log4j.FileAppender",
            f"log4j.appender.FILE.File={self.log_path}",
            "log4j.appender.FILE.Append=true",
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] %m%n",
            "",
        ]))

    def command(self) -> list[str]:
        """The server's argv. Writes zoo.cfg and log4j.properties first, so the argv runs as it is;
        a caller that starts it itself (e.g. detached) should append its stdout and stderr to log_path."""
        self.write_config()
        return server_argv(self.data_dir, self.heap_mb)

    # The process.

    def start(self, die_with_parent: bool = True) -> None:
        """Start the server and return at once (see wait_ready).

        die_with_parent: the kernel sends the server SIGTERM when the thread that called start()
        ends, so a killed test run leaves no server behind; pass False to start from a thread that
        ends before the server should.
        """
        if self.running():
            raise RuntimeError(f"ZooKeeper on port {self.port} already runs as pid {self.pid}")
        argv = self.command()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                argv, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent if die_with_parent else None)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Return once a client can open a session (the port alone opens before the database loads).

        Raises RuntimeError if the server exits, TimeoutError if it is not ready in time.
        """
        deadline = self.clock.monotonic() + timeout_s
        while True:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise RuntimeError(f"ZooKeeper on port {self.port} is not running (exit code {code}); "
                                   f"see {self.log_path}")
            client = KazooClient(hosts=self.address, timeout=self.min_session_timeout_s, logger=_PROBE_LOG)
            try:
                client.start(timeout=max(0.05, min(READY_PROBE_S, deadline - self.clock.monotonic())))
                return
            except KazooTimeoutError:
                if self.clock.monotonic() >= deadline:
                    raise TimeoutError(f"ZooKeeper on port {self.port} not ready within {timeout_s} s; "
                                       f"see {self.log_path}") from None
            finally:
                client.stop()
                client.close()

    def pause(self, timeout_s: float = PAUSE_TIMEOUT_S) -> None:
        """SIGSTOP the server: it answers nothing, and its clients' sessions run out on their side.

        Returns once every thread of the JVM is stopped (a group stop is not instant); raises
        TimeoutError if that takes longer than timeout_s.
        """
        self._signal(signal.SIGSTOP)
        deadline = self.clock.monotonic() + timeout_s
        while not self._stopped():
            if self.clock.monotonic() >= deadline:
                raise TimeoutError(f"ZooKeeper pid {self.pid} not stopped within {timeout_s} s")
            time.sleep(0.005)

    def _stopped(self) -> bool:
        """Whether every thread of the server is in state T (stopped) in /proc."""
        tasks = Path(f"/proc/{self.pid}/task")
        try:
            states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks.iterdir()]
        except FileNotFoundError:  # a thread ended while we looked
            return False
        return bool(states) and all(state == "T" for state in states)

    def resume(self) -> None:
        """SIGCONT the server after pause()."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        if not self.running():
            raise RuntimeError(f"ZooKeeper on port {self.port} is not running")
        os.kill(self._process.pid, sig)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the server (and SIGCONT it, in case it is paused), SIGKILL it if it outlives
        grace_s, and reap it. Returns its exit code (143 after a clean SIGTERM), None if never started."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGTERM)
                os.kill(process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None
        return process.returncode

    def __enter__(self) -> "LocalZooKeeper":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
