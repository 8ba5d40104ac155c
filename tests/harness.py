"""Test helpers shared by every suite: a real cluster from `quorumq up`, its processes, the CLI, polling.

A cluster is the parsed DIR/cluster.json of a `quorumq up` run in a subprocess on a free range of
200 ports. Teardown stops `up` by its pid and SIGKILLs any process of the cluster still alive, so a
failing test leaves nothing running.
"""

import asyncio
import collections
import inspect
import json
import os
import random
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

import grpc
from prometheus_client.parser import text_string_to_metric_families
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq.cli.up import PORT_SPAN
from quorumq.client import AdminClient, Blocking
from quorumq.controller.zookeeper import server_argv
from quorumq.core import auth

# Below Linux's ephemeral range (32768+), so no outgoing connection holds one of our ports.
PORT_RANGE = (21000, 32000)
CLUSTER_START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0
SMALL_MESSAGE_SIZE = 64 * 1024  # maxMessageSize of the small_message_cluster fixture
# The v5 MessagingService's method paths, for calls made with a raw gRPC channel.
MESSAGING_SERVICE = "/apache.rocketmq.v2.MessagingService/"
# QUORUMQ_ACCESS=proxy: every cluster LocalCluster starts has a proxy too (`up --proxies 1`), and the
# official clients reach the brokers through it (official_access_point); "direct" (the default): the
# name server is their access point, as without proxies. Raw v5 calls and quorumq's own clients are
# the same in both modes.
ACCESS = os.environ.get("QUORUMQ_ACCESS", "direct")
if ACCESS not in ("direct", "proxy"):
    raise RuntimeError(f"QUORUMQ_ACCESS={ACCESS!r}: direct or proxy")
THROUGH_PROXY = ACCESS == "proxy"
# Brokers preallocate whole segments: 64 MiB (room for a 4 MiB message) instead of 1 GiB keeps a
# run's clusters from filling the disk past diskSpaceWarningLevelRatio.
TEST_SEGMENT_BYTES = 64 * 1024 * 1024


def check_for(timeout: float, interval: float, fn: Callable[[], Any], what: str = "") -> Any:
    """Call fn until it returns something truthy and return that; an exception counts as not yet.

    Raises AssertionError with the last value or exception after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            result, error = fn(), None
        except Exception as exc:  # noqa: BLE001 - the condition may fail while the system settles
            result, error = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or getattr(fn, '__name__', fn)} not true within {timeout} s; "
                                 f"last: {error or result!r}") from error
        time.sleep(interval)


async def async_check_for(timeout: float, interval: float, fn: Callable[[], Any], what: str = "") -> Any:
    """check_for for async tests: fn may be a coroutine function, and the wait does not block the loop."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result, error = fn(), None
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001
            result, error = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or getattr(fn, '__name__', fn)} not true within {timeout} s; "
                                 f"last: {error or result!r}") from error
        await asyncio.sleep(interval)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening(port: int) -> bool:
    """Whether a server accepts connections on 127.0.0.1:port (a probe by bind could take the
    port from a server about to bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


# The ranges handed out lately: a range is free until its cluster starts, so two clusters built
# before either starts (a primary and its standby) must not be given overlapping ones.
_HANDED_OUT: collections.deque[range] = collections.deque(maxlen=16)


def free_base_port(span: int = PORT_SPAN) -> int:
    """A base port P with P..P+span-1 all free on 127.0.0.1 right now and apart from the ranges
    handed out lately."""
    for _ in range(200):
        base = random.randrange(PORT_RANGE[0], PORT_RANGE[1] - span, 10)
        ports = range(base, base + span)
        if any(ports.start < other.stop and other.start < ports.stop for other in _HANDED_OUT):
            continue
        if all(_port_free(port) for port in ports):
            _HANDED_OUT.append(ports)
            return base
    raise RuntimeError(f"no {span} consecutive free ports in {PORT_RANGE}")


def cli(*args: str, timeout: float = CLI_TIMEOUT_S, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run `quorumq ARGS` with this interpreter, `stdin` its input; never raises on a non-zero exit."""
    return subprocess.run([sys.executable, "-m", "quorumq.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, input=stdin)


def process_state(pid: int) -> str | None:
    """The state letter in /proc/PID/stat (R, S, T for stopped, Z...), None if there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a quorumq process with this pid runs (a zombie or a reused pid does not count)."""
    state = process_state(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return state not in (None, "Z", "X") and (b"quorumq" in cmdline or b"zookeeper" in cmdline)


def resume(process: dict) -> None:
    """SIGCONT a process that a test may have SIGSTOPped (harmless if it runs)."""
    if pid_alive(process["pid"]):
        os.kill(process["pid"], signal.SIGCONT)


@contextmanager
def frozen(process: dict):
    """SIGSTOP the process for the block (its sockets stay open but nothing answers), then SIGCONT."""
    os.kill(process["pid"], signal.SIGSTOP)
    try:
        check_for(5, 0.01, lambda: process_state(process["pid"]) == "T", "the process stopped")
        yield
    finally:
        os.kill(process["pid"], signal.SIGCONT)


def stop_process(process: dict, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> None:
    """Signal one cluster process by pid and wait until it is gone (SIGKILL after `timeout`)."""
    pid = process["pid"]
    if not pid_alive(pid):
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.05)


def scrape(process: dict) -> dict[tuple[str, frozenset], float]:
    """A process's /metrics as Prometheus reads it, at cluster.json's "metrics" address:
    (sample name, its labels) -> value."""
    with urllib.request.urlopen(f"http://{process['metrics']}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def metric(samples: dict, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and wanted <= sample_labels)


@contextmanager
def headless_chromium():
    """Debian's chromium driven by selenium through Debian's chromedriver (selenium's own driver
    manager cannot download here); the browser's console is kept for `console_errors`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1100"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def console_errors(browser) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def page_text(browser, selector: str) -> str:
    """The text of the first element matching the CSS selector, "" while there is none."""
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, selector)
    return found[0].text if found else ""


def log_end(process: dict) -> int:
    """Where a process's log ends now, for `log_since`: the log grows across a module's tests."""
    return Path(process["log"]).stat().st_size


def log_since(process: dict, position: int) -> str:
    """What a process logged after `position` (from `log_end`)."""
    with open(process["log"], "rb") as log:
        log.seek(position)
        return log.read().decode(errors="replace")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM): no transient growth escapes it."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak_rss(pid: int) -> None:
    """Start the process's VmHWM again from its RSS now (Linux's clear_refs), so that a test measures
    the peak of what it sends, not of what earlier tests of its module sent."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def start_process(process: dict) -> None:
    """Start a stopped cluster process again from its config, as an operator would by hand.

    It logs to the same file; `process["pid"]` is updated so teardown finds it.
    """
    kind = process["kind"]
    argv = (server_argv(Path(process["data_dir"])) if kind == "zookeeper"
            else [sys.executable, "-m", "quorumq.cli.main", kind, "-c", process["config"]])
    with open(process["log"], "ab") as log:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    process["pid"] = child.pid
    # Popen returns as the exec begins, when /proc/PID/cmdline can still be empty and pid_alive
    # says no: a check right after this call would take the starting process for a dead one.
    while not pid_alive(child.pid) and child.poll() is None:
        time.sleep(0.005)


@contextmanager
def started_proxy(directory: Path, access_point: str):
    """`quorumq proxy` routing through the name servers at `access_point`, listening; its process
    dict ("address" is where clients reach it), stopped when the block ends, whatever happened."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_base_port(1)
    config = directory / "proxy.conf"
    config.write_text(f"namesrvAddr={access_point}\ngrpcServerPort={port}\n")
    process = {"kind": "proxy", "config": str(config), "log": str(directory / "proxy.log"),
               "address": f"127.0.0.1:{port}"}
    start_process(process)
    try:
        check_for(30, 0.05, lambda: _listening(port), "the proxy listening")
        yield process
    finally:
        stop_process(process)


class Driver:
    """One `quorumq replicator run` in its own session, so that it and the JVM and Python workers
    it starts are stopped together by its pid (as a process group)."""

    def __init__(self, args: list[str], log_path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "quorumq.cli.main", "replicator", "run", *args],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.wait()

    def signal(self, number: int) -> None:
        """To the driver and everything it started (its process group)."""
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:
            pass

    def stop(self) -> int:
        """SIGTERM to the driver alone: it stops its queries and Spark, then exits."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.kill()  # whatever of its group is left


def process_of(cluster: dict, kind: str) -> dict:
    """The cluster's first process of a kind ("broker", "namesrv", "controller", ...)."""
    return next(p for p in cluster["processes"] if p["kind"] == kind)


def create_topic(cluster: dict, topic: str, queues: int, credentials: auth.Credentials | None = None) -> None:
    """The topic, with `queues` read and write queues, on every master of the cluster (signed with
    `credentials` for a cluster with authenticationEnabled)."""
    with Blocking(AdminClient, cluster["access_point"], credentials=credentials) as admin:
        for broker in admin.brokers(masters_only=True):
            admin.update_topic(broker.address, topic, queues, queues)


def restart_process(cluster: dict, process: dict, sig: int = signal.SIGTERM) -> None:
    """Stop one process of `cluster` with `sig` and start it again."""
    assert process in cluster["processes"]
    stop_process(process, sig)
    start_process(process)


def wait_registered(cluster: dict, timeout: float = CLUSTER_START_TIMEOUT_S) -> None:
    """Wait until the name server lists every running broker of the cluster and each of them answers."""
    brokers = [p for p in cluster["processes"] if p["kind"] == "broker" and pid_alive(p["pid"])]
    with Blocking(AdminClient, cluster["access_point"], timeout_s=2.0) as admin:
        def all_serving() -> bool:
            registered = {(b.broker_name, b.address) for b in admin.cluster_info().brokers}
            if not {(p["broker_name"], p["address"]) for p in brokers} <= registered:
                return False
            for broker in brokers:
                admin.broker_status(broker["address"])
            return True

        check_for(timeout, 0.2, all_serving, "every broker registered and serving")


class LocalCluster:
    """`quorumq up` in a subprocess; `start()` returns the parsed cluster.json. Under
    QUORUMQ_ACCESS=proxy it starts at least one proxy. The dashboard only on request: `up` waits
    for it to serve before cluster.json names the cluster, and few tests look at it."""

    def __init__(self, directory: Path, brokers: int = 1, cluster: str | None = None,
                 sets: dict[str, str] | None = None, broker_sets: Sequence[str] = (),
                 base_port: int | None = None, replicas: int = 1, controllers: int = 0, zookeepers: int = 1,
                 open_files: int | None = None, tls: bool = False, proxies: int = 0,
                 dashboard: bool = False) -> None:
        self.directory = Path(directory)
        self.open_files = open_files  # a soft RLIMIT_NOFILE for `up` and the processes it starts
        self.base_port = base_port or free_base_port()
        proxies = max(proxies, 1 if THROUGH_PROXY else 0)
        self.args = ["--dir", str(self.directory), "--base-port", str(self.base_port), "--brokers", str(brokers),
                     "--replicas", str(replicas)]
        if cluster:
            self.args += ["--cluster", cluster]
        if controllers:
            self.args += ["--controller", "--controllers", str(controllers), "--zookeepers", str(zookeepers)]
        if tls:
            self.args.append("--tls")
        if proxies:
            self.args += ["--proxies", str(proxies)]
        if not dashboard:
            self.args.append("--no-dashboard")
        for key, value in {"mappedFileSizeCommitLog": str(TEST_SEGMENT_BYTES), **(sets or {})}.items():
            self.args += ["--set", f"{key}={value}"]
        for assignment in broker_sets:
            self.args += ["--broker-set", assignment]
        self.up: subprocess.Popen | None = None
        self.info: dict | None = None

    @property
    def up_log(self) -> Path:
        return self.directory / "up.log"

    def start(self, timeout: float = CLUSTER_START_TIMEOUT_S) -> dict:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.up_log, "ab") as log:
            self.up = subprocess.Popen([sys.executable, "-m", "quorumq.cli.main", "up", *self.args],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       preexec_fn=None if self.open_files is None else self._limit_open_files)
        cluster_file = self.directory / "cluster.json"
        deadline = time.monotonic() + timeout
        while not cluster_file.exists():
            if self.up.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"quorumq up {' '.join(self.args)} did not come up:\n"
                                   f"{self.up_log.read_text(errors='replace')}")
            time.sleep(0.05)
        self.info = json.loads(cluster_file.read_text())
        return self.info

    def _limit_open_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    def stop(self) -> None:
        """Stop `up` (which stops its children), then SIGKILL any process of the cluster still alive."""
        if self.up and self.up.poll() is None:
            self.up.send_signal(signal.SIGTERM)
            try:
                self.up.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.up.kill()
                self.up.wait()
        info = self.info or {}
        for process in info.get("processes", []):
            if pid_alive(process["pid"]):
                os.kill(process["pid"], signal.SIGCONT)  # a paused process must not outlive the test
                os.kill(process["pid"], signal.SIGKILL)


def v5_message(topic: str, body: bytes, message_id: str | None = None) -> v5.Message:
    """A normal message as the official client builds it, for raw v5 calls."""
    return v5.Message(topic=v5.Resource(name=topic), body=body, system_properties=v5.SystemProperties(
        message_id=message_id or uuid.uuid4().hex.upper(), message_type=v5.MessageType.NORMAL,
        body_encoding=v5.Encoding.IDENTITY))


def v5_send(address: str, message: v5.Message, timeout: float = 10) -> v5s.SendMessageResponse:
    """One v5 SendMessage call, to see the whole response the official client reads."""
    with grpc.insecure_channel(address) as channel:
        return v5_grpc.MessagingServiceStub(channel).SendMessage(
            v5s.SendMessageRequest(messages=[message]), timeout=timeout)


# A client that never reads its answers speaks raw HTTP/2, as no gRPC client can be made to stop reading.

def telemetry_settings(address: str, group: str, topic: str | None = None) -> v5.Settings:
    """The settings a SimpleConsumer of `group` (reading `topic`) gets back on its Telemetry stream."""
    subscription = v5.Subscription(group=v5.Resource(name=group))
    if topic is not None:
        subscription.subscriptions.add(topic=v5.Resource(name=topic))
    command = v5s.TelemetryCommand(settings=v5.Settings(client_type=v5.ClientType.SIMPLE_CONSUMER,
                                                        subscription=subscription))
    with grpc.insecure_channel(address) as channel:
        replies = v5_grpc.MessagingServiceStub(channel).Telemetry(iter([command]), timeout=10)
        return next(replies).settings


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_literal(name: str, value: str) -> bytes:  # literal, not indexed, no Huffman; names and values < 127
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


class RawConnection:
    """One HTTP/2 connection that opens gRPC calls and never reads an answer nor grants flow-control
    window beyond HTTP/2's initial 64 KiB."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b""))  # preface, SETTINGS
        self._next_stream = 1

    def call(self, path: str, request: bytes | None) -> None:
        """Open a call; with request None, a stream that stays open (no message, no end)."""
        stream, self._next_stream = self._next_stream, self._next_stream + 2
        headers = b"".join(_hpack_literal(name, value) for name, value in (
            (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.address),
            ("content-type", "application/grpc"), ("te", "trailers")))
        frames = _frame(1, 4, stream, headers)  # HEADERS, END_HEADERS
        if request is not None:
            frames += _frame(0, 1, stream, b"\x00" + struct.pack(">I", len(request)) + request)  # END_STREAM
        self.sock.sendall(frames)

    def settings(self) -> dict[int, int]:
        """The broker's first SETTINGS: parameter id -> value."""
        header = self._read(9)
        length, kind = int.from_bytes(header[:3], "big"), header[3]
        assert kind == 4, f"frame type {kind} before the server's SETTINGS"
        payload = self._read(length)
        return {int.from_bytes(payload[i:i + 2], "big"): int.from_bytes(payload[i + 2:i + 6], "big")
                for i in range(0, length, 6)}

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    def closed_within(self, seconds: float) -> bool:
        """Whether the broker closes the connection within `seconds` (what it sends meanwhile is
        read and dropped)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


# The official client, as an application uses it.

def new_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def typed_topic(admin, addresses: list[str], message_type: str, queues: int = 4) -> str:
    """A new topic of the type on the brokers, as `updateTopic -a +message.type=TYPE` makes it."""
    topic = new_name("T")
    admin.update_topic_on(addresses, topic, queues, queues, message_type=message_type)
    return topic


def official_message(topic: str, body: bytes, tag: str | None = None, keys: str | None = None) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    if tag:
        message.tag = tag
    if keys:
        message.keys = keys
    return message


def send_sync_and_async(producer: Producer, topic: str, count: int) -> dict[str, bytes]:
    """`count` messages sent one at a time, then `count` sent at once (tag A, keys on the first
    ones): message id -> body."""
    sent = {}
    for index in range(count):
        receipt = producer.send(official_message(topic, f"sync-{index}".encode(), tag="A", keys=f"k{index}"))
        sent[receipt.message_id] = f"sync-{index}".encode()
    futures = [producer.send_async(official_message(topic, f"async-{index}".encode(), tag="A"))
               for index in range(count)]
    for index, future in enumerate(futures):
        sent[future.result(timeout=10).message_id] = f"async-{index}".encode()
    return sent


def official_access_point(cluster: dict) -> str:
    """Where the official clients reach the cluster: its proxies under QUORUMQ_ACCESS=proxy, else
    the name server."""
    return cluster["proxy_access_point"] if THROUGH_PROXY else cluster["access_point"]


def configuration(cluster) -> ClientConfiguration:
    return ClientConfiguration(official_access_point(cluster), Credentials(), request_timeout=5)


def started_producer(config: ClientConfiguration) -> Producer:
    producer = Producer(config)
    producer.startup()
    return producer


def simple_consumer(client_config, group, topic, expression="*", await_duration=2):
    consumer = SimpleConsumer(client_config, group, {topic: FilterExpression(expression)},
                              await_duration=await_duration)
    consumer.startup()
    return consumer


# The official client in a process of its own: grpc reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH once.
_OFFICIAL_TLS_CLIENT = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
access_point, topic, count, group, ak, sk = sys.argv[1:7]
config = ClientConfiguration(access_point, Credentials(ak, sk), request_timeout=5)
consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2, tls_enable=True)
producer = Producer(config, (topic,), tls_enable=True)
consumer.startup()
producer.startup()
try:
    consumer.receive(16, 30)  # the group's first receive fixes its start position
    sent = []
    for index in range(int(count)):
        message = Message()
        message.topic, message.body = topic, f"over tls {index}".encode()
        sent.append(producer.send(message).message_id)
    received = []
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        for got in consumer.receive(16, 30):
            consumer.ack(got)
            received.append(got.message_id)
    print(json.dumps([sent, received]))
finally:
    producer.shutdown()
    consumer.shutdown()
"""


def official_round_trip_over_tls(cluster: dict, topic: str, count: int, group: str = "TlsGroup",
                                 credentials: tuple[str, str] = ("", "")) -> tuple[list[str], list[str]]:
    """The official Python client, over TLS trusting the cluster's CA and signing with
    `credentials` (access key, secret key), sends `count` messages to the topic and receives them
    in the group: the ids sent and received."""
    environment = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cluster["ca"]}
    done = subprocess.run([sys.executable, "-c", _OFFICIAL_TLS_CLIENT, cluster["access_point"], topic, str(count),
                           group, *credentials], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    sent, received = json.loads(done.stdout.splitlines()[-1])
    return sent, received


def receive_all(consumer, expected: int, invisible_s: int = 30, timeout_s: float = 20.0) -> list:
    received = []
    deadline = time.monotonic() + timeout_s
    while len(received) < expected and time.monotonic() < deadline:
        received.extend(consumer.receive(32, invisible_s))
    return received


def read_dead_letters(client_config, group: str, count: int) -> list:
    """`count` messages of %DLQ%<group>, read and acked by a SimpleConsumer of a group of its own."""
    reader = simple_consumer(client_config, f"R{uuid.uuid4().hex[:8]}", f"%DLQ%{group}")
    try:
        letters = receive_all(reader, count)
        for letter in letters:
            reader.ack(letter)
        return letters
    finally:
        reader.shutdown()
