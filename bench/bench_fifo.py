"""FIFO benchmark (issue 20): FIFO with 1,000 message groups against NORMAL, 1 KiB bodies, one run,
on a 3-replica group with quorum writes (`quorumq up --replicas 3`, SYNC_MASTER, inSyncReplicas 2,
ASYNC_FLUSH: bench_replicas.py's configuration of its target row).

The FIFO side is a FIFO topic (`updateTopic -a +message.type=FIFO`) read by a FIFO group
(`updateSubGroup -o true`), its messages spread over `--groups` message groups in turn; the NORMAL
side is a NORMAL topic read by a group that is not orderly. Both topics have `--queues` queues.
  (a) produce: the official Python client's Producer.send_async with at most `--official-window` sends
      in flight, and quorumq's own Producer.send_batch (`--batch` messages a call, `--inflight`
      calls in flight), each for `--seconds`, acknowledged messages per second. The producer splits
      a call of FIFO messages by their groups' queues, each queue's part in order, so the same call
      makes `--queues` requests of about 1/`--queues` its size: a second FIFO row makes calls
      `--queues` times as large, whose requests are NORMAL's size (more messages in flight);
  (b) consume: a topic filled beforehand with `--consume-messages` messages (quorumq's Producer, the
      same groups) is read by `--consumer-processes` processes of `--consumers` official
      SimpleConsumers each, all started before the clock starts: each loops receive(`--receive-batch`,
      30 s invisible) and acks every message it got, one after the other, as an application would
      (5.1.2's ack_async returns no future to wait on). Reported: messages per second from the start
      to the last ack, and the receive-to-ack latency p50/p99: from the receive call returning a
      message to that message's ack answered.
A FIFO group's queue hands out one batch at a time and its next only once the batch is acked, and
each receive waits for its lease record's copy on a slave like a send (docs/messaging.md): the
consume rows show what that costs. Target: FIFO at least half the NORMAL rate in each row.

quorumq's own client has no receive or ack (its PullConsumer reads by offset and knows no groups'
leases), so "through quorumq's own client" is its producer side: row (a)'s send_batch, with
Message(message_group=...). Everything consumed goes through the official client.

Every client measurement runs in fresh Python processes (bench_foundation.py's workers for (a));
the servers are stopped by pid at the end, also on failure or SIGINT. The bench never asserts: it
prints one table and writes bench/results/bench_fifo.json.

    .venv/bin/python bench/bench_fifo.py                         # one round, about 2 minutes
    .venv/bin/python bench/bench_fifo.py --repeat 3 --wait-quiet 30          # what make bench-fifo runs
    .venv/bin/python bench/bench_fifo.py --seconds 1 --consume-messages 2000  # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_foundation as bf  # noqa: E402
import bench_replicas as br  # noqa: E402
import common  # noqa: E402
from common import PYTHON, ROOT  # noqa: E402

NAME = "bench_fifo"
REPLICAS = 3
IN_SYNC_REPLICAS = 2
TARGET_FACTOR = 0.5  # FIFO at least half the NORMAL rate
INVISIBLE_S = 30  # long enough that nothing is handed out twice while the bench runs
AWAIT_S = 2  # a SimpleConsumer's long poll
EMPTY_TO_STOP = 2  # a consumer stops after this many empty receives in a row (its share is drained)
READY_TIMEOUT_S = 120.0  # for every consumer process to start its SimpleConsumers
KINDS = ("NORMAL", "FIFO")


# ==================================================================================================
# Workers (each in a fresh process)


async def w_fill(args):
    """quorumq's Producer sends exactly args["messages"] 1 KiB messages (message groups as
    bench_foundation's workers give them), `batch` a request: what the consumers will read."""
    from quorumq.client import Message, Producer
    payload, batch, total = bf.body(), args["batch"], args["messages"]
    statuses: Counter = Counter()
    async with Producer(args["access_point"], window=args["inflight"]) as producer:
        started = time.perf_counter()
        for start in range(0, total, batch):
            results = await producer.send_batch(args["topic"], [
                Message(payload, message_group=bf.message_group(args, index))
                for index in range(start, min(total, start + batch))])
            statuses.update(result.status for result in results)
        elapsed = time.perf_counter() - started
    return {"statuses": dict(statuses), "rate": round(total / elapsed, 1)}


def w_consume(args):
    """`consumers` official SimpleConsumers of args["group"], one thread each: started, then this
    process says it is ready (a file in `ready_dir`) and waits for `go_file`, which holds the
    CLOCK_MONOTONIC time the measurement starts at; each thread then receives and acks until
    EMPTY_TO_STOP empty receives in a row or `timeout_s`."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    config = ClientConfiguration(args["access_point"], Credentials(), request_timeout=10)
    consumers = [SimpleConsumer(config, args["group"], {args["topic"]: FilterExpression("*")},
                                await_duration=AWAIT_S) for _ in range(args["consumers"])]
    for consumer in consumers:
        consumer.startup()
    Path(args["ready_dir"], str(args["index"])).touch()
    go = Path(args["go_file"])
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    started = float(go.read_text())
    lock = threading.Lock()
    latencies: list[float] = []  # receive-to-ack, seconds
    receives: list[float] = []  # receive calls that returned messages, seconds
    state = {"messages": 0, "redelivered": 0, "errors": 0, "last_error": None, "last_ack": started}

    def consume(consumer) -> None:
        empty, stop_at = 0, started + args["timeout_s"]
        while empty < EMPTY_TO_STOP and time.monotonic() < stop_at:
            asked = time.monotonic()
            try:
                messages = consumer.receive(args["batch"], INVISIBLE_S)
            except Exception as error:  # noqa: BLE001 - counted and reported
                with lock:
                    state["errors"] += 1
                    state["last_error"] = repr(error)
                continue
            got = time.monotonic()
            empty = 0 if messages else empty + 1
            mine = []
            for message in messages:
                try:
                    consumer.ack(message)
                except Exception as error:  # noqa: BLE001 - counted and reported
                    with lock:
                        state["errors"] += 1
                        state["last_error"] = repr(error)
                    continue
                mine.append(time.monotonic() - got)
            with lock:
                if messages:
                    receives.append(got - asked)
                latencies.extend(mine)
                state["messages"] += len(mine)
                state["redelivered"] += sum(1 for message in messages if (message.delivery_attempt or 1) > 1)
                if mine:
                    state["last_ack"] = max(state["last_ack"], got + mine[-1])

    cpu0 = time.process_time()
    threads = [threading.Thread(target=consume, args=(consumer,)) for consumer in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {**state, "client_cpu_s": round(time.process_time() - cpu0, 3), "latencies": latencies,
              "receive_latencies": receives}
    for consumer in consumers:
        bf._quiet_shutdown(consumer)
    return result


def consumed(results: list[dict], started: float, server: bf.ServerCpu) -> dict:
    """One figure from the consumer processes' results (they share CLOCK_MONOTONIC): messages acked
    from `started` to the last ack, receive-to-ack and receive latencies, CPU per message (the
    servers' over the whole measurement, its last empty receives included)."""
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        return {"error": "; ".join(failed)}
    count = sum(r["messages"] for r in results)
    elapsed = max(r["last_ack"] for r in results) - started
    res = {"messages": count, "seconds": round(elapsed, 3), "rate": round(count / elapsed, 1) if elapsed > 0 else 0.0,
           "redelivered": sum(r["redelivered"] for r in results), "errors": sum(r["errors"] for r in results),
           "last_error": next((r["last_error"] for r in results if r["last_error"]), None),
           **common.latency_summary([x for r in results for x in r["latencies"]])}
    receive = common.latency_summary([x for r in results for x in r["receive_latencies"]])
    res.update({f"receive_{k}": v for k, v in receive.items()})
    if count:
        res["client_cpu_us_per_msg"] = round(sum(r["client_cpu_s"] for r in results) / count * 1e6, 1)
        res["server_cpu_us_per_msg"] = round((server.used() or 0.0) / count * 1e6, 1)
    return res


WORKERS = {"official-async": bf.w_official_async, "qq-batch": bf.w_qq_batch, "fill": w_fill, "consume": w_consume}


# ==================================================================================================
# Orchestration


class Bench(br.Bench):
    worker_script = Path(__file__).resolve()

    def __init__(self, opts):
        opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="bench-fifo-")
        super().__init__(opts)

    def admin(self, access_point: str, *args: object) -> None:
        """A `quorumq admin` command, as a user would type it; a failure ends the bench."""
        argv = [PYTHON, "-m", "quorumq.cli.main", "admin", *map(str, args), "-n", access_point]
        self.commands[f"admin {' '.join(map(str, args))}"] = shlex.join(argv)
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=common.code_env(self.src),
                              timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"quorumq admin {' '.join(map(str, args))}: {done.stderr.strip()}")

    def lag(self, access_point: str, group: str, topic: str) -> int:
        argv = [PYTHON, "-m", "quorumq.cli.main", "admin", "consumerProgress", "-n", access_point, "-g", group,
                "-t", topic, "--json"]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=common.code_env(self.src),
                              timeout=60)
        return json.loads(done.stdout)["total_lag"] if done.returncode == 0 else -1

    def names(self, kind: str) -> dict[str, str]:
        title = kind.capitalize()
        return {"send": f"Bench{title}Send", "receive": f"Bench{title}Receive", "group": f"Bench{title}Group"}

    def configure(self, access_point: str, cluster: str) -> None:
        for kind in KINDS:
            names = self.names(kind)
            for topic in (names["send"], names["receive"]):
                self.admin(access_point, "updateTopic", "-c", cluster, "-t", topic, "-r", self.opts.queues,
                           "-w", self.opts.queues, "-a", f"+message.type={kind}")
            self.admin(access_point, "updateSubGroup", "-c", cluster, "-g", names["group"],
                       "-o", str(kind == "FIFO").lower())

    def system(self, kind: str) -> str:
        if kind == "FIFO":
            return f"FIFO topic, {self.opts.groups:,} message groups, FIFO group"
        return "NORMAL topic, normal group"

    def groups_of(self, kind: str) -> dict:
        return {"groups": self.opts.groups} if kind == "FIFO" else {}

    def produce(self, kind: str, base: dict) -> None:
        opts, topic = self.opts, self.names(kind)["send"]
        w, b, n = opts.official_window, opts.batch, opts.inflight
        r = self.worker(f"{kind.lower()}_official_async", "official-async",
                        {**base, **self.groups_of(kind), "topic": topic, "window": w}, profile=True)
        self.add(self.system(kind), f"official Producer.send_async (<= {w} in flight)", r, kind="produce")
        # The same calls on both sides; a FIFO call is split by its groups' queues into smaller requests.
        if kind == "NORMAL":
            calls = [("normal_qq_batch", b, self.batch_measurement(b, n))]
        else:  # and calls of `queues` times as many, so each of their requests is NORMAL's size
            calls = [("fifo_qq_batch", b, f"quorumq Producer.send_batch ({b}/call, split by queue, {n} in flight)"),
                     ("fifo_qq_batch_by_queue", b * opts.queues,
                      f"quorumq Producer.send_batch ({b * opts.queues}/call, about {b}/request by queue, "
                      f"{n} in flight)")]
        for key, size, measurement in calls:
            r = self.worker(key, "qq-batch", {**base, **self.groups_of(kind), "topic": topic, "batch": size,
                                              "inflight": n}, profile=True)
            self.add(self.system(kind), measurement, r, kind="produce",
                     note=f"request p50/p99 {r.get('request_p50_ms', '-')}/{r.get('request_p99_ms', '-')} ms; "
                          f"{br.status_text(r.get('statuses'))}" if "error" not in r else "")

    @staticmethod
    def batch_measurement(batch: int, inflight: int) -> str:
        return f"quorumq Producer.send_batch ({batch}/request, {inflight} in flight)"

    def consume(self, kind: str, base: dict) -> None:
        opts, names = self.opts, self.names(kind)
        key = f"{kind.lower()}_consume"
        processes, consumers = opts.consumer_processes, opts.consumers
        measurement = (f"official SimpleConsumer receive({opts.receive_batch}) + ack "
                       f"({processes} x {consumers} consumers)")
        fill = self.worker(f"{key}_fill", "fill", {**base, **self.groups_of(kind), "topic": names["receive"],
                                                   "messages": opts.consume_messages, "batch": opts.batch,
                                                   "inflight": opts.inflight})
        if "error" in fill or set(fill.get("statuses", {})) != {br.SEND_OK}:
            self.add(self.system(kind), measurement, {"error": f"filling the topic: {fill}"}, kind="consume")
            return
        run_dir = self.workdir / f"{key}-{self.round}"
        run_dir.mkdir()
        go_file = run_dir / "go"
        args = {**base, "topic": names["receive"], "group": names["group"], "consumers": consumers,
                "batch": opts.receive_batch, "timeout_s": opts.consume_timeout, "ready_dir": str(run_dir),
                "go_file": str(go_file)}
        results: list[dict] = [{}] * processes

        def run(index: int) -> None:
            argv = [PYTHON, self.worker_script, "_worker", "consume", json.dumps({**args, "index": index})]
            results[index] = common.run_worker(argv, label=f"{key}-{index}", log=self.log,
                                               env=common.code_env(self.src),
                                               timeout=READY_TIMEOUT_S + opts.consume_timeout + 60)

        print(f"  {key} ...", end=" ", flush=True)
        threads = [threading.Thread(target=run, args=(index,)) for index in range(processes)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(list(run_dir.iterdir())) < processes and time.monotonic() < deadline:
            time.sleep(0.05)
        server = bf.ServerCpu(base["server_pids"])
        server.start()
        started = time.monotonic()
        go_file.write_text(repr(started))
        for thread in threads:
            thread.join()
        server.stop()
        res = consumed(results, started, server)
        self.results.setdefault(key, []).append(res)
        print(res.get("error") or f"{common.fmt_rate(res.get('rate'))} msg/s", flush=True)
        note = "" if "error" in res else (
            f"{res['messages']:,} of {opts.consume_messages:,} acked, lag after "
            f"{self.lag(base['access_point'], names['group'], names['receive'])}; receive p50/p99 "
            f"{common.fmt_ms(res['receive_p50_ms'])}/{common.fmt_ms(res['receive_p99_ms'])} ms"
            + (f"; {res['redelivered']} redelivered, {res['errors']} errors ({res['last_error']})"
               if res["redelivered"] or res["errors"] else ""))
        self.add(self.system(kind), measurement, res, kind="consume", note=note)

    def run(self):
        opts = self.opts
        started = time.monotonic()
        self.notes += common.settle(opts.wait_quiet)
        up, cluster, data, master, slaves = self.start_group(
            "qq-fifo", opts.base_port, self.quorumq_sets(REPLICAS, opts.flush, inSyncReplicas=IN_SYNC_REPLICAS),
            REPLICAS)
        try:
            if cluster is None:
                self.add(self.system("FIFO"), "everything", {"error": "quorumq up did not come up"})
            else:
                base = {"access_point": cluster["access_point"],
                        "server_pids": [master["pid"]] + [slave["pid"] for slave in slaves]}
                self.configure(cluster["access_point"], cluster["cluster"])
                for self.round in range(opts.repeat):
                    if opts.repeat > 1:
                        print(f"--- round {self.round + 1} of {opts.repeat}", flush=True)
                    order = KINDS if self.round % 2 == 0 else KINDS[::-1]  # neither side always goes first
                    for kind in order:
                        self.produce(kind, base)
                    for kind in order:
                        self.consume(kind, base)
        finally:
            self.stop_quorumq(up, cluster, data)
            common.stop_all_started()
        self.build_rows()
        columns = [("system", "system"), ("measurement", "measurement"), ("msg/s", "msg/s"),
                   ("p50 ms", "receive-to-ack p50 ms"), ("p99 ms", "receive-to-ack p99 ms"),
                   ("vs NORMAL", "vs NORMAL"), ("client us/msg", "client CPU us/msg"),
                   ("server us/msg", "server CPU us/msg"), ("target", "target"), ("note", "note")]
        rounds = f", median of {opts.repeat} rounds" if opts.repeat > 1 else ""
        title = (f"{bf.BODY_SIZE} B bodies, R{REPLICAS} inSyncReplicas {IN_SYNC_REPLICAS} {opts.flush}, "
                 f"{opts.queues} queues a topic, {opts.seconds:g} s a produce measurement, "
                 f"{opts.consume_messages:,} messages a consume measurement{rounds}, {os.cpu_count()} cpus shared "
                 f"by clients and servers")
        self.report(NAME, columns, title, {"FIFO": f">= {TARGET_FACTOR:g}x the NORMAL rate of the same row"}, started)

    def build_rows(self) -> None:
        """bench_foundation's rows (the median round of each), then each FIFO row against its NORMAL row."""
        bf.Bench.build_rows(self)
        normal = {row["measurement"]: row for row in self.rows if row["system"] == self.system("NORMAL")}
        batches = normal.get(self.batch_measurement(self.opts.batch, self.opts.inflight))
        for row in self.rows:
            # A FIFO send_batch row stands against NORMAL's send_batch row: the same calls, or the same request size.
            base = batches if "Producer.send_batch" in row["measurement"] else normal.get(row["measurement"])
            if row["system"] == self.system("FIFO") and base and row.get("rate") and base.get("rate"):
                factor = row["rate"] / base["rate"]
                row["vs NORMAL"] = f"{factor:.2f}x"
                row["target"] = f">= {TARGET_FACTOR:g}x " + ("met" if factor >= TARGET_FACTOR else "MISSED")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        bf.worker_main(sys.argv[2], sys.argv[3], WORKERS)
        return
    p = argparse.ArgumentParser(description="quorumq FIFO benchmark (see the module docstring)")
    common.add_up_options(p, 28000, "quorumq up uses P..P+199")
    common.add_send_options(p, inflight=4)
    p.add_argument("--groups", type=int, default=1000, help="message groups of the FIFO side (default 1000)")
    p.add_argument("--queues", type=int, default=8, help="read and write queues of each topic (default 8)")
    p.add_argument("--official-window", type=int, default=256, help="official send_async sends in flight")
    p.add_argument("--consume-messages", type=int, default=20_000,
                   help="messages each consume measurement reads (default 20,000)")
    p.add_argument("--consumer-processes", type=int, default=2, help="processes of SimpleConsumers (default 2)")
    p.add_argument("--consumers", type=int, default=4, help="SimpleConsumers in each process (default 4)")
    p.add_argument("--receive-batch", type=int, default=32, help="max messages a receive asks for (default 32)")
    p.add_argument("--consume-timeout", type=float, default=300.0, help="longest a consume measurement may run")
    p.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"],
                   help="flushDiskType (default ASYNC_FLUSH)")
    br.add_segment_option(p)
    opts = p.parse_args()
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
