"""`quorumq up`: a whole cluster on this machine in the foreground, for development, tests and demos.

Ports are laid out from a base port P, all within P..P+199:
  name server             P
  ZooKeeper node 0        P+1 (with --controller)
  controller c            P+2+c (with --controller)
  dashboard               P+9 (`quorumq dashboard`, unless --no-dashboard)
  replica r of group i    P+10+10*i+2*r (gRPC), P+11+10*i+2*r (HA); r = 0 is the master
  ZooKeeper node z > 0    P+89+z (with --zookeepers 3 or 5)
  proxies                 P+94, all of them (--proxies N; SO_REUSEPORT, the kernel spreads connections)
  metrics                 each process's gRPC port + 100 (Prometheus, http://HOST:PORT/metrics)
  ZooKeeper peer ports    P+190+2*z (quorum), P+191+2*z (leader election) of node z, in an ensemble
`--set metricsExporterType=DISABLE` turns the metrics off (proxies have none yet).
Every process gets a directory DIR/<name> holding its config, log and data. With --replicas N each
broker name has a master (brokerId 0) and N-1 slaves (brokerRole SLAVE, brokerId r), and
totalReplicas is N unless --set says otherwise; --set brokerRole applies to the masters.

With --controller, ZooKeeper (one node, or an ensemble of --zookeepers 3 or 5) and --controllers
controllers run as well, and the brokers run in controller mode: the controllers assign their ids
and elect each group's master.

The cluster is up once it is writable: every broker registered with the name server and every
group's master accepting a send at its configured quorum. Only then is DIR/cluster.json written;
it names every process once, each broker with its id and role as the name server routes them, and
is written again (atomically) within a second of a role change.

With --tls, `up` makes a throwaway CA and one certificate for 127.0.0.1 in DIR/tls and sets
tls.server.mode=enforcing with them on every process (docs/tls.md): every gRPC port and HA stream
is TLS, and cluster.json names the CA as "ca". `up` itself, like any TLS cluster's members, talks
TLS as the name server's config says.
"""

import argparse
import asyncio
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from quorumq import config
from quorumq.cli import certs
from quorumq.cli.dashboard import ACCESS_KEY_ENV, SECRET_KEY_ENV
from quorumq.client import AdminClient, ClientError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config, Kind
from quorumq.controller.zookeeper import LocalZooKeeper
from quorumq.core import auth
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.constants import MASTER_ID
from quorumq.tls import ClientTls, use_member_tls

HOST = "127.0.0.1"
BASE_PORT_DEFAULT = 20000
GRPC_PORT_SPAN = 100  # the gRPC, HA and ZooKeeper client ports, the dashboard's
METRICS_PORT_OFFSET = GRPC_PORT_SPAN  # a process's metrics port: its gRPC port + this
PORT_SPAN = GRPC_PORT_SPAN + METRICS_PORT_OFFSET
BROKER_PORTS_END = 90  # brokers take P+10..P+89
BROKER_PORT_OFFSET = 10
BROKER_PORT_STRIDE = 10
BROKERS_MAX = (BROKER_PORTS_END - BROKER_PORT_OFFSET) // BROKER_PORT_STRIDE
REPLICA_PORT_STRIDE = 2
REPLICAS_MAX = BROKER_PORT_STRIDE // REPLICA_PORT_STRIDE
ZOOKEEPER_PORT_OFFSET = 1  # node 0's client port
ZOOKEEPER_MORE_PORT_OFFSET = BROKER_PORTS_END - 1  # node z > 0's client port is P+89+z
ZOOKEEPER_PEER_PORT_OFFSET = PORT_SPAN - 10  # node z's quorum and election ports: P+190+2z, P+191+2z
ZOOKEEPER_NODES = (1, 3, 5)  # an ensemble of 2 or 4 survives no more failures than one node fewer
CONTROLLER_PORT_OFFSET = 2
CONTROLLERS_MAX = 5
DASHBOARD_PORT_OFFSET = 9  # free: the controllers end at P+6, the brokers begin at P+10
PROXY_PORT_OFFSET = 94  # after the ZooKeeper nodes' P+90..P+93
PROXIES_MAX = 8
STOP_GRACE_S = 10.0
READY_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2
ROLE_POLL_INTERVAL_S = 0.5  # cluster.json follows a role change within about this
LOG_TAIL_BYTES = 2000
# Keys `up` assigns to lay out the cluster; --cluster sets brokerClusterName.
MANAGED_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "listenPort",
                          "haListenPort", "storePathRootDir", "metricsPromExporterHost", "metricsPromExporterPort",
                          "grpcServerPort", "grpcServerReusePort"})
PR_SET_PDEATHSIG = 1


@dataclass
class Planned:
    """One process of the cluster, before and after it starts."""

    kind: Kind
    name: str  # its directory under DIR
    port: int
    values: dict[str, str]
    directory: Path
    data_dir: Path
    broker_name: str = ""
    replica: int = 0  # its place in the layout; r = 0 starts as the master
    broker_id: int = 0  # as the name server routes it (in controller mode the controller assigns it)
    role: str = ""  # "master" or "slave", as the name server routes it
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / f"{self.kind.value}.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.kind.value}.log"

    @property
    def metrics_address(self) -> str | None:
        """host:port of its /metrics, when on."""
        if self.values.get("metricsExporterType") != "PROM":
            return None
        return f"{HOST}:{self.values['metricsPromExporterPort']}"

    def describe(self) -> dict:
        entry = {"kind": self.kind.value, "pid": self.process.pid if self.process else None,
                 "address": self.address, "config": str(self.config_path), "log": str(self.log_path),
                 "data_dir": str(self.data_dir)}
        if self.kind is Kind.BROKER:
            entry.update(broker_name=self.broker_name, broker_id=self.broker_id, role=self.role,
                         replica=self.replica)
        if self.metrics_address:
            entry["metrics"] = self.metrics_address
        return entry


def parse_assignment(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def parse_broker_assignment(text: str) -> tuple[int, str, str]:
    index, sep, assignment = text.partition(":")
    if not sep or not index.isdigit():
        raise argparse.ArgumentTypeError(f"expected INDEX:key=value, got {text!r}")
    return (int(index), *parse_assignment(assignment))


def kinds_knowing(key: str) -> frozenset[Kind]:
    """The process kinds a --set key goes to; RocketMQ-only keys go to brokers, which warn about them."""
    if key in MANAGED_KEYS:
        raise QuorumqError(Error.CONFIG_INVALID, f"{key} is laid out by `quorumq up` and cannot be set")
    if key in config.ROCKETMQ_KEYS_REFUSED:
        raise QuorumqError(Error.CONFIG_INVALID, f"{key}: {config.ROCKETMQ_KEYS_REFUSED[key]}")
    if key in config.KEYS:
        return config.KEYS[key].kinds
    if key in config.ROCKETMQ_KEYS_UNUSED:
        return frozenset({Kind.BROKER})
    raise QuorumqError(Error.CONFIG_INVALID, f"unknown config key {key!r}")


def zookeeper_ports(base_port: int, node: int) -> tuple[int, int, int]:
    """ZooKeeper node `node`'s client, quorum and election ports."""
    client = base_port + (ZOOKEEPER_PORT_OFFSET if node == 0 else ZOOKEEPER_MORE_PORT_OFFSET + node)
    peer = base_port + ZOOKEEPER_PEER_PORT_OFFSET + 2 * node
    return client, peer, peer + 1


def zookeeper_nodes(directory: Path, base_port: int, count: int) -> list[LocalZooKeeper]:
    """ZooKeeper: one standalone node, or an ensemble of `count`."""
    ports = [zookeeper_ports(base_port, node) for node in range(count)]
    ensemble = [(peer, election) for _, peer, election in ports] if count > 1 else []
    return [LocalZooKeeper(directory / ("zookeeper" if node == 0 else f"zookeeper-{node}"), client,
                           ensemble=ensemble, my_id=node + 1 if ensemble else 0)
            for node, (client, _, _) in enumerate(ports)]


def plan(directory: Path, base_port: int, brokers: int, cluster: str,
         sets: list[tuple[str, str]], broker_sets: list[tuple[int, str, str]], replicas: int = 1,
         controllers: int = 0, zookeepers: int = 1, proxies: int = 0) -> list[Planned]:
    """The name server, the controllers, the brokers and the proxies with their config values;
    raises QuorumqError on bad input. With controllers, ZooKeeper's `zookeepers` nodes listen as
    zookeeper_ports lays them out."""
    if not 1 <= brokers <= BROKERS_MAX:
        raise QuorumqError(Error.CONFIG_INVALID, f"--brokers must lie in 1..{BROKERS_MAX}")
    if not 1 <= replicas <= REPLICAS_MAX:
        raise QuorumqError(Error.CONFIG_INVALID, f"--replicas must lie in 1..{REPLICAS_MAX}")
    if not 0 <= controllers <= CONTROLLERS_MAX:
        raise QuorumqError(Error.CONFIG_INVALID, f"--controllers must lie in 1..{CONTROLLERS_MAX}")
    if zookeepers not in ZOOKEEPER_NODES or (zookeepers > 1 and not controllers):
        raise QuorumqError(Error.CONFIG_INVALID, f"--zookeepers takes one of {', '.join(map(str, ZOOKEEPER_NODES))}, "
                                                 "and more than 1 only with --controller")
    if not 0 <= proxies <= PROXIES_MAX:
        raise QuorumqError(Error.CONFIG_INVALID, f"--proxies must lie in 0..{PROXIES_MAX}")
    if not 1024 <= base_port <= 65535 - PORT_SPAN:
        raise QuorumqError(Error.CONFIG_INVALID, f"--base-port must lie in 1024..{65535 - PORT_SPAN}")
    namesrv_dir = directory / "namesrv"
    namesrv = Planned(Kind.NAMESRV, "namesrv", base_port, {"listenPort": str(base_port)}, namesrv_dir, namesrv_dir)
    planned = [namesrv]
    zookeeper_address = ",".join(f"{HOST}:{zookeeper_ports(base_port, node)[0]}" for node in range(zookeepers))
    for index in range(controllers):
        port = base_port + CONTROLLER_PORT_OFFSET + index
        controller_dir = directory / f"controller-{index}"
        planned.append(Planned(Kind.CONTROLLER, controller_dir.name, port, {
            "listenPort": str(port), "zookeeperAddress": zookeeper_address,
            "zookeeperRoot": f"/quorumq/{cluster}"}, controller_dir, controller_dir))
    controller_addresses = ";".join(p.address for p in planned if p.kind is Kind.CONTROLLER)
    for index in range(brokers):
        broker_name = f"broker-{chr(ord('a') + index)}"
        for replica in range(replicas):
            port = base_port + BROKER_PORT_OFFSET + BROKER_PORT_STRIDE * index + REPLICA_PORT_STRIDE * replica
            broker_dir = directory / f"{broker_name}-{replica}"
            store_dir = broker_dir / "store"
            values = {"brokerClusterName": cluster, "brokerName": broker_name, "brokerId": str(replica),
                      "namesrvAddr": namesrv.address, "listenPort": str(port), "haListenPort": str(port + 1),
                      "storePathRootDir": str(store_dir)}
            if replicas > 1:
                values["totalReplicas"] = str(replicas)
            if controllers:
                del values["brokerId"]  # the controller assigns ids and roles
                values.update(enableControllerMode="true", controllerAddr=controller_addresses)
            elif replica > 0:
                values["brokerRole"] = "SLAVE"
            planned.append(Planned(Kind.BROKER, broker_dir.name, port, values, broker_dir, store_dir,
                                   broker_name=broker_name, replica=replica))
    for process in planned:
        process.values.update(metricsExporterType="PROM",
                              metricsPromExporterPort=str(process.port + METRICS_PORT_OFFSET))
    for index in range(proxies):
        port = base_port + PROXY_PORT_OFFSET
        proxy_dir = directory / f"proxy-{index}"
        planned.append(Planned(Kind.PROXY, proxy_dir.name, port, {
            "namesrvAddr": namesrv.address, "grpcServerPort": str(port), "grpcServerReusePort": "true"},
            proxy_dir, proxy_dir))
    for key, value in sets:
        kinds = kinds_knowing(key)
        for process in planned:
            if process.kind in kinds and not (key == "brokerRole" and (process.replica > 0 or controllers)):
                process.values[key] = value
    broker_processes = [p for p in planned if p.kind is Kind.BROKER]
    for index, key, value in broker_sets:
        if Kind.BROKER not in kinds_knowing(key):
            raise QuorumqError(Error.CONFIG_INVALID, f"--broker-set {index}: {key} is not a broker key")
        if index >= len(broker_processes):
            raise QuorumqError(Error.CONFIG_INVALID,
                               f"--broker-set {index}: there are {len(broker_processes)} brokers, from 0")
        broker_processes[index].values[key] = value
    for process in planned:  # a bad value fails here, before anything starts
        Config(process.kind, process.values, source=f"{process.name} settings")
    return planned


def _die_with_parent() -> None:
    """Runs in each child before exec: if `up` is killed outright, its children get SIGTERM."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start(process: Planned) -> None:
    process.directory.mkdir(parents=True, exist_ok=True)
    config.write_properties(process.config_path, process.values)
    with open(process.log_path, "ab") as log:
        process.process = subprocess.Popen(
            [sys.executable, "-m", "quorumq.cli.main", process.kind.value, "-c", str(process.config_path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # Its own session keeps a terminal's Ctrl-C away, so `up` stops brokers before the name server.
            start_new_session=True, preexec_fn=_die_with_parent)


def stop(processes: list[Planned], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the brokers, then the name server; SIGKILL whatever outlives its grace period."""
    for wave in ([p for p in processes if p.kind is not Kind.NAMESRV],
                 [p for p in processes if p.kind is Kind.NAMESRV]):
        deadline = time.monotonic() + grace_s
        running = [p.process for p in wave if p.process and p.process.poll() is None]
        for child in running:
            child.send_signal(signal.SIGTERM)
        for child in running:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def exited(processes: list[Planned]) -> list[Planned]:
    return [p for p in processes if p.process and p.process.poll() is not None]


def log_tail(process: Planned) -> str:
    with open(process.log_path, "rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
        return log.read().decode(errors="replace")


def routed_roles(info: pb.ClusterInfo, cluster: str) -> dict[str, tuple[str, int, str]]:
    """address -> (broker name, broker id, "master" or "slave") of each broker the name server routes."""
    return {b.address: (b.broker_name, b.broker_id, "master" if b.broker_id == MASTER_ID else "slave")
            for b in info.brokers if b.cluster == cluster}


def apply_roles(processes: list[Planned], routed: dict[str, tuple[str, int, str]]) -> bool:
    """Give each broker its id and role as routed; whether any changed. A broker the name server no
    longer routes (dead, or not registered again yet) keeps what it had, but is no master once
    another broker of its name is."""
    brokers = [p for p in processes if p.kind is Kind.BROKER]
    before = [(p.broker_id, p.role) for p in brokers]
    for process in brokers:
        if process.address in routed:
            _, process.broker_id, process.role = routed[process.address]
    routed_masters = {name for name, _, role in routed.values() if role == "master"}
    for process in brokers:
        if process.address not in routed and process.role == "master" and process.broker_name in routed_masters:
            process.role = "slave"
    return before != [(p.broker_id, p.role) for p in brokers]


async def not_ready(admin: AdminClient, processes: list[Planned], cluster: str) -> list[str]:
    """What keeps the cluster from being writable: brokers not registered, groups without a master,
    masters that would refuse a send (their quorum not met yet, fenced, a full disk)."""
    info = await admin.cluster_info()
    routed = routed_roles(info, cluster)
    missing = [f"{p.name} ({p.address}) has not registered with the name server"
               for p in processes if p.kind is Kind.BROKER and p.address not in routed]
    names = sorted({p.broker_name for p in processes if p.kind is Kind.BROKER})
    masters = {name: address for address, (name, _, role) in routed.items() if role == "master"}
    for name in names:
        if name not in masters:
            missing.append(f"{name} has no master routed by the name server")
            continue
        status = await admin.broker_status(masters[name])
        if status.get("acceptsSends") != "True":
            missing.append(f"{name}'s master {masters[name]} refuses sends (role {status.get('brokerRole')}, "
                           f"replicas in sync {status.get('inSyncReplicas', '-')}, "
                           f"alive {status.get('aliveReplicas', '-')}, writable {status.get('writable')})")
    for proxy in [p for p in processes if p.kind is Kind.PROXY][:1]:  # they share one port
        if not await listens(proxy.port):
            missing.append(f"no proxy listens on {proxy.address} yet")
    if not missing:
        apply_roles(processes, routed)
    return missing


async def listens(port: int) -> bool:
    """Whether a server accepts connections on HOST:port."""
    try:
        _, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return False
    writer.close()
    return True


def inner_credentials(processes: list[Planned]) -> auth.Credentials | None:
    """innerClientAuthenticationCredentials, which every process got: `up` signs its own checks
    with them, and its dashboard's calls."""
    inner = auth.inner_credentials(processes[0].values.get("innerClientAuthenticationCredentials", ""))
    return inner.credentials if inner is not None else None


async def wait_ready(processes: list[Planned], cluster: str, stopping: asyncio.Event,
                     timeout_s: float) -> str | None:
    """Wait until the cluster is writable (or `up` is told to stop); why not, or None."""
    namesrv = processes[0]
    deadline = time.monotonic() + timeout_s
    missing = ["the name server does not answer"]
    async with AdminClient(namesrv.address, timeout_s=1.0, credentials=inner_credentials(processes)) as admin:
        while not stopping.is_set():
            dead = exited(processes)
            if dead:
                return "\n".join(f"{p.name} exited with code {p.process.returncode}; the end of {p.log_path}:\n"
                                 f"{log_tail(p)}" for p in dead)
            try:
                missing = await not_ready(admin, processes, cluster)
                if not missing:
                    return None
            except ClientError as error:
                missing = [f"the cluster does not answer yet: {error}"]
            if time.monotonic() > deadline:
                return f"not writable within {timeout_s:.0f} s:\n  " + "\n  ".join(missing)
            await asyncio.sleep(POLL_INTERVAL_S)
    return None


async def follow_roles(path: Path, cluster: str, processes: list[Planned], zookeepers: list[LocalZooKeeper],
                       dashboard: str, stopping: asyncio.Event) -> None:
    """Write cluster.json again whenever the name server routes a broker in another role."""
    async with AdminClient(processes[0].address, timeout_s=1.0, credentials=inner_credentials(processes)) as admin:
        while not stopping.is_set():
            try:
                if apply_roles(processes, routed_roles(await admin.cluster_info(), cluster)):
                    write_cluster_file(path, cluster, processes, zookeepers, dashboard)
            except ClientError:
                pass  # the name server is away; the file keeps what it last knew
            try:
                await asyncio.wait_for(stopping.wait(), timeout=ROLE_POLL_INTERVAL_S)
            except TimeoutError:
                pass


def start_dashboard(processes: list[Planned], directory: Path, port: int) -> subprocess.Popen:
    """`quorumq dashboard` over the cluster, logging to DIR/dashboard/dashboard.log."""
    controllers = ";".join(p.address for p in processes if p.kind is Kind.CONTROLLER)
    member = member_tls(processes)
    directory.mkdir(parents=True, exist_ok=True)
    # Its calls, the test message's send too, are signed with the inner credentials, if any.
    inner = inner_credentials(processes)
    signing = {ACCESS_KEY_ENV: inner.access_key, SECRET_KEY_ENV: inner.secret_key} if inner is not None else {}
    with open(directory / "dashboard.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "quorumq.cli.main", "dashboard", "-n", processes[0].address, "--host", HOST,
             "--port", str(port), *(["-a", controllers] if controllers else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **signing, **(member.environment() if member is not None else {})},
            preexec_fn=_die_with_parent)


async def wait_for_dashboard(dashboard: subprocess.Popen, port: int, stopping: asyncio.Event, timeout_s: float) -> None:
    """Wait until the dashboard serves, so that the URL `up` announces answers. A dashboard that
    fails never stops the cluster: its exit is reported by the watch that follows."""
    deadline = time.monotonic() + timeout_s
    while not (stopping.is_set() or dashboard.poll() is not None or time.monotonic() > deadline):
        if await listens(port):
            return
        await asyncio.sleep(POLL_INTERVAL_S)


def member_tls(processes: list[Planned]) -> ClientTls | None:
    """The TLS the cluster's members talk (the name server's config says it for all); None: plaintext."""
    return ClientTls.of_member(Config(Kind.NAMESRV, processes[0].values))


def write_cluster_file(path: Path, cluster: str, processes: list[Planned],
                       zookeepers: list[LocalZooKeeper], dashboard: str = "") -> None:
    entries = [p.describe() for p in processes]
    entries[1:1] = [{"kind": "zookeeper", "pid": node.pid, "address": node.address, "config": str(node.config_path),
                     "log": str(node.log_path), "data_dir": str(node.data_dir)} for node in zookeepers]
    document = {"cluster": cluster, "access_point": processes[0].address}
    if proxy := proxy_access_point(processes):
        document["proxy_access_point"] = proxy
    member = member_tls(processes)
    if member is not None and member.ca:
        document["ca"] = member.ca
    if dashboard:
        document["dashboard"] = dashboard
    if zookeepers:
        document["controller_addresses"] = ";".join(p.address for p in processes if p.kind is Kind.CONTROLLER)
    document["processes"] = entries
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    partial.replace(path)  # readers never see half a file


def proxy_access_point(processes: list[Planned]) -> str:
    """Where the official clients reach the proxies (all on one port); empty without proxies."""
    return next((p.address for p in processes if p.kind is Kind.PROXY), "")


def summary(cluster: str, directory: Path, processes: list[Planned], zookeepers: list[LocalZooKeeper],
            dashboard: str = "") -> str:
    lines = [f"quorumq cluster {cluster} is up in {directory}", f"  access point  {processes[0].address}"]
    if proxy := proxy_access_point(processes):
        lines.append(f"  proxies       {proxy} (the official clients' access point)")
    if dashboard:
        lines.append(f"  dashboard     {dashboard}")
    for node in zookeepers:
        lines.append(f"  {node.data_dir.name:<22} {node.address:<16} pid {node.pid:<8} log {node.log_path}")
    for p in processes:
        label = f"{p.name} ({p.role})" if p.kind is Kind.BROKER else p.name
        metrics = f" metrics {p.metrics_address}" if p.metrics_address else ""
        lines.append(f"  {label:<22} {p.address:<16} pid {p.process.pid:<8}{metrics} log {p.log_path}")
    lines.append(f"  {directory / 'cluster.json'}\nCtrl-C stops the cluster.")
    return "\n".join(lines)


async def run_cluster(args: argparse.Namespace, processes: list[Planned]) -> int:
    cluster_file = args.dir / "cluster.json"
    zookeepers = []
    if any(p.kind is Kind.CONTROLLER for p in processes):
        zookeepers = zookeeper_nodes(args.dir, args.base_port, args.zookeepers)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    cluster_file.unlink(missing_ok=True)  # a stale file would announce a cluster that is not up
    dashboard, dashboard_url = None, ""
    try:
        for node in zookeepers:
            node.start()
        for node in zookeepers:  # an ensemble's node serves once a quorum of them has formed
            await asyncio.to_thread(node.wait_ready)
        for process in processes:
            start(process)
        problem = await wait_ready(processes, args.cluster, stopping, args.timeout)
        if stopping.is_set():
            return 0
        if problem:
            print(f"quorumq up: {problem}", file=sys.stderr, flush=True)
            return 1
        if args.dashboard:
            port = args.base_port + DASHBOARD_PORT_OFFSET
            dashboard = start_dashboard(processes, args.dir / "dashboard", port)
            await wait_for_dashboard(dashboard, port, stopping, args.timeout)
            dashboard_url = f"http://{HOST}:{port}/"
        write_cluster_file(cluster_file, args.cluster, processes, zookeepers, dashboard_url)
        print(summary(args.cluster, args.dir, processes, zookeepers, dashboard_url), flush=True)
        roles = asyncio.create_task(follow_roles(cluster_file, args.cluster, processes, zookeepers, dashboard_url,
                                                 stopping))
        reported: set[str] = set()
        while not stopping.is_set():  # a process that dies is reported, never restarted
            for process in exited(processes):
                if process.name not in reported:
                    reported.add(process.name)
                    print(f"quorumq up: {process.name} (pid {process.process.pid}) exited with code "
                          f"{process.process.returncode}", file=sys.stderr, flush=True)
            if dashboard is not None and dashboard.poll() is not None and "dashboard" not in reported:
                reported.add("dashboard")
                print(f"quorumq up: the dashboard exited with code {dashboard.returncode}; see "
                      f"{args.dir / 'dashboard' / 'dashboard.log'}", file=sys.stderr, flush=True)
            try:
                await asyncio.wait_for(stopping.wait(), timeout=0.5)
            except TimeoutError:
                pass
        await roles
        return 0
    finally:
        if dashboard is not None:
            dashboard.terminate()
            dashboard.wait()
        stop(processes)
        for node in zookeepers:
            node.stop()
        cluster_file.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    args.dir = args.dir.resolve()
    try:
        if args.controller and args.controllers < 1:
            raise QuorumqError(Error.CONFIG_INVALID, f"--controllers must lie in 1..{CONTROLLERS_MAX}")
        tls_files = certs.paths(args.dir / "tls")
        # --set comes after, so that it may add tls.server.need.client.auth=require, say.
        sets = [("tls.server.mode", "enforcing"), *((key, str(path)) for key, path in tls_files.items()),
                *args.set] if args.tls else args.set
        processes = plan(args.dir, args.base_port, args.brokers, args.cluster, sets, args.broker_set,
                         args.replicas, args.controllers if args.controller else 0, args.zookeepers, args.proxies)
    except QuorumqError as error:
        print(f"quorumq up: {error}", file=sys.stderr)
        return 2
    if args.tls:
        certs.write(args.dir / "tls")
    use_member_tls(Config(Kind.NAMESRV, processes[0].values))  # the readiness checks talk as members do
    return asyncio.run(run_cluster(args, processes))


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("up", help="start a name server and brokers on this machine in the foreground",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, type=Path, help="where configs, logs, data and cluster.json go")
    parser.add_argument("--cluster", default="DefaultCluster", help="brokerClusterName (default %(default)s)")
    parser.add_argument("--base-port", type=int, default=BASE_PORT_DEFAULT,
                        help=f"first of the {PORT_SPAN} ports the cluster uses (default %(default)s)")
    parser.add_argument("--brokers", type=int, default=1, help=f"master brokers, 1..{BROKERS_MAX} (default 1)")
    parser.add_argument("--replicas", type=int, default=1,
                        help=f"replicas per broker name, the master included, 1..{REPLICAS_MAX} (default 1)")
    parser.add_argument("--controller", action="store_true",
                        help="controller mode: also run ZooKeeper and controllers, which elect the masters")
    parser.add_argument("--controllers", type=int, default=1,
                        help=f"controllers with --controller, 1..{CONTROLLERS_MAX} (default 1)")
    parser.add_argument("--zookeepers", type=int, default=1,
                        help="ZooKeeper nodes with --controller: 1, 3 or 5 (default 1)")
    parser.add_argument("--proxies", type=int, default=0,
                        help=f"proxies in front of the brokers, 0..{PROXIES_MAX}, all on port "
                             f"P+{PROXY_PORT_OFFSET} (default 0)")
    parser.add_argument("--set", action="append", default=[], type=parse_assignment, metavar="KEY=VALUE",
                        help="a config key for every process whose kind knows it (repeatable)")
    parser.add_argument("--broker-set", action="append", default=[], type=parse_broker_assignment,
                        metavar="INDEX:KEY=VALUE",
                        help="a config key for one broker, counted from 0 in cluster.json order (repeatable)")
    parser.add_argument("--tls", action="store_true",
                        help="TLS on every port, with a throwaway CA and certificate made in DIR/tls")
    parser.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                        help=f"do not start `quorumq dashboard` (on P+{DASHBOARD_PORT_OFFSET})")
    parser.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                        help="seconds to wait for the cluster to be writable (default %(default)s)")
    parser.set_defaults(run=run)
