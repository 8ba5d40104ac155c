"""One seeded chaos run: a controller-mode group of three brokers under the W3 send (idempotent
producers; W1, plain ones, with --workload W1; W4, W3 beside admin churn of other topics; W6, W3
beside the official client's FIFO producers and consumers; W7, W3 beside its timers and
transactions; W8, W3 beside churn of users and rules, secure profile only) and W2 consume
workloads (for F14: the producers, one W2 group and W5, the replicator to a standby) and one
fault kind of the B5 matrix, then healing, a final read of every replica and the checkers' verdict.
The proxy profile puts two proxies in front of the group for the official client (W6, W7).

    python tests/chaos/run.py --faults F1,F4 --count 2 --duration 180 [--seed N] [--profile weak|secure|proxy]
        [--workload W1|W4|W6|W7|W8] [--ledger tests/chaos/ledger.jsonl] [--keep DIR]

Every run keeps its history, verdict and logs under its directory and prints the seed that replays
its fault schedule; with --ledger each run appends one line to the ledger docs/reliability.md is
built from (tests/chaos/report.py)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from checkers import (  # noqa: E402
    AccessRead,
    Hygiene,
    access_changes,
    access_grant,
    availability,
    check_all,
    churn,
    fifo,
    pipeline,
    summary,
    timers,
    transactions,
    translations,
    verdict_table,
)
from controller_group import SETS, Group  # noqa: E402
from final_read import read_offsets, read_replica  # noqa: E402
from harness import LocalCluster, free_base_port, pid_alive, stop_process  # noqa: E402
from history import History, read_history  # noqa: E402
from nemesis import (  # noqa: E402
    CLOCK_DIR_VARIABLE,
    COMBINED,
    ENSEMBLE_FAULTS,
    FAULT_KINDS,
    PIPELINE,
    PROXY_KILL,
    Nemesis,
    mount_small_disks,
    unmount,
)
from network import Network  # noqa: E402
from pipeline import Pipeline  # noqa: E402
from quorumq import tls  # noqa: E402
from quorumq.cli import certs  # noqa: E402
from quorumq.cli.dashboard import ACCESS_KEY_ENV, SECRET_KEY_ENV  # noqa: E402
from quorumq.client import ClientError, Credentials  # noqa: E402
from quorumq.store.message_store import FSYNC_LOG_VARIABLE  # noqa: E402
from workload import (  # noqa: E402
    CHURN_TOPICS,
    FIFO_RETRY_MAX_TIMES,
    TIMER_TX_SETS,
    AccessChurn,
    Consumers,
    FifoWorkload,
    Producers,
    TimerWorkload,
    TopicChurn,
    prepare_fifo,
    prepare_timers,
)

TOPIC = "ChaosTopic"
QUEUES = 4
BROKER_NAME = "broker-a"
# Once the group is whole again the workloads go on until a send was acknowledged and every
# consumer group committed past what was acknowledged before the heal (C9's heal_to_ack and
# heal_to_drain figures), or this long at most.
AFTER_HEAL_S = 5.0
AFTER_HEAL_POLL_S = 0.2
# Past diskSpaceCleanForciblyRatio retention deletes the oldest segments whether or not they have
# expired (RocketMQ's rule, docs/durability.md): acknowledged sends go by design, which no checker
# can tell from a loss. F8 fills a store's disk to 100%, and a host's disk may stand past 85%, so
# runs turn that deletion off (no disk is fuller than 1.0); a full disk still refuses writes.
NO_FORCED_DELETION = {"diskSpaceCleanForciblyRatio": "1.0"}
# The spec's durable settings (B4), and the weaker ones whose losses are measured, not assumed.
PROFILES = {
    "durable": {**SETS, **NO_FORCED_DELETION, "flushDiskType": "SYNC_FLUSH", "allAckInSyncStateSet": "true",
                "enableElectUncleanMaster": "false"},
    "weak": {**SETS, **NO_FORCED_DELETION, "flushDiskType": "ASYNC_FLUSH", "allAckInSyncStateSet": "false",
             "minInSyncReplicas": "1", "enableAutoInSyncReplicas": "true"},
}
# The secure profile: the durable settings with authentication and authorization (docs/security.md)
# and TLS enforcing on every port (docs/tls.md, added by `secure_sets`: the certificates are made for
# the runs). Every client of a run signs with the init user, a Super user whom no rule restricts;
# the members with the inner credentials.
SECURE = "secure"
SECURE_USER = Credentials("chaos-user", "chaos-user-secret")
SECURE_INNER = Credentials("chaos-inner", "chaos-inner-secret")
PROFILES[SECURE] = {
    **PROFILES["durable"], "authenticationEnabled": "true", "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": SECURE_USER.access_key, "password": SECURE_USER.secret_key}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": SECURE_INNER.access_key,
                                                        "secretKey": SECURE_INNER.secret_key}),
}
# The proxy profile: the durable settings, with PROXIES proxies on one port (`quorumq up --proxies`,
# SO_REUSEPORT) as the official client's endpoint; quorumq's own clients still reach the brokers.
PROXY = "proxy"
PROXIES = 2
PROFILES[PROXY] = PROFILES["durable"]
# The official client reads its trust roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) once per process.
OFFICIAL_ROOTS_VARIABLE = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"
# The producers: idempotent resends (same message id and queue), plain ones, or idempotent ones
# beside W4's topics made, written and deleted in turn, beside W6's FIFO topic and group, or beside
# W7's timers and transactions (which set the brokers' transaction checks, TIMER_TX_SETS), or
# beside W8's users and rules (authenticationEnabled: the secure profile).
WORKLOADS = ("W3", "W1", "W4", "W6", "W7", "W8")
SECURE_WORKLOADS = ("W8",)
OFFICIAL_WORKLOADS = ("W6", "W7")  # the official client's: what a proxy serves
WORKLOAD_SETS = {"W7": TIMER_TX_SETS}


@dataclass
class RunResult:
    fault: str
    seed: int
    duration_s: float
    profile: str
    workload: str
    directory: Path
    ok: bool
    rows: dict[str, object] = field(default_factory=dict)
    table: str = ""


def run(fault: str, seed: int, duration_s: float, directory: Path, profile: str = "durable",
        workload: str = "W3") -> RunResult:
    """One run. The verdict is in the result; it raises when the group cannot be made whole again
    after healing (itself a failure of the run)."""
    directory.mkdir(parents=True, exist_ok=True)
    stores = [directory / "cluster" / f"{BROKER_NAME}-{replica}" / "store" for replica in range(3)]
    mounted = mount_small_disks(stores) if fault in ("F8", COMBINED) else []
    kept = directory / "kept-stores"
    try:
        result = _run(fault, seed, duration_s, directory, profile, workload, mounted, kept)
    finally:
        unmount(mounted)
    if result.ok:
        shutil.rmtree(kept, ignore_errors=True)
    return result


def _run(fault: str, seed: int, duration_s: float, directory: Path, profile: str, workload: str,
         mounted: list[Path], kept: Path) -> RunResult:
    history_path = directory / "history.jsonl"
    history = History(history_path)
    base_port = free_base_port()
    network = Network(base_port, replicas=3, controllers=2)
    clock_dir = directory / "clocks"
    clock_dir.mkdir(exist_ok=True)
    # Inherited by every process the run starts: F12 jumps clocks, F11 cuts logs to what was fsynced.
    variables = {CLOCK_DIR_VARIABLE: str(clock_dir), FSYNC_LOG_VARIABLE: "1"}
    sets = {**PROFILES[profile], **WORKLOAD_SETS.get(workload, {})}
    credentials = None
    if profile == SECURE:
        tls_sets, variables_of_clients = secure_sets(directory.parent / "tls", network)
        sets.update(tls_sets)
        variables.update(variables_of_clients)
        credentials = SECURE_USER
    os.environ.update(variables)
    try:
        cluster = LocalCluster(directory / "cluster", replicas=3, controllers=2, sets=sets,
                               base_port=base_port, broker_sets=network.broker_sets(),
                               zookeepers=3 if fault in ENSEMBLE_FAULTS else 1,
                               proxies=PROXIES if profile == PROXY else 0)
        try:
            outcome = exercise(cluster, network, fault, seed, duration_s, history, directory, workload,
                               credentials)
        finally:
            cluster.stop()
            # The small disks are tmpfs: a copy of each store as the brokers left it (the final
            # read recovers them), kept when the run fails.
            for store in mounted:
                shutil.copytree(store, kept / store.parent.name)
        brokers, final_master, in_sync = outcome.brokers, outcome.final_master, outcome.in_sync
        facts = Hygiene(outcome.exits, outcome.peak_rss_mb, unhandled_errors(directory / "cluster"))
        segment_bytes = int(PROFILES[profile]["mappedFileSizeCommitLog"])
        final = {broker["address"]: read_replica(Path(broker["data_dir"]), TOPIC, BROKER_NAME, segment_bytes)
                 for broker in brokers}
        final_offsets = {broker["address"]: read_offsets(Path(broker["data_dir"]), TOPIC) for broker in brokers}
        churned = {topic: {broker["address"]: read_replica(Path(broker["data_dir"]), topic, BROKER_NAME, segment_bytes)
                           for broker in brokers} for topic in CHURN_TOPICS} if workload == "W4" else None
    finally:
        for variable in variables:
            del os.environ[variable]
        network.close()
        history.close()
    records = read_history(history_path)
    results = check_all(records, final, final_offsets, final_master, in_sync, facts)
    if churned is not None:
        results.append(churn(records, churned, final_master, in_sync))
    if workload == "W6":
        results.append(fifo(records, max_attempts=FIFO_RETRY_MAX_TIMES + 1))
    if workload == "W7":
        results += [timers(records), transactions(records)]
    if outcome.access is not None:
        results.append(access_changes(records, outcome.access))
    rows = {"fault": fault, "seed": seed, "profile": profile, "workload": workload, "duration_s": duration_s,
            **summary(records), **availability(records, outcome.healed_at)}
    if outcome.standby is not None:
        source = final[final_master]
        results += [pipeline(records, source, outcome.standby), translations(records, source, outcome.standby)]
        rows["standby_drain_s"] = outcome.standby_drain_s
    table = verdict_table(results, rows)
    ok = all(result.ok for result in results)
    (directory / "verdict.txt").write_text(table + "\n")
    rows["checks"] = {result.name: result.counts for result in results}
    (directory / "verdict.json").write_text(json.dumps({**rows, "ok": ok}, indent=2) + "\n")
    return RunResult(fault, seed, duration_s, profile, workload, directory, ok, rows, table)


def secure_sets(directory: Path, network: Network) -> tuple[dict[str, str], dict[str, str]]:
    """The secure profile's TLS settings, with a CA and certificate made once in `directory` for
    every run of the process (the official client keeps the first CA it trusts), valid for the
    addresses the slaves dial their master at (the proxies' `brokerIP2`); and the environment that
    makes the run's clients (quorumq's, `quorumq admin`, the official one) trust that CA and sign
    admin commands with the init user."""
    files = certs.paths(directory)
    if not files["tls.server.keyPath"].exists():
        certs.write(directory, hosts=(*certs.HOSTS, *network.member_hosts()))
    ca = str(files["tls.server.trustCertPath"])
    sets = {"tls.server.mode": "enforcing", **{key: str(path) for key, path in files.items()}}
    return sets, {tls.CA_VARIABLE: ca, OFFICIAL_ROOTS_VARIABLE: ca, ACCESS_KEY_ENV: SECURE_USER.access_key,
                  SECRET_KEY_ENV: SECURE_USER.secret_key}


@dataclass
class Outcome:
    brokers: list[dict]
    final_master: str
    in_sync: set[str]  # the in-sync replicas' addresses
    healed_at: float  # monotonic
    exits: tuple[str, ...]  # processes found dead once the nemesis had healed its last fault
    peak_rss_mb: dict[str, float]  # each process's VmHWM before the brokers stopped
    standby: dict[str, list[tuple[int, str]]] | None = None  # F14: the standby's queues
    standby_drain_s: float | None = None  # F14: from the group being whole until the standby held the source's messages
    access: AccessRead | None = None  # W8: the users and rules of the final master and the in-sync replicas read


def exercise(cluster: LocalCluster, network: Network, fault: str, seed: int, duration_s: float,
             history: History, directory: Path, workload: str, credentials: Credentials | None = None) -> Outcome:
    """Start the cluster, run the workloads under the nemesis, heal, let the group become whole
    and stop its brokers; every client signs with `credentials`, if any. F14 runs the replicator
    to a standby beside the producers, and one consumer group of two whose offsets it translates
    (two clusters and a Spark driver fill the two cores)."""
    group = Group(cluster.start(timeout=90), credentials)
    workloads = []
    nemesis = standby = None
    try:
        group.wait_in_sync()
        for broker in group.brokers:
            group.admin.update_topic(broker["address"], TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        access_point = cluster.info["access_point"]
        if workload == "W6":  # raises FifoUnsupported on a cluster that does not serve FIFO yet
            prepare_fifo(access_point, cluster.info["cluster"], group.master()["address"], credentials)
        if workload == "W7":  # raises TimersUnsupported on a cluster that does not serve them yet
            prepare_timers(access_point, cluster.info["cluster"], group.master()["address"], credentials)
        consumers = Consumers(access_point, TOPIC, QUEUES, history, groups=1 if fault == PIPELINE else 2,
                              credentials=credentials)
        producers = Producers(access_point, TOPIC, history, queues=None if workload == "W1" else QUEUES,
                              credentials=credentials)
        workloads = [producers, consumers]
        addresses = [broker["address"] for broker in group.brokers]
        if workload == "W4":
            workloads.append(TopicChurn(access_point, addresses, history, credentials))
        if workload == "W8":
            workloads.append(AccessChurn(access_point, addresses, TOPIC, history, seed, credentials))
        if workload in OFFICIAL_WORKLOADS:
            kind = FifoWorkload if workload == "W6" else TimerWorkload
            # The proxies' one port when the run has them. Over TLS the official client checks each
            # broker's certificate against its endpoints joined into one name ("127.0.0.1:a,127.0.0.1:b"),
            # which no certificate can hold: one broker, which forwards to the master, is its endpoint then.
            endpoints = (cluster.info.get("proxy_access_point") or
                         (addresses[0] if tls.client_tls() else ";".join(addresses)))
            workloads.append(kind(endpoints, history, seed, credentials))
        if fault == PIPELINE:
            standby = Pipeline(directory / "pipeline", access_point, TOPIC, QUEUES, consumers.groups[0], history)
            standby.start()
        nemesis = Nemesis(fault, group, network, history, seed, standby.fault if standby else None)
        for each in workloads:  # `workload` stays the name W8 is read by below
            each.start()
        nemesis.start()
        time.sleep(duration_s)
        nemesis.stop()
        processes = [*group.brokers, *group.controllers, *group.proxies]
        exits = tuple(_name(process) for process in processes if not pid_alive(process["pid"]))
        group.restore()
        healed_at = time.monotonic()
        while time.monotonic() < healed_at + AFTER_HEAL_S and not served_after_heal(history, healed_at):
            time.sleep(AFTER_HEAL_POLL_S)
        for each in workloads:
            each.stop()
        info = group.wait_in_sync()
        final_master = group.master()["address"]
        in_sync = {info["brokers"][str(broker_id)] for broker_id in info["sync_state_set"]}
        peaks = {_name(process): peak_rss_mb(process["pid"]) for process in processes if pid_alive(process["pid"])}
        outcome = Outcome(group.brokers, final_master, in_sync, healed_at, exits, peaks)
        if workload == "W8":
            outcome.access = read_access(group, final_master, in_sync)
        if standby:
            outcome.standby_drain_s = standby.drain()
            standby.close()
            outcome.standby = standby.final_read()
        for broker in group.brokers:
            stop_process(broker)
        return outcome
    finally:
        if nemesis:
            nemesis.halt()
        for each in workloads:
            each.halt()
        if standby:
            standby.close()
        group.close()


def served_after_heal(history: History, healed_at: float) -> bool:
    """Whether a send was acknowledged after the heal and the consumer groups drained what was
    acknowledged before it."""
    figures = availability(read_history(history.path), healed_at)
    return figures["heal_to_ack_s"] is not None and figures["heal_to_drain_s"] is not None


def read_access(group: Group, final_master: str, in_sync: set[str]) -> AccessRead:
    """The users and rules of the final master and of each in-sync replica that answers."""
    read: AccessRead = {}
    for address in sorted(in_sync | {final_master}):
        try:
            held = group.admin.access(address)
        except ClientError:
            if address == final_master:
                raise
            continue
        rules = {rule.subject.removeprefix("User:"): frozenset(
            (entry.resource, access_grant(entry.actions, entry.decision)) for entry in rule.entries)
            for rule in held.acls}
        read[address] = {user.username: (user.password, user.user_type, user.user_status,
                                         rules.get(user.username, frozenset())) for user in held.users}
    return read


def _name(process: dict) -> str:
    return Path(process["log"]).parent.name  # broker-a-0, controller-1...


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmHWM for pid {pid}")


UNHANDLED_MARKS = ("Traceback (most recent call last)", "Task exception was never retrieved")


def unhandled_errors(cluster_dir: Path) -> tuple[str, ...]:
    """Each traceback or unretrieved task exception in the processes' logs, as the log line
    that introduced it."""
    found = []
    for log_file in sorted(cluster_dir.glob("*/*.log")):
        previous = ""
        for line in log_file.read_text(errors="replace").splitlines():
            if any(mark in line for mark in UNHANDLED_MARKS):
                found.append(f"{log_file.parent.name}: {previous.strip()[:200]}")
            previous = line
    return tuple(found)


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    return done.stdout.strip()


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> int:
    # Started in the background (`make chaos &`) a run ignores SIGINT; either signal must end it
    # through its `finally` blocks, which stop every process it started and unmount its disks.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description="seeded chaos runs against a controller-mode broker group")
    parser.add_argument("--faults", help=f"comma-separated, of {', '.join(FAULT_KINDS)} (default: every one the "
                        "profile can run)")
    parser.add_argument("--count", type=int, default=1, help="runs of each fault")
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of faults per run")
    parser.add_argument("--seed", type=int, help="the first run's seed (default: random); the next add 1")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="durable")
    parser.add_argument("--workload", choices=WORKLOADS, default=WORKLOADS[0], help="the producers' workload")
    parser.add_argument("--ledger", type=Path, help="append each run's verdict to this JSON-lines file")
    parser.add_argument("--keep", type=Path, help="where runs keep their histories and logs (default: a temp dir)")
    opts = parser.parse_args()
    faults = opts.faults.split(",") if opts.faults else [
        kind for kind in FAULT_KINDS if kind != PROXY_KILL or opts.profile == PROXY]
    unknown = set(faults) - set(FAULT_KINDS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
    if opts.profile == SECURE and PIPELINE in faults:
        parser.error(f"{PIPELINE} has no {SECURE} runs: the replicator cannot sign its calls")
    if opts.workload in SECURE_WORKLOADS and opts.profile != SECURE:
        parser.error(f"{opts.workload} needs --profile {SECURE}: users and rules need authenticationEnabled")
    if opts.profile == PROXY and opts.workload not in OFFICIAL_WORKLOADS:
        parser.error(f"--profile {PROXY} needs --workload {' or '.join(OFFICIAL_WORKLOADS)}: only the official "
                     "client goes through the proxies")
    if PROXY_KILL in faults and opts.profile != PROXY:
        parser.error(f"{PROXY_KILL} needs --profile {PROXY}: only its runs have proxies to kill")
    base = opts.keep or Path(tempfile.mkdtemp(prefix="chaos-"))
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    failed = 0
    for _ in range(opts.count):
        for fault in faults:
            directory = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{fault}-{seed}"
            try:
                result = run(fault, seed, opts.duration, directory, opts.profile, opts.workload)
                rows, ok = result.rows, result.ok
                print(result.table, flush=True)
            except Exception as error:  # the group never became whole again: a failed run
                rows = {"fault": fault, "seed": seed, "profile": opts.profile, "workload": opts.workload,
                        "duration_s": opts.duration,
                        "error": f"{type(error).__name__}: {error}"}
                ok = False
                print(f"{fault} seed {seed}: {rows['error']}", flush=True)
                traceback.print_exception(error, file=sys.stdout)  # the cause, for the replay
            print(f"{'PASS' if ok else 'FAIL'} {fault} seed {seed}: {directory}"
                  f"{'' if ok else f'  (replay: --faults {fault} --seed {seed} --count 1)'}", flush=True)
            failed += not ok
            if opts.ledger:
                with open(opts.ledger, "a") as ledger:
                    ledger.write(json.dumps({**rows, "ok": ok, "commit": git_commit(),
                                             "date": time.strftime("%Y-%m-%d")}) + "\n")
            seed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
