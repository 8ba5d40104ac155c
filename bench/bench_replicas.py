"""Replica-group benchmark: quorum writes against NATS JetStream with 3 replicas, 1 KiB bodies, one run.

  (a) NATS JetStream R3: three nats-server processes with JetStream (file store) routed into one
      cluster on 127.0.0.1 and a stream with num_replicas=3: the lean pipeline publish rate and the
      single sequential publish latency (js.publish, one at a time), as bench_foundation.py measures R1.
  (b) the empty round trip: bench/fake_v5_server.py's empty MessagingService plus an empty
      MessageWriter.SendBatch in one process; the official client's Producer.send (the v5
      SendMessage floor bench_foundation.py reports) and quorumq's single send (one-message SendBatch).
  (c) quorumq with 3 replicas (`quorumq up --replicas 3`, brokerRole SYNC_MASTER: a master and two
      slaves), inSyncReplicas 1, 2 and 3, each with ASYNC_FLUSH and SYNC_FLUSH: Producer.send_batch
      throughput and single-send latency, with the count of every send status.
  (d) a slave's SIGKILL under a sequential single-send loop, 2 replicas, SYNC_MASTER, inSyncReplicas 2,
      enableSlaveActingMaster: with enableAutoInSyncReplicas (minInSyncReplicas 1) the time from the
      kill to the first SEND_OK; without it the time to the first IN_SYNC_REPLICAS_NOT_ENOUGH.

Every client measurement runs in a fresh Python process (bench_foundation.py's workers, and the stall
worker here); servers are started on 127.0.0.1 and stopped by pid at the end of each configuration,
also on failure or SIGINT, and each configuration's data dir is deleted once measured. The bench never
asserts: it prints one table and writes bench/results/bench_replicas.json.

    .venv/bin/python bench/bench_replicas.py                      # everything, about 2.5 minutes
    .venv/bin/python bench/bench_replicas.py --parts nats,empty --seconds 2
    .venv/bin/python bench/bench_replicas.py --parts quorumq --isr 2 --flush SYNC_FLUSH
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_foundation as bf  # noqa: E402
import common  # noqa: E402
from common import HOST, PYTHON, ROOT  # noqa: E402

NAME = "bench_replicas"
BODY_SIZE = bf.BODY_SIZE
SEND_OK = "SEND_OK"
REFUSED = "IN_SYNC_REPLICAS_NOT_ENOUGH"
NATS_REPLICAS = 3
QQ_REPLICAS = 3
STALL_REPLICAS = 2
TARGET_ISR = 2  # with inSyncReplicas 2 (issue 24) ...
TARGET_FACTOR = 3.0  # ... quorumq's batch send should reach 3x the NATS R3 lean pipeline rate
TARGET_SINGLE_OVER_EMPTY_MS = 0.3  # ... and a single send's p50 at most the empty SendBatch's + 0.3 ms
SEGMENT_BYTES = 64 * 1024 * 1024  # mappedFileSizeCommitLog: small preallocated segments, the disk is shared


def add_segment_option(parser) -> None:
    parser.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES,
                        help="mappedFileSizeCommitLog for quorumq (default 64 MiB: small preallocated files)")
PORT_BLOCK = 200  # one `quorumq up` uses P..P+199
# Where a block is looked for when the preferred one is taken (the tests pick theirs in the same range,
# below Linux's ephemeral ports).
PORT_RANGE = (21000, 32000)
NATS_SYSTEM = f"NATS JetStream R{NATS_REPLICAS} file"
EMPTY_SYSTEM = "empty gRPC server"


# ==================================================================================================
# Workers (run in a fresh process each; the others come from bench_foundation.py)


async def w_qq_stall(args):
    """Sequential single sends (one message per send_batch, one in flight) for `seconds` after the
    warm-up; each send's start and end on CLOCK_MONOTONIC (time.monotonic(), the same clock in every
    process of this machine) and its status. The start of the measured loop is written to
    `ready_file` so the bench can time the kill."""
    from quorumq.client import Message, Producer
    topic, payload = args["topic"], bf.body()
    warmup = Counter()
    records = []
    async with Producer(args["access_point"], window=1, timeout_s=args.get("timeout_s", 10.0)) as producer:
        for _ in range(bf.WARMUP):
            warmup[(await producer.send_batch(topic, [Message(payload)]))[0].status] += 1
        start = time.monotonic()
        Path(args["ready_file"]).write_text(repr(start))
        end = start + args["seconds"]
        while True:
            t0 = time.monotonic()
            if t0 >= end:
                break
            try:
                status = (await producer.send_batch(topic, [Message(payload)]))[0].status
            except Exception as e:  # noqa: BLE001 - counted as a status
                status = bf.failure_name(e)
            records.append((round(t0, 6), round(time.monotonic(), 6), status))
    return {"warmup_statuses": dict(warmup), "records": records, "seconds": args["seconds"]}


WORKERS = {**bf.WORKERS, "qq-stall": w_qq_stall}


# ==================================================================================================
# Helpers for the orchestrator


def nats_config(name: str, port: int, cluster_port: int, peer_ports, store: Path) -> str:
    routes = ", ".join(f'"nats-route://{HOST}:{p}"' for p in peer_ports)
    return (f'server_name: "{name}"\n'
            f'listen: "{HOST}:{port}"\n'
            f'jetstream {{\n  store_dir: "{store}"\n  max_memory_store: 256MB\n  max_file_store: 8GB\n}}\n'
            f'cluster {{\n  name: "bench-r{NATS_REPLICAS}"\n  listen: "{HOST}:{cluster_port}"\n'
            f'  routes: [{routes}]\n}}\n')


async def nats_create_stream(urls, replicas: int, timeout: float) -> dict:
    """Create the bench stream with `replicas` copies once the cluster has a JetStream meta leader, and
    wait until every replica is current; returns {"leader": name, "replicas": [...]} or {"error": ...}."""
    import nats
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            nc = await nats.connect(urls, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
        except Exception as e:  # noqa: BLE001 - the servers are still starting
            last = repr(e)
            await asyncio.sleep(0.2)
            continue
        try:
            js = nc.jetstream(timeout=5)
            try:
                info = await js.stream_info(bf.STREAM)
            except Exception:  # noqa: BLE001 - not there yet
                info = await js.add_stream(name=bf.STREAM, subjects=["bench.>"], storage="file",
                                           num_replicas=replicas)
            cluster = info.cluster
            if cluster and cluster.leader and len(cluster.replicas or []) == replicas - 1 \
                    and all(p.current for p in cluster.replicas):
                return {"leader": cluster.leader, "replicas": [p.name for p in cluster.replicas]}
            last = f"stream not ready: {cluster}"
        except Exception as e:  # noqa: BLE001 - no meta leader yet, or not enough servers yet
            last = repr(e)
        finally:
            await nc.close()
        await asyncio.sleep(0.3)
    return {"error": f"the R{replicas} stream was not ready within {timeout:.0f} s: {last}"}


async def qq_wait_in_sync(namesrv: str, master: str, want: int, timeout: float) -> dict:
    """Poll the master's status until `want` copies are in sync (its slaves connected and acked)."""
    from quorumq.client import AdminClient, ClientError
    deadline = time.monotonic() + timeout
    status: dict = {}
    async with AdminClient(namesrv, timeout_s=2.0) as admin:
        while time.monotonic() < deadline:
            try:
                status = await admin.broker_status(master)
            except ClientError as e:
                status = {"error": str(e)}
            if int(status.get("inSyncReplicas", "0") or 0) >= want:
                break
            await asyncio.sleep(0.1)
    return status


def status_text(statuses: dict | None) -> str:
    if not statuses:
        return "-"
    if set(statuses) == {SEND_OK}:
        return f"all SEND_OK ({statuses[SEND_OK]:,})"
    return ", ".join(f"{k} {v:,}" for k, v in sorted(statuses.items(), key=lambda kv: (kv[0] != SEND_OK, kv[0])))


def all_ok(res: dict) -> bool:
    statuses = res.get("statuses") or {}
    return "error" not in res and bool(statuses) and set(statuses) == {SEND_OK}


def analyze_stall(records, t_kill: float) -> dict:
    """Split the sends at the kill: done before it, in flight at it, started after it."""
    before = [r for r in records if r[1] <= t_kill]
    inflight = [r for r in records if r[0] < t_kill < r[1]]
    after = [r for r in records if r[0] >= t_kill]
    ms = lambda seconds: round(seconds * 1000, 3)  # noqa: E731
    out = {
        "sends": len(records),
        "before_kill": {**common.latency_summary(b - a for a, b, _ in before),
                        "statuses": dict(Counter(s for _, _, s in before))},
        "after_kill": {**common.latency_summary(b - a for a, b, _ in after),
                       "statuses": dict(Counter(s for _, _, s in after))},
        "in_flight_at_kill": [{"status": s, "ms": ms(b - a), "started_ms_before_kill": ms(t_kill - a),
                               "ended_ms_after_kill": ms(b - t_kill)} for a, b, s in inflight],
    }
    first_ok = next((r for r in after if r[2] == SEND_OK), None)
    out["kill_to_first_send_ok_ms"] = ms(first_ok[1] - t_kill) if first_ok else None
    out["first_send_ok_ms"] = ms(first_ok[1] - first_ok[0]) if first_ok else None
    first_refusal = next((r for r in inflight + after if r[2] == REFUSED), None)
    out["kill_to_first_refusal_ms"] = ms(first_refusal[1] - t_kill) if first_refusal else None
    out["first_refusal_ms"] = ms(first_refusal[1] - first_refusal[0]) if first_refusal else None
    out["kill_to_first_send_started_ms"] = ms(after[0][0] - t_kill) if after else None
    if after:
        out["first_send_after_kill"] = {"status": after[0][2], "ms": ms(after[0][1] - after[0][0])}
    late = inflight + after
    if late:
        a, b, s = max(late, key=lambda r: r[1] - r[0])
        out["longest_send_after_kill"] = {"ms": ms(b - a), "status": s, "started_ms_after_kill": ms(a - t_kill)}
    if before:
        out["longest_send_before_kill_ms"] = ms(max(b - a for a, b, _ in before))
    # The 300 sends that ended nearest the kill, for the record: (start, end) in ms from the kill, status.
    near = sorted(sorted(records, key=lambda r: abs(r[1] - t_kill))[:300])
    out["around_kill"] = [(ms(a - t_kill), ms(b - t_kill), s) for a, b, s in near]
    return out


def master_log_events(log: Path, wall_kill: float) -> dict:
    """When the master's log (its timestamps have millisecond resolution) says it lost the slave, and
    when its alive-replica count (the name server's member group) changed, in ms after the kill."""
    import datetime
    events = {"slave_disconnected_ms": None, "alive_replicas_changed_ms": None}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as e:
        return {"error": repr(e)}
    for line in lines:
        try:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if stamp < wall_kill - 0.002:
            continue
        after_ms = round((stamp - wall_kill) * 1000, 1)
        if events["slave_disconnected_ms"] is None and ("disconnected" in line or "connection from" in line):
            events["slave_disconnected_ms"] = after_ms
            events["slave_disconnected_line"] = line[:300]
        if events["alive_replicas_changed_ms"] is None and "alive replicas" in line:
            events["alive_replicas_changed_ms"] = after_ms
            events["alive_replicas_line"] = line[:300]
    return events


def _own_and_reaped_cpu() -> float:
    """CPU seconds of this process and of its children that have been waited for (the workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ==================================================================================================
# Orchestration


class Bench(bf.Bench):
    worker_script = Path(__file__).resolve()

    def __init__(self, opts):
        opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="bench-replicas-")
        super().__init__(opts)

    def worker(self, key: str, kind: str, args: dict, **kw) -> dict:
        """bench_foundation's worker, plus the share of the cpus that processes other than the worker,
        the servers in args["server_pids"] and this bench used meanwhile ("others_cpu_share": 0..1,
        from /proc/stat; on a shared machine a figure measured next to other work is not comparable)."""
        pids = args.get("server_pids", [])
        total0, idle0 = common._cpu_times()
        ours0 = sum(common.cpu_seconds(p) for p in pids) + _own_and_reaped_cpu()
        res = super().worker(key, kind, args, **kw)
        total1, idle1 = common._cpu_times()
        ours1 = sum(common.cpu_seconds(p) for p in pids) + _own_and_reaped_cpu()
        ticks = os.sysconf("SC_CLK_TCK")
        busy = ((total1 - total0) - (idle1 - idle0)) / ticks
        capacity = (total1 - total0) / ticks
        if capacity > 0 and ours1 == ours1 and ours0 == ours0:  # nan when a server is gone
            share = round(max(0.0, busy - (ours1 - ours0)) / capacity, 2)
            res["others_cpu_share"] = share
            if share > 0.15:
                self.notes.append(f"{key} (round {self.round + 1}): other processes used {share:.0%} of the cpus "
                                  "during it")
        return res

    def add(self, system: str, measurement: str, res: dict, *, sort_key: str = "rate", kind: str = "", note: str = "",
            **extra):
        """Record one run of a table row (bench_foundation's `row`) with how the table reads it: `kind`
        says which columns apply, `sort_key` which figure picks the median run."""
        self.row(system, measurement, res, note=note)
        entry = self.measured[(system, measurement)]
        entry.update(kind=kind, sort_key=sort_key, **extra)

    @staticmethod
    def free_block(preferred: int, span: int = PORT_BLOCK) -> int:
        """`preferred`, or another base P in PORT_RANGE, with P..P+span-1 all free right now."""
        for base in [preferred] + [random.randrange(PORT_RANGE[0], PORT_RANGE[1] - span, 10) for _ in range(200)]:
            if all(common.port_free(base + i) for i in range(span)):
                return base
        return preferred

    def disk_note(self, where: Path) -> None:
        st = os.statvfs(where)
        ratio = 1.0 - st.f_bavail / st.f_blocks
        if ratio > 0.85:
            self.notes.append(f"disk usage {ratio:.0%} before a configuration (quorumq refuses writes from 90%)")

    # ---- NATS R3 -----------------------------------------------------------------------------------

    def run_nats(self):
        exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        base = self.free_block(self.opts.base_port + 9 * PORT_BLOCK, 20)
        ports = [base + i for i in range(NATS_REPLICAS)]
        cluster_ports = [base + 10 + i for i in range(NATS_REPLICAS)]
        names = [f"bench-r{NATS_REPLICAS}-{i}" for i in range(NATS_REPLICAS)]
        root = self.workdir / "nats-r3"
        shutil.rmtree(root, ignore_errors=True)
        print(f"NATS JetStream R{NATS_REPLICAS} (nats-server on {HOST}:{ports[0]}..{ports[-1]}, "
              f"routes {cluster_ports[0]}..{cluster_ports[-1]}, store {root})", flush=True)
        procs = []
        try:
            for i in range(NATS_REPLICAS):
                store = root / names[i]
                store.mkdir(parents=True)
                conf = root / f"{names[i]}.conf"
                conf.write_text(nats_config(names[i], ports[i], cluster_ports[i],
                                            [p for p in cluster_ports if p != cluster_ports[i]], store))
                argv = [exe, "-c", conf]
                self.commands[f"nats-server {i}"] = shlex.join(map(str, argv)) + f"  # {conf}: {conf.read_text()!r}"
                procs.append(common.start(argv, label=names[i], log=root / f"{names[i]}.log"))
            urls = [f"nats://{HOST}:{p}" for p in ports]
            ready = all(common.wait_port(p, proc=proc) for p, proc in zip(ports, procs))
            stream = asyncio.run(nats_create_stream(urls, NATS_REPLICAS, timeout=30)) if ready else \
                {"error": "nats-server did not start"}
            self.results.setdefault("nats_r3_stream", []).append(stream)
            w = self.opts.nats_window
            lean_m = f"lean pipeline publish (<= {w} in flight, 1 ack sub)"
            sync_m = "single publish (js.publish, 1 in flight)"
            if "error" in stream:
                self.notes.append(f"NATS R{NATS_REPLICAS}: {stream['error']} (logs in {root})")
                self.add(NATS_SYSTEM, lean_m, dict(stream), kind="nats_lean")
                self.add(NATS_SYSTEM, sync_m, dict(stream), kind="nats_sync")
                return
            # The client connects to the stream leader, as quorumq's producer sends to the master.
            leader_url = urls[names.index(stream["leader"])]
            base_args = {"servers": [leader_url], "replicas": NATS_REPLICAS, "server_pids": [p.pid for p in procs]}
            r = self.worker("nats_r3_lean", "nats-lean", {**base_args, "window": w})
            self.add(NATS_SYSTEM, lean_m, r, kind="nats_lean",
                     note=f"ack latency under load p50/p99 {r.get('pipelined_p50_ms', '-')}/"
                          f"{r.get('pipelined_p99_ms', '-')} ms" if "error" not in r else "")
            r = self.worker("nats_r3_sync", "nats-sync", base_args)
            self.add(NATS_SYSTEM, sync_m, r, kind="nats_sync", sort_key="p50_ms")
        finally:
            for proc in procs:
                common.stop_pid(proc.pid, term_timeout=10)
            if not self.opts.keep:
                shutil.rmtree(root, ignore_errors=True)

    # ---- the empty round trip ----------------------------------------------------------------------

    def run_empty(self):
        port = self.free_block(self.opts.base_port + 9 * PORT_BLOCK + 50, 1)
        print(f"empty gRPC server (bench/fake_v5_server.py on {HOST}:{port})", flush=True)
        argv = [PYTHON, common.BENCH_DIR / "fake_v5_server.py", "--port", port]
        self.commands["empty server"] = shlex.join(map(str, argv))
        proc = common.start(argv, label="empty-server", log=self.workdir / "empty-server.log",
                            env=common.code_env(ROOT / "src"))
        sm = "official Producer.send (v5 SendMessage, 1 in flight)"
        sb = "quorumq single send (SendBatch of 1, 1 in flight)"
        try:
            if not common.wait_port(port, proc=proc):
                self.notes.append("the empty server did not start")
                self.add(EMPTY_SYSTEM, sm, {"error": "empty server did not start"}, kind="empty_sm")
                self.add(EMPTY_SYSTEM, sb, {"error": "empty server did not start"}, kind="empty_sb")
                return
            base_args = {"access_point": f"{HOST}:{port}", "server_pids": [proc.pid]}
            r = self.worker("empty_official_sync", "official-sync", {**base_args, "topic": "BenchEmpty"})
            self.add(EMPTY_SYSTEM, sm, r, kind="empty_sm", sort_key="p50_ms",
                     note="the floor bench_foundation.py reports")
            r = self.worker("empty_qq_single", "qq-single", {**base_args, "topic": "BenchEmpty"})
            self.add(EMPTY_SYSTEM, sb, r, kind="empty_sb", sort_key="p50_ms",
                     note="the same client and RPC as quorumq's single sends below")
        finally:
            common.stop_pid(proc.pid, term_timeout=5)

    # ---- quorumq with replicas -----------------------------------------------------------------------

    def quorumq_sets(self, replicas: int, flush: str, **keys) -> list[str]:
        values = {"brokerRole": "SYNC_MASTER", "flushDiskType": flush, "metricsExporterType": "DISABLE",
                  "mappedFileSizeCommitLog": str(self.opts.segment_bytes), **keys}
        args = ["--replicas", str(replicas), "--no-dashboard"]
        for key, value in values.items():
            args += ["--set", f"{key}={value}"]
        return args + list(self.opts.quorumq_set)

    def start_group(self, name: str, port: int, up_args, replicas: int):
        """quorumq up, then wait until the master counts every replica in sync; (up, cluster, data,
        master, slaves) with cluster None when it failed (a note says why)."""
        self.disk_note(self.workdir)
        for attempt in range(2):  # a second try on other ports: a port may be taken after the check
            port = self.free_block(port)
            up, cluster, data = self.start_quorumq(name, port, up_args)
            if cluster is not None:
                break
            log = self.workdir / f"{name}-up.log"
            self.notes.append(f"{name}: quorumq up on base port {port} did not come up (see {log})"
                              + ("; tried again on other ports" if attempt == 0 else ""))
            self.stop_quorumq(up, cluster, data)
            if attempt == 0:
                log.rename(log.with_suffix(".first.log"))
        else:
            return up, None, data, None, []
        brokers = [p for p in cluster["processes"] if p["kind"] == "broker"]
        master = next(p for p in brokers if p.get("role") == "master")
        slaves = [p for p in brokers if p.get("role") == "slave"]
        status = asyncio.run(qq_wait_in_sync(cluster["access_point"], master["address"], replicas, timeout=30))
        if int(status.get("inSyncReplicas", "0") or 0) < replicas:
            self.notes.append(f"{name}: only {status.get('inSyncReplicas')} of {replicas} copies in sync after "
                              f"30 s ({status}); measured anyway")
        return up, cluster, data, master, slaves

    def run_quorumq(self, isr: int, flush: str, port: int, metrics: str = "off", code: str = ""):
        system = (f"quorumq R{QQ_REPLICAS} ISR{isr} {flush}" + (" metrics on" if metrics == "on" else "")
                  + (f" [{code}]" if code else ""))
        name = (f"qq-r{QQ_REPLICAS}-isr{isr}-{flush.lower()}" + ("-metrics" if metrics == "on" else "")
                + (f"-{code}" if code else ""))
        print(f"quorumq {QQ_REPLICAS} replicas, inSyncReplicas={isr}, {flush}", flush=True)
        b, n = self.opts.batch, self.opts.inflight
        batch_m = f"Producer.send_batch ({b}/request, {n} in flight)"
        single_m = "single send (1 message, 1 in flight)"
        up, cluster, data, master, slaves = self.start_group(
            name, port, self.quorumq_sets(QQ_REPLICAS, flush, inSyncReplicas=isr,
                                          metricsExporterType="PROM" if metrics == "on" else "DISABLE"), QQ_REPLICAS)
        try:
            if cluster is None:
                for m, kind in ((batch_m, "qq_batch"), (single_m, "qq_single")):
                    self.add(system, m, {"error": "quorumq up did not come up"}, kind=kind, isr=isr, flush=flush)
                return
            broker_pids = [master["pid"]] + [s["pid"] for s in slaves]
            base_args = {"access_point": cluster["access_point"], "server_pids": broker_pids}
            topic = f"BenchR{isr}{flush.split('_')[0].capitalize()}"
            r = self.worker(f"{name}_batch", "qq-batch", {**base_args, "topic": topic, "batch": b, "inflight": n},
                            profile=True)
            self.add(system, batch_m, r, kind="qq_batch", isr=isr, flush=flush,
                     note=f"request p50/p99 {r.get('request_p50_ms', '-')}/{r.get('request_p99_ms', '-')} ms"
                     if "error" not in r else "")
            r = self.worker(f"{name}_single", "qq-single", {**base_args, "topic": topic}, profile=True)
            self.add(system, single_m, r, kind="qq_single", isr=isr, flush=flush, sort_key="p50_ms")
        finally:
            self.stop_quorumq(up, cluster, data)

    # ---- a slave's SIGKILL ---------------------------------------------------------------------------

    def run_stall(self, auto: bool, port: int):
        flush = self.opts.stall_flush
        label = "auto ISR (min 1)" if auto else "no auto ISR"
        system = f"quorumq R{STALL_REPLICAS} ISR2 {flush}, {label}"
        name = f"qq-r{STALL_REPLICAS}-stall-{'auto' if auto else 'fixed'}"
        measurement = "SIGKILL the slave during sequential single sends"
        print(f"quorumq {STALL_REPLICAS} replicas, SIGKILL the slave, enableAutoInSyncReplicas={str(auto).lower()}",
              flush=True)
        up, cluster, data, master, slaves = self.start_group(
            name, port, self.quorumq_sets(STALL_REPLICAS, flush, inSyncReplicas=2, enableSlaveActingMaster="true",
                                          enableAutoInSyncReplicas=str(auto).lower(), minInSyncReplicas=1),
            STALL_REPLICAS)
        try:
            if cluster is None or not slaves:
                self.add(system, measurement, {"error": "quorumq up did not come up"}, kind="stall", auto=auto)
                return
            before, after = self.opts.stall_before, self.opts.stall_after
            ready = self.workdir / f"{name}.ready"
            ready.unlink(missing_ok=True)
            box: dict = {}
            args = {"access_point": cluster["access_point"], "topic": "BenchStall", "seconds": before + after,
                    "ready_file": str(ready), "server_pids": [master["pid"]] + [s["pid"] for s in slaves]}
            thread = threading.Thread(target=lambda: box.update(r=self.worker(
                f"{name}", "qq-stall", args, timeout=before + after + 60)), daemon=True)
            thread.start()
            deadline = time.monotonic() + 60
            while not ready.exists() and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            t_kill = None
            if ready.exists():
                time.sleep(max(0.0, float(ready.read_text()) + before - time.monotonic()))
                slave = slaves[0]
                wall_kill = time.time()
                t_kill = time.monotonic()
                os.kill(slave["pid"], signal.SIGKILL)
                t_sent = time.monotonic()
            thread.join()
            ready.unlink(missing_ok=True)
            r = box.get("r") or {"error": "the stall worker returned nothing"}
            if t_kill is None and "error" not in r:
                r["error"] = "the stall worker never started its loop"
            if "error" not in r:
                records = r.pop("records")
                r.update(analyze_stall(records, t_kill))
                r["kill_syscall_ms"] = round((t_sent - t_kill) * 1000, 3)
                r["killed_pid"] = slaves[0]["pid"]
                r["master_log"] = master_log_events(Path(master["log"]), wall_kill)
                r["statuses"] = dict(Counter(r["after_kill"]["statuses"])
                                     + Counter(s["status"] for s in r["in_flight_at_kill"]))
            else:
                r.pop("records", None)
            self.add(system, measurement, r, kind="stall", auto=auto,
                     sort_key="kill_to_first_send_ok_ms" if auto else "kill_to_first_refusal_ms")
        finally:
            self.stop_quorumq(up, cluster, data)

    # ---- the table -----------------------------------------------------------------------------------

    def pick(self, entry) -> dict:
        """The run with the median of the row's sort figure; of an even number of rounds the worse
        middle one (the lower rate, the higher latency or stall). A run with an error only when no
        run has none."""
        key = entry.get("sort_key", "rate")
        runs = [r for r, _ in entry["runs"]]
        good = sorted((r for r in runs if "error" not in r and r.get(key) is not None), key=lambda r: r[key])
        if not good:
            return runs[0]
        return good[(len(good) - 1) // 2] if key == "rate" else good[len(good) // 2]

    def figure(self, kind: str, key: str):
        for entry in self.measured.values():
            if entry.get("kind") == kind:
                res = self.pick(entry)
                return None if "error" in res else res.get(key)
        return None

    def build_rows(self) -> None:
        nats_lean = self.figure("nats_lean", "rate")
        nats_p50, nats_p99 = self.figure("nats_sync", "p50_ms"), self.figure("nats_sync", "p99_ms")
        empty_sb, empty_sm = self.figure("empty_sb", "p50_ms"), self.figure("empty_sm", "p50_ms")
        self.rows = []
        for (system, measurement), entry in self.measured.items():
            runs = [r for r, _ in entry["runs"]]
            res = self.pick(entry)
            note = next((n for r, n in entry["runs"] if r is res), "")
            kind = entry.get("kind", "")
            notes = [note] if note else []
            row = {"system": system, "measurement": measurement, "msg/s": "-", "p50 ms": "-", "p99 ms": "-",
                   "vs NATS R3": "", "over empty": "", "server us/msg": res.get("server_cpu_us_per_msg", "-"),
                   "statuses": "", "target": "", "rounds": len(runs)}
            if "error" in res:
                row.update({"msg/s": "ERROR", "note": res["error"]})
                self.rows.append(row)
                continue
            if kind != "stall":
                row["msg/s"] = common.fmt_rate(res.get("rate"))
            if kind in ("nats_sync", "empty_sm", "empty_sb", "qq_single"):
                row["p50 ms"], row["p99 ms"] = common.fmt_ms(res.get("p50_ms")), common.fmt_ms(res.get("p99_ms"))
            if kind in ("qq_batch", "qq_single", "empty_sb", "stall"):
                # every run's statuses: a figure counts only when every send of every round was SEND_OK
                total = Counter()
                for r in runs:
                    total.update(r.get("statuses") or {})
                row["statuses"] = status_text(dict(total))
            each = res.get("server_cpu_us_per_msg_each")
            if kind in ("qq_batch", "qq_single", "nats_lean", "nats_sync") and each:
                who = "master/slaves" if kind.startswith("qq") else "each server"
                notes.append(f"server CPU us/msg {who} " + "/".join(f"{x:g}" for x in each)
                             + f", client {res.get('client_cpu_us_per_msg', '-')}")
            if kind == "qq_batch":
                if nats_lean and res.get("rate") is not None:
                    row["vs NATS R3"] = f"{res['rate'] / nats_lean:.2f}x lean"
                if entry.get("isr") == TARGET_ISR:
                    want = TARGET_FACTOR * nats_lean if nats_lean else None
                    if not all(all_ok(r) for r in runs):
                        row["target"] = "not counted: not all SEND_OK"
                    elif want is None:
                        row["target"] = f">= {TARGET_FACTOR:g}x NATS R3 lean: no NATS figure"
                    else:
                        row["target"] = (f">= {common.fmt_rate(want)} ({TARGET_FACTOR:g}x NATS R3 lean) "
                                         + ("met" if res["rate"] >= want else "MISSED"))
            if kind == "qq_single":
                if nats_p50 and nats_p99:
                    row["vs NATS R3"] = f"p50 {res['p50_ms'] / nats_p50:.1f}x, p99 {res['p99_ms'] / nats_p99:.1f}x"
                parts = []
                for floor in (empty_sb, empty_sm):
                    parts.append(f"{res['p50_ms'] - floor:+.2f}" if floor is not None else "-")
                row["over empty"] = " / ".join(parts)
                if not all(all_ok(r) for r in runs):
                    row["target"] = "not counted: not all SEND_OK"
                elif entry.get("isr") == TARGET_ISR and empty_sb is not None:
                    over = res["p50_ms"] - empty_sb
                    row["target"] = (f"p50 <= empty SendBatch + {TARGET_SINGLE_OVER_EMPTY_MS:g} ms "
                                     + ("met" if over <= TARGET_SINGLE_OVER_EMPTY_MS else "MISSED"))
            if kind == "stall":
                notes = [self.stall_note(res, entry.get("auto"))] + notes
                row["p50 ms"] = common.fmt_ms(res["before_kill"].get("p50_ms"))
                row["p99 ms"] = common.fmt_ms(res["before_kill"].get("p99_ms"))
            others = res.get("others_cpu_share")
            if others is not None and others > 0.1:
                notes.append(f"other processes used {others:.0%} of the cpus meanwhile")
            if len(runs) > 1:
                key = entry.get("sort_key", "rate")
                notes.append(f"{key} per round " + "/".join(
                    "ERR" if "error" in r else (common.fmt_rate(r.get(key)) if key == "rate" else
                                                common.fmt_ms(r.get(key))) for r in runs))
            row["note"] = "; ".join(notes)
            self.rows.append(row)

    @staticmethod
    def stall_note(res: dict, auto: bool) -> str:
        def ms(value):
            return "never" if value is None else f"{value:,.0f} ms" if value >= 10 else f"{value:.2f} ms"

        parts = []
        if auto:
            first_ok = ms(res.get("kill_to_first_send_ok_ms"))
            parts.append(f"kill -> first SEND_OK (a send started after the kill): {first_ok}")
        else:
            parts.append(f"kill -> first {REFUSED}: {ms(res.get('kill_to_first_refusal_ms'))}")
            first = res.get("first_send_after_kill")
            if first:
                parts.append(f"first send started after the kill: {first['status']} in {ms(first['ms'])}")
        longest = res.get("longest_send_after_kill")
        if longest:
            parts.append(f"longest send: {ms(longest['ms'])} ({longest['status']})")
        for send in res.get("in_flight_at_kill", []):
            parts.append(f"in flight at the kill: {send['status']} after {ms(send['ms'])}")
        seen = (res.get("master_log") or {}).get("slave_disconnected_ms")
        if seen is not None:
            parts.append(f"the master logged the slave's loss {ms(max(seen, 0.0))} after the kill")
        after = res.get("after_kill", {})
        parts.append(f"after the kill p50/p99 {common.fmt_ms(after.get('p50_ms'))}/"
                     f"{common.fmt_ms(after.get('p99_ms'))} ms; p50/p99 columns: before the kill")
        return "; ".join(parts)

    # ---- all -----------------------------------------------------------------------------------------

    def run(self):
        parts, opts = self.opts.parts, self.opts
        started = time.monotonic()
        self.notes += common.settle(opts.wait_quiet)
        try:
            for self.round in range(opts.repeat):
                if opts.repeat > 1:
                    print(f"--- round {self.round + 1} of {opts.repeat}", flush=True)
                if "nats" in parts:
                    self.run_nats()
                if "empty" in parts:
                    self.run_empty()
                block = 0
                if "quorumq" in parts:
                    for flush in opts.flush:
                        for isr in opts.isr:
                            for code, self.src in opts.code:  # interleaved in each round
                                for metrics in opts.metrics:
                                    self.run_quorumq(isr, flush, opts.base_port + PORT_BLOCK * block, metrics, code)
                            block += 1
                    self.src = ROOT / "src"
                if "stall" in parts:
                    for auto in (True, False):
                        self.run_stall(auto, opts.base_port + PORT_BLOCK * (6 + int(not auto)))
        finally:
            common.stop_all_started()
        self.build_rows()
        columns = [("system", "system"), ("measurement", "measurement"), ("msg/s", "msg/s"), ("p50 ms", "p50 ms"),
                   ("p99 ms", "p99 ms"), ("vs NATS R3", "vs NATS R3"),
                   ("over empty", "p50 over empty SendBatch / SendMessage ms"),
                   ("server us/msg", "server CPU us/msg"), ("statuses", "send statuses"), ("target", "target"),
                   ("note", "note")]
        rounds = f", median of {opts.repeat} rounds" if opts.repeat > 1 else ""
        if opts.repeat > 1 and opts.repeat % 2 == 0:
            rounds += " (the worse middle round)"
        title = (f"{BODY_SIZE} B bodies, {opts.seconds:g} s per measurement{rounds}, {os.cpu_count()} cpus shared by "
                 f"clients and servers")
        self.report(NAME if len(opts.code) == 1 else f"{NAME}_before_after", columns, title,
                    {f"quorumq R{QQ_REPLICAS} inSyncReplicas {TARGET_ISR} batch send":
                     f">= {TARGET_FACTOR:g}x the NATS JetStream R{NATS_REPLICAS} lean pipeline rate of the same run",
                     f"quorumq R{QQ_REPLICAS} inSyncReplicas {TARGET_ISR} single send":
                     f"p50 at most the empty SendBatch round trip's + {TARGET_SINGLE_OVER_EMPTY_MS:g} ms, same run"},
                    started)


def csv_of(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        bf.worker_main(sys.argv[2], sys.argv[3], WORKERS)
        return
    p = argparse.ArgumentParser(description="quorumq replica-group benchmark (see the module docstring)")
    p.add_argument("--parts", default="nats,empty,quorumq,stall", type=lambda s: set(s.split(",")),
                   help="comma-separated subset of nats,empty,quorumq,stall (default: all)")
    common.add_up_options(p, 26000, "quorumq configurations use P+200*k..P+200*k+199 (k = 0..7), NATS P+1800.., "
                                    "the empty server P+1850")
    common.add_send_options(p, inflight=8)
    p.add_argument("--isr", type=csv_of(int), default=[1, 2, 3], help="inSyncReplicas values (default 1,2,3)")
    p.add_argument("--flush", type=csv_of(str), default=["ASYNC_FLUSH", "SYNC_FLUSH"],
                   help="flushDiskType values (default ASYNC_FLUSH,SYNC_FLUSH)")
    p.add_argument("--metrics", type=csv_of(str), default=["off"],
                   help="Prometheus metrics of the quorumq processes: off, on, or on,off to measure both in each "
                        "round (default off)")
    p.add_argument("--code", type=common.labelled_source, action="append", metavar="LABEL=SRC_DIR",
                   help="measure quorumq from this source tree too (repeatable, e.g. old=../old/src new=src); "
                        "each configuration runs every tree in turn, labelled (default: this checkout's src)")
    p.add_argument("--nats-window", type=int, default=1024, help="NATS lean publishes in flight")
    add_segment_option(p)
    p.add_argument("--stall-flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"],
                   help="flushDiskType of the SIGKILL measurements (default ASYNC_FLUSH)")
    p.add_argument("--stall-before", type=float, default=2.0, help="seconds of sends before the SIGKILL")
    p.add_argument("--stall-after", type=float, default=6.0,
                   help="seconds of sends after the SIGKILL (more than slaveTimeout, 3 s by default)")
    opts = p.parse_args()
    opts.code = opts.code or [("", ROOT / "src")]
    if len(opts.isr) * len(opts.flush) > 6:
        p.error("at most 6 quorumq configurations (--isr x --flush)")
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
