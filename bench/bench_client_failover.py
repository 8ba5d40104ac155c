"""Controller-mode failover through the official clients, unchanged: how long after a master's
SIGKILL each client's sends are acknowledged again, and whether every acknowledged message is there.

One `quorumq up --replicas 3 --controller` cluster (allAckInSyncStateSet=true, RocketMQ's default
timeouts) and two senders side by side, each on a topic of its own: the official Python client
(rocketmq-python-client, send_async, in a process of its own) and the official Node.js client
(rocketmq-client-nodejs as tests/node installs it, driven through tests/node_client.py). Each
starts one send every 50 ms, whether the earlier ones have ended or not, and records every send's
start, end, outcome and message id.

Each run (--runs times): wait until every broker is in the SyncStateSet, SIGKILL the master, and take
for each client the time from the kill to the end of the first send started after the kill that the
client saw acknowledged. Then restart the old broker (it rejoins as a slave).

Afterwards an official Python SimpleConsumer, whose group was registered before the first send,
reads both topics to the end: every acknowledged message must be received; a message stored more
than once (a client's resend of a send whose answer the kill lost: until resends are deduplicated
across a failover, the new master does not know the old master's message ids) is counted as a
duplicate with its cause.

The bench never asserts: it prints a table and writes bench/results/bench_client_failover.json.

    .venv/bin/python bench/bench_client_failover.py             # 10 kills
    .venv/bin/python bench/bench_client_failover.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import bench_failover  # noqa: E402
import common  # noqa: E402
from node_client import NodeClient  # noqa: E402

NAME = "bench_client_failover"
TARGET_WORST_S = 1.0
SEND_INTERVAL_MS = 50
SETTLE_S = 120.0
VERIFY_GROUP = "BenchClientFailoverVerify"
CLIENTS = ("python", "node")


def python_sender(access_point: str, topic: str, interval_ms: int, out_path: str, stop_path: str) -> None:
    """The official Python client, sending as tests/node/client.js's send_every does for Node.js."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(access_point, Credentials(), request_timeout=3), (topic,))
    producer.startup()
    with open(out_path, "a", buffering=1) as out:
        def record(t0: float, body: str, future) -> None:
            try:
                outcome = {"ok": True, "message_id": future.result().message_id, "error": None}
            except Exception as error:  # the client's own failure types, all of them a failed send
                outcome = {"ok": False, "message_id": None, "error": str(error)[:200]}
            out.write(json.dumps({"t0": t0, "t1": time.time(), "body": body, **outcome}) + "\n")

        pending = []
        sequence = 0
        while not os.path.exists(stop_path):
            message = Message()
            message.topic = topic
            message.body = (body := f"python-{sequence}").encode()
            t0 = time.time()
            future = producer.send_async(message)
            future.add_done_callback(lambda done, t0=t0, body=body: record(t0, body, done))
            pending.append(future)
            sequence += 1
            time.sleep(interval_ms / 1000)
        for future in pending:
            try:
                future.result(timeout=30)
            except Exception:  # already recorded by its callback
                pass
    producer.shutdown()


def sends(path: Path) -> list[dict]:
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.endswith("\n")]


def first_ack_after(records, moment: float, timeout: float) -> dict | None:
    """The first send started at `moment` or later that the client saw acknowledged; `records()`
    gives every send that has ended so far."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        acked = [record for record in records() if record["t0"] >= moment and record["ok"]]
        if acked:
            return min(acked, key=lambda record: record["t1"])
        time.sleep(0.05)
    return None


def registered_consumer(access_point: str, topics: list[str]):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(ClientConfiguration(access_point, Credentials(), request_timeout=10), VERIFY_GROUP,
                              {topic: FilterExpression("*") for topic in topics}, await_duration=1)
    consumer.startup()
    consumer.receive(1, 10)  # the group's first contact: from here on it is owed every message
    return consumer


def received_bodies(consumer, expected: int, quiet_s: float = 15.0) -> Counter:
    """Read until every expected body is in, or nothing new came for quiet_s."""
    bodies: Counter = Counter()
    last_new = time.monotonic()
    while len(bodies) < expected and time.monotonic() - last_new < quiet_s:
        batch = consumer.receive(32, 60)
        for message in batch:
            bodies[message.body.decode()] += 1
            consumer.ack(message)
        if batch:
            last_new = time.monotonic()
    return bodies


def verdict(records: list[dict], bodies: Counter) -> dict:
    acked = {record["body"] for record in records if record["ok"]}
    attempted = {record["body"] for record in records}
    errors = Counter((record["error"] or "")[:120] for record in records if not record["ok"])
    return {"sends": len(records), "acked": len(acked), "failed": len(attempted - acked),
            "lost": len(acked - bodies.keys()),
            "duplicates": sum(count - 1 for count in bodies.values()),
            "unacked_but_stored": len(bodies.keys() - acked),
            "errors": dict(errors.most_common(3))}


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_python_sender":
        python_sender(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
        return
    parser = argparse.ArgumentParser(description="failover through the official clients (see the module docstring)")
    parser.add_argument("--runs", type=int, default=10, help="master SIGKILLs (default 10)")
    parser.add_argument("--base-port", type=int, default=27200)
    opts = parser.parse_args()
    common.install_signal_handlers()
    workdir = Path(tempfile.mkdtemp(prefix="bench-client-failover-"))
    started = time.time()
    cluster = bench_failover.Cluster(workdir, opts.base_port, ["--set", "allAckInSyncStateSet=true"])
    access_point = cluster.info["access_point"]
    topics = {client: f"BenchClientFailover{client.capitalize()}" for client in CLIENTS}
    for topic in topics.values():
        cluster.admin("updateTopic", "-n", access_point, "-t", topic, "-c", "DefaultCluster", "-r", "4", "-w", "4")
    stop_path, python_out = workdir / "stop", workdir / "python.jsonl"
    python_out.touch()
    node = NodeClient(workdir / "node.log")
    records = {"python": lambda: sends(python_out), "node": lambda: list(node.events)}
    runs: list[dict] = []
    consumer = None
    try:
        consumer = registered_consumer(access_point, list(topics.values()))
        python = common.start([common.PYTHON, __file__, "_python_sender", access_point, topics["python"],
                               SEND_INTERVAL_MS, python_out, stop_path],
                              label="python sender", log=workdir / "python.log", cwd=common.ROOT)
        node.call("producer", access_point=access_point, topics=[topics["node"]], request_timeout_ms=3000)
        node.call("send_every", topic=topics["node"], interval_ms=SEND_INTERVAL_MS, prefix="node")
        for client in CLIENTS:
            if first_ack_after(records[client], 0, SETTLE_S) is None:
                raise RuntimeError(f"the {client} client never got a send acknowledged; see {workdir}/{client}.log")
        for number in range(opts.runs):
            before = cluster.wait_in_sync()
            master = cluster.master()
            killed_at = time.time()
            os.kill(master["pid"], signal.SIGKILL)
            run = {"run": number, "killed": bench_failover.label(master), "epoch_before": before["master_epoch"]}
            for client in CLIENTS:
                record = first_ack_after(records[client], killed_at, SETTLE_S)
                run[f"{client}_s"] = round(record["t1"] - killed_at, 3) if record else None
            cluster.restart(master)
            run["epoch_after"] = cluster.wait_in_sync()["master_epoch"]
            runs.append(run)
            print(f"run {number}: {run}", flush=True)
        stop_path.touch()
        python.wait(timeout=60)  # it ends by itself once the stop file exists and its sends have ended
        node.call("stop_sending", timeout=60)
        ended = {client: records[client]() for client in CLIENTS}
        bodies = received_bodies(consumer, sum(len(sent) for sent in ended.values()))
    finally:
        stop_path.touch()
        node.close()
        if consumer is not None:
            consumer.shutdown()
        cluster.stop()
        common.stop_all_started()
    rows = []
    for client in CLIENTS:
        times = [run[f"{client}_s"] for run in runs if run[f"{client}_s"] is not None]
        prefix = f"{client}-"
        check = verdict(ended[client], Counter({body: count for body, count in bodies.items()
                                                 if body.startswith(prefix)}))
        rows.append({"client": client, "runs": len(times),
                     "median_s": round(statistics.median(times), 3) if times else None,
                     "worst_s": max(times) if times else None, "target": f"worst <= {TARGET_WORST_S:g} s", **check})
    columns = [("client", "official client"), ("runs", "kills"), ("median_s", "kill -> first ack median s"),
               ("worst_s", "worst s"), ("target", "target"), ("sends", "sends"), ("acked", "acked"),
               ("failed", "failed"), ("lost", "acked, not received"), ("duplicates", "stored twice"),
               ("unacked_but_stored", "failed but stored")]
    title = (f"3 replicas, controller mode, allAckInSyncStateSet=true, RocketMQ's default timeouts; one send every "
             f"{SEND_INTERVAL_MS} ms per client; {os.cpu_count()} cpus shared")
    common.print_table(rows, columns, title)
    path = common.write_results(NAME, {"title": title, "rows": rows, "runs": runs,
                                       "seconds": round(time.time() - started, 1)},
                                machine=common.machine_info(packages=("grpcio", "rocketmq-python-client")))
    print(f"\nwrote {path}")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
