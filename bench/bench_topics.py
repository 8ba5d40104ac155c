"""Topic and consumer-group creation benchmark (issue 19): an operator's script creates many topics
and groups on one broker while a producer keeps sending to an existing topic.

For each code measured (this checkout's src; with `--before SRC_DIR` an older tree too, in the same
run, each on a fresh `quorumq up` of one broker under a soft RLIMIT_NOFILE of `--open-files`):
  - a sender worker (its own process) sends one 1 KiB message every `--send-interval-ms` to
    BenchTopicsExisting, recording each send's start and end on CLOCK_MONOTONIC (shared by every
    process of the machine) and its status; the first `--idle-seconds` are the idle baseline;
  - a creator worker (another process) then creates the topics (`--queues` read and write queues
    each, the admin UpdateTopic RPC, `--concurrency` calls in flight), then the consumer groups (the
    admin AddConsumerGroups RPC, one group a call, as `updateSubGroup` would, the same concurrency);
    then sends one message to each of `--sample` of the new topics, so that their consume-queue
    files exist; then reads the broker's open files (/proc/PID/fd) and its RSS (/proc/PID/status).
Reported: creation rates (target >= 200 topics/s), the sender's p50/p99 while idle and during the
creation (target: p99 at most 2x idle), open files at the end (target: at most the open consume-queue
file bound, limits.queue_files_open_max of the soft limit, + 64), the consume-queue files among them,
RSS at the end and its peak. The bench never asserts: it prints one table and writes
bench/results/bench_topics.json.

    .venv/bin/python bench/bench_topics.py --topics 300 --groups 300            # a quick check
    make bench-topics                    # dee820f at 2,000 topics beside this checkout at 10,000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_foundation as bf  # noqa: E402
import common  # noqa: E402
from common import ROOT  # noqa: E402

NAME = "bench_topics"
EXISTING_TOPIC = "BenchTopicsExisting"
TARGET_TOPICS_PER_S = 200.0
TARGET_P99_FACTOR = 2.0
OPEN_FILES_MARGIN = 64  # descriptors beyond the consume-queue files: sockets, commit log, stores
WORKER_TIMEOUT_S = 3600.0


# ==================================================================================================
# Workers (each in a fresh process, with the measured tree's quorumq on its path)


async def w_sender(args):
    """Sequential single sends to the existing topic, one every `interval_ms`, until `stop_file`
    exists; the start of the measured loop (after a warm-up) goes to `ready_file`."""
    from quorumq.client import Message, Producer
    payload, interval = bf.body(), args["interval_ms"] / 1000
    records = []
    async with Producer(args["access_point"], window=1) as producer:
        for _ in range(50):  # warm-up: the topic is auto-created, the route and channel are made
            await producer.send_batch(EXISTING_TOPIC, [Message(payload)])
        Path(args["ready_file"]).write_text(repr(time.monotonic()))
        stop = Path(args["stop_file"])
        next_send = time.monotonic()
        while not stop.exists():
            t0 = time.monotonic()
            try:
                status = (await producer.send_batch(EXISTING_TOPIC, [Message(payload)]))[0].status
            except Exception as e:  # noqa: BLE001 - counted as a status
                status = bf.failure_name(e)
            records.append((round(t0, 6), round(time.monotonic(), 6), str(status)))
            next_send = max(next_send + interval, time.monotonic())
            await asyncio.sleep(next_send - time.monotonic())
    return {"records": records}


def broker_files(pid: int) -> dict:
    """The broker's open descriptors, the consume-queue files among them (named by their 20-digit
    start offset), and its RSS now and at its peak (kB)."""
    fds = queue_files = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed while listed
            continue
        name = path.rpartition("/")[2]
        fds += 1
        queue_files += "/consumequeue/" in path and len(name) == 20 and name.isdigit()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"open_files": fds, "queue_files_open": queue_files, "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024),
            "rss_peak_mb": round(int(status["VmHWM"].split()[0]) / 1024)}


async def w_creator(args):
    """Create the topics, then the groups, `concurrency` calls in flight; then one send to each of
    `sample` new topics; then the broker's files and memory."""
    from quorumq.client import AdminClient, Message, Producer
    broker, concurrency = args["broker"], args["concurrency"]
    failures: Counter = Counter()

    async def run_all(names, call):
        todo = iter(names)

        async def one_worker():
            for name in todo:
                try:
                    await call(name)
                except Exception as e:  # noqa: BLE001 - counted
                    failures[f"{call.__name__}: {bf.failure_name(e)}"] += 1
        start = time.monotonic()
        await asyncio.gather(*(one_worker() for _ in range(concurrency)))
        return start, time.monotonic()

    topics = [f"BenchTopic{number:05d}" for number in range(args["topics"])]
    groups = [f"BenchGroup{number:05d}" for number in range(args["groups"])]
    async with AdminClient(args["access_point"]) as admin:
        async def create_topic(topic):
            await admin.update_topic(broker, topic, args["queues"], args["queues"])

        async def create_group(group):
            await admin.add_consumer_groups(broker, {group: int(time.time() * 1000)})
        topics_span = await run_all(topics, create_topic)
        groups_span = await run_all(groups, create_group) if groups else (topics_span[1], topics_span[1])
    sample = topics[::max(1, len(topics) // args["sample"])][:args["sample"]] if args["sample"] else []
    sent = Counter()
    async with Producer(args["access_point"], window=8) as producer:
        async def send_one(topic):
            sent[str((await producer.send_batch(topic, [Message(b"sample")]))[0].status)] += 1
        await run_all(sample, send_one)
    files = broker_files(args["broker_pid"])
    topic_s = topics_span[1] - topics_span[0]
    group_s = groups_span[1] - groups_span[0]
    return {"topics_span": topics_span, "groups_span": groups_span, "topics_created": len(topics),
            "groups_created": len(groups), "rate": round(len(topics) / topic_s, 1) if topic_s else None,
            "groups_per_s": round(len(groups) / group_s, 1) if groups and group_s else None,
            "topics_seconds": round(topic_s, 2), "groups_seconds": round(group_s, 2),
            "failures": dict(failures), "sample_sends": dict(sent), **files}


WORKERS = {"sender": w_sender, "creator": w_creator}


# ==================================================================================================
# Orchestration


def latencies(records, start: float, end: float) -> dict:
    """p50/p99 of the sends that started in [start, end), and their statuses."""
    chosen = [r for r in records if start <= r[0] < end]
    return {**common.latency_summary(r[1] - r[0] for r in chosen), "statuses": dict(Counter(r[2] for r in chosen))}


class Bench(bf.Bench):
    worker_script = Path(__file__).resolve()

    def __init__(self, opts):
        opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="bench-topics-")
        super().__init__(opts)
        sys.path.insert(0, str(ROOT / "src"))
        from quorumq import limits  # this checkout's, for the bound the target names
        self.queue_files_bound = limits.queue_files_open_max(opts.open_files)

    def measure(self, label: str, src: Path, topics: int, groups: int, port: int) -> None:
        self.src = src
        name = f"topics-{label}"
        print(f"{label} ({src}): {topics} topics, {groups} groups", flush=True)
        up, cluster, data = self.start_quorumq(name, port, ["--no-dashboard", "--set", "metricsExporterType=DISABLE",
                                                            *self.opts.quorumq_set])
        try:
            if cluster is None:
                self.record(label, topics, groups, {"error": f"quorumq up did not come up (see {self.workdir})"})
                return
            broker = next(p for p in cluster["processes"] if p["kind"] == "broker")
            ready, stop = self.workdir / f"{name}.ready", self.workdir / f"{name}.stop"
            ready.unlink(missing_ok=True)
            stop.unlink(missing_ok=True)
            box: dict = {}
            sender_args = {"access_point": cluster["access_point"], "interval_ms": self.opts.send_interval_ms,
                           "ready_file": str(ready), "stop_file": str(stop), "server_pids": [broker["pid"]]}
            thread = threading.Thread(target=lambda: box.update(r=self.worker(
                f"{name}-sender", "sender", sender_args, timeout=WORKER_TIMEOUT_S)), daemon=True)
            thread.start()
            deadline = time.monotonic() + 60
            while not ready.exists() and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not ready.exists():
                stop.touch()
                thread.join()
                self.record(label, topics, groups, {"error": f"the sender did not start: {box.get('r')}"})
                return
            idle_start = float(ready.read_text())
            time.sleep(max(0.0, idle_start + self.opts.idle_seconds - time.monotonic()))
            created = self.worker(f"{name}-creator", "creator", {
                "access_point": cluster["access_point"], "broker": broker["address"], "broker_pid": broker["pid"],
                "topics": topics, "groups": groups, "queues": self.opts.queues, "concurrency": self.opts.concurrency,
                "sample": min(self.opts.sample, topics), "server_pids": [broker["pid"]]}, timeout=WORKER_TIMEOUT_S)
            stop.touch()
            thread.join()
            records = (box.get("r") or {}).get("records", [])
            if "error" not in created:
                created["idle"] = latencies(records, idle_start, created["topics_span"][0])
                created["creating"] = latencies(records, created["topics_span"][0], created["groups_span"][1])
            self.record(label, topics, groups, created)
        finally:
            self.stop_quorumq(up, cluster, data)

    def record(self, label: str, topics: int, groups: int, res: dict) -> None:
        self.results[label] = [res]
        if "error" in res:
            self.rows.append({"code": label, "created": f"{topics} topics, {groups} groups", "note": res["error"]})
            return
        idle, creating = res["idle"], res["creating"]
        factor = creating["p99_ms"] / idle["p99_ms"] if idle["p99_ms"] else float("nan")
        bound = self.queue_files_bound + OPEN_FILES_MARGIN
        failed = {**res["failures"], **{f"sample {k}": v for k, v in res["sample_sends"].items() if k != "SEND_OK"},
                  **{f"send {k}": v for k, v in (Counter(idle["statuses"]) + Counter(creating["statuses"])).items()
                     if k != "SEND_OK"}}
        self.rows.append({
            "code": label, "created": f"{topics} topics, {groups} groups",
            "topics/s": f"{res['rate']:.0f}" + (" met" if res["rate"] >= TARGET_TOPICS_PER_S else " MISSED"),
            "groups/s": "-" if res["groups_per_s"] is None else f"{res['groups_per_s']:.0f}",
            "idle p50/p99": f"{idle['p50_ms']:.1f}/{idle['p99_ms']:.1f}",
            "creating p50/p99": f"{creating['p50_ms']:.1f}/{creating['p99_ms']:.1f}",
            "p99 x idle": f"{factor:.1f}" + (" met" if factor <= TARGET_P99_FACTOR else " MISSED"),
            "open files": f"{res['open_files']}" + (" met" if res["open_files"] <= bound else " MISSED"),
            "cq files": res["queue_files_open"], "RSS MB (peak)": f"{res['rss_mb']} ({res['rss_peak_mb']})",
            "note": "; ".join(f"{k}: {v}" for k, v in failed.items()) or "every call and send succeeded",
        })

    def run(self):
        opts, started = self.opts, time.monotonic()
        self.notes += common.settle(opts.wait_quiet)
        try:
            if opts.before:
                self.measure("before", opts.before, opts.before_topics, opts.before_groups, opts.base_port)
            self.measure("after", ROOT / "src", opts.topics, opts.groups, opts.base_port + 200)
        finally:
            common.stop_all_started()
        columns = [(key, key) for key in ("code", "created", "topics/s", "groups/s", "idle p50/p99",
                                          "creating p50/p99", "p99 x idle", "open files", "cq files",
                                          "RSS MB (peak)", "note")]
        title = (f"one broker, soft RLIMIT_NOFILE {opts.open_files} (open consume-queue files at most "
                 f"{self.queue_files_bound}), {opts.queues} queues a topic, {opts.concurrency} admin calls in "
                 f"flight, a 1 KiB send every {opts.send_interval_ms:g} ms (latencies in ms), "
                 f"{os.cpu_count()} cpus shared by clients and servers")
        print()
        table = common.print_table(self.rows, columns, title=title)
        for note in self.notes:
            print("note:", note)
        targets = {"topics/s": f">= {TARGET_TOPICS_PER_S:g}", "p99 x idle": f"<= {TARGET_P99_FACTOR:g}",
                   "open files": f"<= {self.queue_files_bound} + {OPEN_FILES_MARGIN}"}
        path = common.write_results(NAME, {
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(opts).items()},
            "targets": targets, "title": title, "table": table, "rows": self.rows, "results": self.results,
            "server_commands": self.commands, "notes": self.notes, "workdir": str(self.workdir),
            "wall_seconds": round(time.monotonic() - started, 1)}, machine=common.machine_info())
        print(f"\nwrote {path} (worker logs in {self.workdir}; {time.monotonic() - started:.0f} s)")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        bf.worker_main(sys.argv[2], sys.argv[3], WORKERS)
        return
    p = argparse.ArgumentParser(description="quorumq topic and group creation benchmark (see the module docstring)")
    p.add_argument("--topics", type=int, default=10_000, help="topics this checkout creates (default 10000)")
    p.add_argument("--groups", type=int, default=10_000, help="groups this checkout creates (default 10000)")
    p.add_argument("--before", type=common.source_dir, metavar="SRC_DIR",
                   help="also measure this older tree first (make bench-topics: dee820f's, from a git worktree)")
    p.add_argument("--before-topics", type=int, default=2_000, help="topics the older tree creates (default 2000)")
    p.add_argument("--before-groups", type=int, default=2_000, help="groups the older tree creates (default 2000)")
    p.add_argument("--queues", type=int, default=8, help="read and write queues of each topic (default 8)")
    p.add_argument("--concurrency", type=int, default=16, help="admin calls in flight (default 16)")
    p.add_argument("--sample", type=int, default=2_000,
                   help="new topics that each get one message at the end (default 2000, at most all)")
    p.add_argument("--open-files", type=int, default=4096,
                   help="the broker's soft RLIMIT_NOFILE (default 4096: the bound on open consume-queue files is "
                        "then 1024, below the sample)")
    p.add_argument("--idle-seconds", type=float, default=5.0, help="the sender's idle baseline (default 5)")
    p.add_argument("--send-interval-ms", type=float, default=10.0, help="one send every this often (default 10)")
    common.add_up_options(p, 27000, "quorumq up uses P..P+399")
    opts = p.parse_args()
    opts.seconds, opts.py_spy = 0.0, None  # what bench_foundation's worker() reads
    # The broker and everything else started from here inherit the soft limit (`quorumq up` passes it on).
    resource.setrlimit(resource.RLIMIT_NOFILE, (opts.open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
