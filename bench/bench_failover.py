"""Controller-mode failover benchmark: how long a broker group cannot take sends when its master
dies, and how long the preferred master's hand-back takes, under a full send load.

One `quorumq up --replicas 3 --controller` cluster (name server, ZooKeeper, one controller, three
brokers, allAckInSyncStateSet=true, every other key at RocketMQ's default, so the heartbeat timeout
is 10 s) and one load process in the background:

  - a batch pipeline (quorumq's Producer.send_batch, --batch messages of 1 KiB per request,
    --inflight requests in flight) that keeps the machine busy, and
  - probes: a single send started every 50 ms (each on its own, so one hung on a stopped master
    holds back no other), each with its start, end, status and master epoch written to a file.

Failover (--runs times): wait until every broker is in the SyncStateSet, SIGKILL the master, and
take the time from the kill to the end of the first probe send started after the kill that was
acknowledged SEND_OK by a master of a newer epoch. Then restart the old broker (it
rejoins as a slave) and wait until it is back in the SyncStateSet. Every run must start exactly one
new master epoch; any other epoch change is a false failover and is counted. A SIGKILL closes the
broker's heartbeat stream, so the controller learns of it at once.

Stop (--stops times): the same with SIGSTOP, a master that hangs with its connections open: the
controller's HTTP/2 keepalive ping goes unanswered and ends its heartbeat stream (before the
heartbeat timeout, controllerHeartBeatTimeoutMills, would; trees older than 49d6d1a wait for the
timeout). SIGCONT then brings it back deposed, and it rejoins as a slave.

Hand-back (--handbacks times): mark a slave preferred (brokerElectionPriority=0, changed live),
turn enablePreferredMaster on at the controller, and take the time until the preferred broker is
master and the first probe send after that is acknowledged; the longest gap between two
acknowledged probe sends around it is the time writes were fenced.

False failovers: a new master epoch that no fault or hand-back started, counted whenever the bench
looks at the group (before and after each run).

With `--code LABEL=SRC_DIR` (repeatable) each tree runs its own cluster (base port P + 200 * k, its
code chosen by PYTHONPATH, which `quorumq up`'s children inherit) and its own load process, and the
trees take turns: every fault is made on each tree in --code order before the next fault, and only
the tree under a fault has its load running, so no tree's load slows another's faults. `up`'s
options that turn off the dashboard and the metrics are passed to a tree only if its `up --help`
names them (older trees have neither).

The bench never asserts: it prints a table and writes bench/results/bench_failover.json.

    .venv/bin/python bench/bench_failover.py                  # 10 kills, 3 stops, 3 hand-backs
    .venv/bin/python bench/bench_failover.py --runs 3 --stops 1 --handbacks 1
    .venv/bin/python bench/bench_failover.py --code before=bench/work/before/src --code after=src
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

NAME = "bench_failover"
BODY_SIZE = 1024
TARGET_WORST_S = 5.0
SETTLE_S = 120.0
TOPIC = "BenchFailover"
PRIORITY_DEFAULT = 2**31 - 1
PROBE_INTERVAL_S = 0.05  # a probe send starts this often, whether the earlier ones have ended or not
PROBE_TIMEOUT_S = 3.0
PROBES_IN_FLIGHT_MAX = 512
PORT_BLOCK = 200  # one `quorumq up` uses P..P+199


# ==================================================================================================
# The load process


async def load(access_point: str, probe_path: Path, stop_path: Path, active_path: Path, batch: int,
               inflight: int, rate: float) -> None:
    """Sends while `active_path` exists (the cluster under a fault), until `stop_path` exists; at most
    `rate` messages a second in all (0: as fast as the requests in flight go)."""
    from quorumq.client import ClientError, Message, Producer
    body = os.urandom(BODY_SIZE)
    acked = {"batch": 0}
    next_request = {"at": 0.0}  # the pipelines' shared schedule under a rate

    async def paced() -> None:
        if rate:
            now = time.monotonic()
            due = max(now, next_request["at"])
            next_request["at"] = due + batch / rate
            await asyncio.sleep(due - now)
    # Probes have a producer of their own, so that sends hung on a stopped master never hold back
    # the next probe; their timeout is RocketMQ's sendMsgTimeout.
    async with Producer(access_point, timeout_s=5.0) as producer, \
            Producer(access_point, window=PROBES_IN_FLIGHT_MAX, timeout_s=PROBE_TIMEOUT_S) as prober:
        async def pipeline() -> None:
            while not stop_path.exists():
                if not active_path.exists():
                    await asyncio.sleep(PROBE_INTERVAL_S)
                    continue
                await paced()
                try:
                    results = await producer.send_batch(TOPIC, [Message(body) for _ in range(batch)])
                    acked["batch"] += sum(result.status == "SEND_OK" for result in results)
                except ClientError:
                    await asyncio.sleep(0.05)

        async def probe(out) -> None:
            started, epoch = time.monotonic(), 0
            try:
                result = (await prober.send_batch(TOPIC, [Message(body)]))[0]
                status, epoch = result.status, result.master_epoch
            except ClientError as error:
                status = error.name
            out.write(json.dumps({"t0": started, "t1": time.monotonic(), "status": status, "epoch": epoch,
                                  "batch_acked": acked["batch"]}) + "\n")

        async def probes() -> None:
            with open(probe_path, "a", buffering=1) as out:
                running: set[asyncio.Task] = set()
                while not stop_path.exists():
                    if active_path.exists():
                        task = asyncio.create_task(probe(out))
                        running.add(task)
                        task.add_done_callback(running.discard)
                    await asyncio.sleep(PROBE_INTERVAL_S)
                await asyncio.gather(*running)

        await asyncio.gather(probes(), *(pipeline() for _ in range(inflight)))


# ==================================================================================================
# The orchestrator


class Cluster:
    """One tree's cluster and load process; every process of it runs the tree's code."""

    def __init__(self, code: str, src: Path, workdir: Path, base_port: int, sets: list[str],
                 opts: argparse.Namespace) -> None:
        self.code, self.src, self.env = code, src, common.code_env(src)
        self.workdir = workdir
        workdir.mkdir(parents=True)
        self.up_options = [*common.quiet_up_options(src), *sets]
        self.up = common.start([common.PYTHON, "-m", "quorumq.cli.main", "up", "--dir", workdir / "cluster",
                                "--base-port", base_port, "--replicas", 3, "--controller", "--controllers", 1,
                                *self.up_options], label=f"quorumq up {code}", log=workdir / "up.log",
                               cwd=common.ROOT, env=self.env)
        cluster_file = workdir / "cluster" / "cluster.json"
        deadline = time.monotonic() + SETTLE_S
        while not cluster_file.exists():
            if self.up.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"quorumq up did not come up; see {workdir / 'up.log'}")
            time.sleep(0.1)
        self.info = json.loads(cluster_file.read_text())
        self.brokers = [p for p in self.info["processes"] if p["kind"] == "broker"]
        self.controllers = self.info["controller_addresses"]
        self.probe_path, self.stop_path = workdir / "probes.jsonl", workdir / "stop"
        self.active_path = workdir / "active"  # the load sends while it exists
        self.probe_path.touch()
        self.loader = common.start([common.PYTHON, __file__, "_load", self.info["access_point"], self.probe_path,
                                    self.stop_path, self.active_path, opts.batch, opts.inflight, opts.rate],
                                   label=f"load {code}", log=workdir / "load.log", cwd=common.ROOT, env=self.env)
        self.loaded_since, self.loaded_s = 0.0, 0.0
        self.epoch: int | None = None  # the master epoch when the bench last looked
        self.false_failovers = 0
        self.runs: dict[str, list[dict]] = {"failovers": [], "stops": [], "handbacks": []}

    def resume_load(self) -> None:
        if not self.active_path.exists():
            self.loaded_since = time.monotonic()
            self.active_path.touch()
            first_ok_after(self.probe_path, self.loaded_since, SETTLE_S)

    def pause_load(self) -> None:
        if self.active_path.exists():
            self.active_path.unlink()
            self.loaded_s += time.monotonic() - self.loaded_since

    def load_rate(self) -> float | None:
        records = probes(self.probe_path)
        return records[-1]["batch_acked"] / self.loaded_s if records and self.loaded_s else None

    def stop(self) -> None:
        """Stop the load, `quorumq up` and every broker, those the bench restarted itself (not up's
        children) too, whichever step fails."""
        with contextlib.ExitStack() as rest:
            rest.callback(self._kill_brokers)
            rest.callback(common.stop_pid, self.up.pid)
            self.pause_load()
            self.stop_path.touch()
            self.loader.wait(timeout=30)

    def _kill_brokers(self) -> None:
        for process in self.brokers:
            if common.pid_alive(process["pid"]):
                os.kill(process["pid"], signal.SIGKILL)

    def admin(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([common.PYTHON, "-m", "quorumq.cli.main", "admin", *args], capture_output=True,
                              text=True, cwd=common.ROOT, env=self.env, timeout=30)

    def replica_info(self) -> dict | None:
        done = self.admin("getSyncStateSet", "-a", self.controllers, "-b", "broker-a", "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    def status(self, broker: dict) -> dict | None:
        done = self.admin("brokerStatus", "-n", self.info["access_point"], "-b", broker["address"], "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    def master(self) -> dict | None:
        for broker in self.brokers:
            if common.pid_alive(broker["pid"]):
                status = self.status(broker)
                if status and status["brokerRole"] != "SLAVE":
                    return broker
        return None

    def wait_in_sync(self) -> dict:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            info = self.replica_info()
            if info and len(info["sync_state_set"]) == 3 and self.master() is not None:
                return info
            time.sleep(0.2)
        raise RuntimeError("the group did not get every broker into the SyncStateSet")

    def settled(self, new_masters: int = 0) -> dict:
        """wait_in_sync, counting as false failovers the new master epochs since the bench last looked
        beyond the `new_masters` a fault or hand-back meanwhile was to start."""
        info = self.wait_in_sync()
        if self.epoch is not None:
            self.false_failovers += max(0, info["master_epoch"] - self.epoch - new_masters)
        self.epoch = info["master_epoch"]
        return info

    def restart(self, broker: dict) -> None:
        with open(broker["log"], "ab") as log:
            child = subprocess.Popen([common.PYTHON, "-m", "quorumq.cli.main", "broker", "-c", broker["config"]],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=common.ROOT, env=self.env)
        broker["pid"] = child.pid


def label(broker: dict) -> str:
    return f"{broker['broker_name']}-{broker['replica']}"


def probes(path: Path) -> list[dict]:
    with open(path) as records:
        return [json.loads(line) for line in records if line.endswith("\n")]


def first_ok_after(path: Path, moment: float, timeout: float, epoch_above: int = 0) -> dict | None:
    """The first probe send started at `moment` or later and acknowledged by a master of a later
    epoch than `epoch_above`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in probes(path):
            if record["t0"] >= moment and record["status"] == "SEND_OK" and record["epoch"] > epoch_above:
                return record
        time.sleep(0.02)
    return None


def longest_gap(path: Path, start: float, end: float) -> float:
    """The longest time between two acknowledged probe sends ending within [start, end]."""
    ends = [record["t1"] for record in probes(path) if record["status"] == "SEND_OK" and start <= record["t1"] <= end]
    return max((b - a for a, b in zip(ends, ends[1:])), default=float("nan"))


def failover_run(cluster: Cluster, number: int, fault: signal.Signals) -> dict:
    before = cluster.settled()
    master = cluster.master()
    killed_at = time.monotonic()
    os.kill(master["pid"], fault)
    record = first_ok_after(cluster.probe_path, killed_at, SETTLE_S, epoch_above=before["master_epoch"])
    result = {"run": number, "epoch_before": before["master_epoch"], "killed": label(master)}
    if record is None:
        result["error"] = "no acknowledged send after the kill"
        return result
    result["failover_s"] = round(record["t1"] - killed_at, 3)
    statuses: dict[str, int] = {}
    for probe in probes(cluster.probe_path):
        if killed_at <= probe["t1"] <= record["t1"]:
            statuses[probe["status"]] = statuses.get(probe["status"], 0) + 1
    result["probe_statuses_meanwhile"] = statuses
    if fault == signal.SIGSTOP:
        os.kill(master["pid"], signal.SIGCONT)  # it comes back deposed and rejoins as a slave
    else:
        cluster.restart(master)
    after = cluster.settled(new_masters=1)
    result["epoch_after"] = after["master_epoch"]
    result["extra_elections"] = after["master_epoch"] - before["master_epoch"] - 1
    return result


def handback_run(cluster: Cluster, number: int) -> dict:
    before = cluster.settled()
    master = cluster.master()
    preferred = next(b for b in cluster.brokers if b is not master)
    cluster.admin("updateBrokerConfig", "-n", cluster.info["access_point"], "-b", preferred["address"],
                  "-k", "brokerElectionPriority", "-v", "0")
    asked_at = time.monotonic()
    cluster.admin("updateControllerConfig", "-a", cluster.controllers, "-k", "enablePreferredMaster", "-v", "true")
    result = {"run": number, "preferred": label(preferred)}
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        status = cluster.status(preferred)
        if status and status["brokerRole"] != "SLAVE":
            break
        time.sleep(0.02)
    else:
        result["error"] = "the preferred broker never became master"
    became_at = time.monotonic()
    record = first_ok_after(cluster.probe_path, became_at, SETTLE_S, epoch_above=before["master_epoch"])
    if record is not None and "error" not in result:
        result["handback_s"] = round(record["t1"] - asked_at, 3)
        result["write_gap_s"] = round(longest_gap(cluster.probe_path, asked_at - 1, record["t1"]), 3)
    cluster.admin("updateControllerConfig", "-a", cluster.controllers, "-k", "enablePreferredMaster", "-v", "false")
    cluster.admin("updateBrokerConfig", "-n", cluster.info["access_point"], "-b", preferred["address"],
                  "-k", "brokerElectionPriority", "-v", str(PRIORITY_DEFAULT))
    cluster.settled(new_masters=1)
    return result


# kind of run -> (the table's measurement, the figure, its target)
KINDS = {
    "failovers": ("failover: master SIGKILL -> first SEND_OK on the new master", "failover_s",
                  f"worst <= {TARGET_WORST_S:g} s"),
    "stops": ("failover: master SIGSTOP -> first SEND_OK on the new master", "failover_s",
              f"worst <= {TARGET_WORST_S:g} s"),
    "handbacks": ("hand-back: enablePreferredMaster -> first SEND_OK on the preferred", "handback_s", ""),
}


def run_one(cluster: Cluster, kind: str, number: int) -> None:
    counted = cluster.false_failovers
    if kind == "handbacks":
        result = handback_run(cluster, number)
    else:
        result = failover_run(cluster, number, signal.SIGKILL if kind == "failovers" else signal.SIGSTOP)
    result["false_failovers"] = cluster.false_failovers - counted
    if cluster.code:
        result["code"] = cluster.code
    cluster.runs[kind].append(result)
    print(f"{cluster.code} {kind} {number}: {result}".strip(), flush=True)


def summary(values: list[float]) -> dict:
    return {"runs": len(values), "median_s": round(statistics.median(values), 3) if values else None,
            "worst_s": round(max(values), 3) if values else None}


def rows_of(cluster: Cluster) -> list[dict]:
    rows = []
    for kind, (what, figure, target) in KINDS.items():
        runs = cluster.runs[kind]
        notes = [f"failed runs: {sum('error' in r for r in runs)}"]
        if kind == "handbacks":
            gaps = [r["write_gap_s"] for r in runs if "write_gap_s" in r]
            notes.insert(0, f"longest gap between acknowledged sends: {max(gaps) if gaps else '-'} s")
        rows.append({**({"code": cluster.code} if cluster.code else {}), "what": what,
                     **summary([r[figure] for r in runs if figure in r]),
                     "false_failovers": sum(r["false_failovers"] for r in runs), "target": target,
                     "note": "; ".join(notes)})
    return rows


def tree_commit(src: Path) -> str | None:
    done = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_load":
        asyncio.run(load(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]), int(sys.argv[6]),
                         int(sys.argv[7]), float(sys.argv[8])))
        return
    parser = argparse.ArgumentParser(description="controller-mode failover benchmark (see the module docstring)")
    parser.add_argument("--runs", type=int, default=10, help="master SIGKILLs (default 10)")
    parser.add_argument("--stops", type=int, default=3, help="master SIGSTOPs (default 3)")
    parser.add_argument("--handbacks", type=int, default=3, help="preferred-master hand-backs (default 3)")
    parser.add_argument("--batch", type=int, default=64, help="messages per load request (default 64)")
    parser.add_argument("--inflight", type=int, default=4, help="load requests in flight (default 4)")
    parser.add_argument("--rate", type=float, default=0,
                        help="the load's messages a second at most (default 0: as fast as it goes); with --code, "
                             "every tree then carries the same load")
    parser.add_argument("--base-port", type=int, default=27000,
                        help="the k-th --code's cluster uses P+200*k..P+200*k+199 (default 27000)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra --set for up")
    parser.add_argument("--code", type=common.labelled_source, action="append", metavar="LABEL=SRC_DIR",
                        help="measure quorumq from this source tree (repeatable, e.g. before=bench/work/before/src "
                             "after=src); the trees take turns at every fault (default: this checkout's src)")
    opts = parser.parse_args()
    opts.code = opts.code or [("", common.ROOT / "src")]
    common.install_signal_handlers()
    workdir = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    sets = ["--set", "allAckInSyncStateSet=true", "--set", f"mappedFileSizeCommitLog={64 * 1024 * 1024}"]
    for assignment in opts.set:
        sets += ["--set", assignment]
    started = time.time()
    clusters: list[Cluster] = []
    schedule = ([("failovers", n) for n in range(opts.runs)] + [("stops", n) for n in range(opts.stops)]
                + [("handbacks", n) for n in range(opts.handbacks)])
    with contextlib.ExitStack() as stops:  # each stop runs, even after one that raised
        stops.callback(common.stop_all_started)
        for index, (code, src) in enumerate(opts.code):
            clusters.append(Cluster(code, src, workdir / (code or "code"), opts.base_port + PORT_BLOCK * index,
                                    sets, opts))
            stops.callback(clusters[-1].stop)
        for kind, number in schedule:
            for cluster in clusters:
                cluster.resume_load()
                run_one(cluster, kind, number)
                if len(clusters) > 1:
                    cluster.pause_load()  # only the tree under a fault carries the load
    rows = [row for cluster in clusters for row in rows_of(cluster)]
    columns = ([("code", "code")] if clusters[0].code else []) + [
        ("what", "measurement"), ("runs", "runs"), ("median_s", "median s"), ("worst_s", "worst s"),
        ("false_failovers", "false failovers"), ("target", "target"), ("note", "note")]
    settings = f"RocketMQ's defaults but {', '.join(opts.set)}" if opts.set else "RocketMQ's default timeouts"
    loads = ", ".join(f"{cluster.code} {common.fmt_rate(cluster.load_rate())}".strip() for cluster in clusters)
    title = (f"3 replicas, allAckInSyncStateSet=true, {settings}; background load {loads} msg/s acknowledged "
             f"({opts.batch} x {BODY_SIZE} B per request, {opts.inflight} in flight"
             f"{f', at most {opts.rate:,.0f} msg/s' if opts.rate else ''}); {os.cpu_count()} cpus shared")
    common.print_table(rows, columns, title)
    codes = {cluster.code or "this checkout": {
        "src": str(cluster.src), "commit": tree_commit(cluster.src), "up_options": cluster.up_options,
        "false_failovers": cluster.false_failovers, "load_msg_per_s": cluster.load_rate()} for cluster in clusters}
    path = common.write_results(NAME, {
        "title": title, "rows": rows,
        **{kind: [run for cluster in clusters for run in cluster.runs[kind]] for kind in KINDS},
        "load_msg_per_s": clusters[-1].load_rate(), "codes": codes, "seconds": round(time.time() - started, 1)})
    print(f"\nwrote {path}")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
