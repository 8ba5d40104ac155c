"""Timer and transaction benchmark (issue 21), one run, on a 3-replica group with quorum writes
(`quorumq up --replicas 3`, SYNC_MASTER, inSyncReplicas 2, ASYNC_FLUSH: bench_fifo.py's group),
everything through the official Python client (quorumq's own client sends no delay or
transactional messages). Bodies of `--body-size` (1 KiB) bytes; topics of `--queues` (8) queues.

  (a) transactions: one producer process sends for `--seconds` each, sync, with 1 thread and with
      `--threads` threads sharing one Producer: plain Producer.send to a NORMAL topic, against
      begin_transaction + send(message, tx) + tx.commit() to a TRANSACTION topic. Messages (or
      transactions) a second, and the latency of a send or of a send + commit.
  (b) delivery lateness: `--timers` delay messages whose delivery timestamps are spread evenly over
      `--window` seconds that start `--lead` seconds after the sends begin (by default long enough
      for every send to be in first), sent by `--sender-processes` processes with send_async
      (`--send-window` in flight each), each sending its share in due order. `--consumer-processes`
      processes of `--consumers` SimpleConsumers, started before the first send, receive
      (`--receive-batch`, 30 s invisible) and ack each message. A message's lateness is the wall
      time its receive call returned minus its due time (both ms, one machine's clock; the due time
      travels in the body); one received before its due time is counted early. Also the broker's
      side alone: the received message's store timestamp (when the broker wrote the delivered copy)
      minus its due time. Target: p99 <= timerPrecisionMs + 250 ms. Then the same again on a second
      topic with quorumq's own PullConsumer in place of the official consumers (`--consumers-kind`):
      one process long-polling each queue with PullBatch, no acks (it reads by offset), so the figure
      is the broker's delivery seen by a consumer that keeps up, beside the official client's.
  (c) memory: the master's RSS (/proc/PID/status: VmRSS, and RssAnon, its heap) fresh, before (a);
      after (b), every timer delivered ("live, 0 pending"); then the master is restarted ("restarted,
      0 pending"), `--fill-processes` processes send `--fill-timers` delay messages due 1 to 2 hours
      ahead (send_async; at most `--fill-seconds` of sending, the count reached is reported),
      sampling RSS and timersPending every 5 s ("live, all pending" at the end), and the master is
      restarted again ("restarted, all pending"): its timer index is rebuilt from the log. A restart
      is a SIGTERM and the broker started again from its config, as an operator would; its open is
      timed to its "listening" log line and to its status counting every timer pending again. Each
      all-pending figure stands against its 0-pending twin: live against live (both after heavy
      traffic, which leaves freed heap glibc keeps, up to quorumq's 64 MiB trim threshold, heap.py),
      restarted against restarted (no traffic since the open: the index alone). Target: at most
      64 MB more with 1,000,000 timers pending (pro rata when fewer were sent).

Every client runs in fresh Python processes; the servers are stopped by pid at the end, also on
failure or SIGINT. The bench never asserts: it prints one table and writes bench/results/bench_timers.json.

    .venv/bin/python bench/bench_timers.py                    # what make bench-timers runs, about 16 minutes
    .venv/bin/python bench/bench_timers.py --timers 5000 --window 10 --fill-timers 20000 --seconds 2  # a check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fifo  # noqa: E402
import bench_replicas as br  # noqa: E402
import common  # noqa: E402
from common import PYTHON, ROOT  # noqa: E402

NAME = "bench_timers"
REPLICAS = 3
IN_SYNC_REPLICAS = 2
TIMER_PRECISION_MS = 1000  # the broker's default timerPrecisionMs; --set may change it
LATENESS_SLACK_MS = 250  # target: lateness p99 <= timerPrecisionMs + this
MEMORY_TARGET_MB = 64  # target: at most this much more RSS with 1,000,000 timers pending
INVISIBLE_S = 30  # nothing is handed out twice while the bench runs
AWAIT_S = 2  # a SimpleConsumer's long poll
READY_TIMEOUT_S = 120.0  # for every worker process to start its clients
FILL_AHEAD_S = 3600  # the fill's timers are due 1 to 2 hours ahead: they stay pending
BUCKET_S = 10  # (b)'s lateness p50 by this many seconds of due time
SAMPLE_EVERY_S = 5.0  # the master's RSS and pending timers while the fill runs
RESTART_TIMEOUT_S = 600.0
WARMUP = 50  # sends of each sync measurement before its clock starts
TOPICS = {"timers": ("BenchTimers", "DELAY"), "timers-pull": ("BenchTimersPull", "DELAY"),
          "fill": ("BenchTimersPending", "DELAY"), "plain": ("BenchPlain", "NORMAL"),
          "transaction": ("BenchOrders", "TRANSACTION")}
CONSUMER_KINDS = {  # (b)'s consumers: worker kind and topic
    "official": ("receive-timers", TOPICS["timers"][0]),
    "pull": ("pull-timers", TOPICS["timers-pull"][0]),
}
GROUP = "BenchTimersGroup"


# ==================================================================================================
# Workers (each in a fresh process)


def _wait_go(args) -> str:
    """Say this process is ready (a file in args["run_dir"]), wait for the go file; its text."""
    run_dir = Path(args["run_dir"])
    (run_dir / f"ready-{args['index']}").touch()
    go, deadline = run_dir / "go", time.monotonic() + READY_TIMEOUT_S
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return go.read_text()


def _body(index: int, due_ms: int, size: int) -> bytes:
    head = f"{index}:{due_ms}:".encode()
    return head + b"x" * max(0, size - len(head))


def w_send_timers(args):
    """Delay messages through the official Producer.send_async, at most `window` in flight: of the
    global indices 0..total-1 this process sends index, index + processes, ... in order, message i
    due at t0 + i * window_ms / total (t0 in the go file, ms). Stops early at `seconds` after go
    when given. Counts acknowledged sends and those acknowledged only after their due time."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    config = ClientConfiguration(args["access_point"], Credentials(), request_timeout=10)
    producer = Producer(config, (args["topic"],))
    producer.startup()
    slots = threading.Semaphore(args["window"])
    lock = threading.Lock()
    state = {"ok": 0, "acked_after_due": 0, "last_ack": 0.0}
    errors: Counter = Counter()
    try:
        t0 = int(_wait_go(args))
        started = time.time()
        stop_at = started + args["seconds"] if args.get("seconds") else float("inf")
        total, span = args["total"], args["window_ms"]

        def on_done(fut, due_ms: int) -> None:
            now, error = time.time(), fut.exception()
            with lock:
                if error is not None:
                    errors[type(error).__name__] += 1
                else:
                    state["ok"] += 1
                    state["acked_after_due"] += now * 1000 > due_ms
                    state["last_ack"] = now
            slots.release()

        sent = 0
        for index in range(args["index"], total, args["processes"]):
            if time.time() >= stop_at:
                break
            due = t0 + index * span // total
            message = Message()
            message.topic = args["topic"]
            message.body = _body(index, due, args["body_size"])
            message.delivery_timestamp = due  # epoch ms, as docs/messaging.md says
            slots.acquire()
            producer.send_async(message).add_done_callback(lambda fut, due=due: on_done(fut, due))
            sent += 1
        for _ in range(args["window"]):  # every send answered
            if not slots.acquire(timeout=60):
                break
        return {**state, "sent": sent, "errors": dict(errors), "started": started,
                "seconds": round(state["last_ack"] - started, 3) if state["ok"] else None}
    finally:
        bench_fifo.bf._quiet_shutdown(producer)


class _Received:
    """A consumer worker's figures (w_receive_timers, w_pull_timers): each distinct message's
    receive, due and store times (ms), duplicates and failures, the receive calls that got
    messages; how many distinct messages it has so far in count-INDEX, twice a second."""

    def __init__(self, args) -> None:
        run_dir = Path(args["run_dir"])
        self._stop_file, self._count_file = run_dir / "stop", run_dir / f"count-{args['index']}"
        self._deadline = args["deadline"]
        self.lock = threading.Lock()  # for `state` and `seen`, shared by a worker's threads
        self.seen: dict[int, tuple[float, int, float | None]] = {}  # index -> receive ms, due ms, store ms
        self.state = {"duplicates": 0, "acks_failed": 0, "receives_failed": 0, "last_error": None,
                      "delivery_timestamp_differs": 0}
        self.receives: list[tuple[float, int]] = []  # the receive calls that got messages: seconds, messages

    def going(self) -> bool:
        return not self._stop_file.exists() and time.time() < self._deadline

    def failed(self, what: str, error: Exception) -> None:
        """A receive or an ack failed: counted as `what`."""
        with self.lock:
            self.state[what] += 1
            self.state["last_error"] = repr(error)

    def received(self, asked: float, count: int) -> float:
        """A receive call made at perf_counter `asked` returned `count` messages now: now, wall ms."""
        now_ms = time.time() * 1000
        if count:
            self.receives.append((time.perf_counter() - asked, count))
        return now_ms

    def message(self, body: bytes, received_ms: float, store_ms: float | None) -> int:
        """One message received at `received_ms`: its due ms."""
        index, due, _ = body.split(b":", 2)
        with self.lock:
            if int(index) in self.seen:
                self.state["duplicates"] += 1
            else:
                self.seen[int(index)] = (received_ms, int(due), store_ms)
        return int(due)

    def count_thread(self) -> threading.Thread:
        def report_count() -> None:
            while self.going():
                self._count_file.write_text(str(len(self.seen)))
                time.sleep(0.5)
        return threading.Thread(target=report_count, daemon=True)

    def result(self, cpu_s: float | None, acks: list[float]) -> dict:
        return {**self.state, "cpu_s": cpu_s, "messages": [[index, *values] for index, values in self.seen.items()],
                "receives": self.receives, "acks": acks}


def w_receive_timers(args):
    """`consumers` official SimpleConsumers of `group`, one thread each, receive and ack until the
    stop file exists or `deadline` (wall time); each message's index, receive time and due time
    (_Received)."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    config = ClientConfiguration(args["access_point"], Credentials(), request_timeout=10)
    consumers = [SimpleConsumer(config, args["group"], {args["topic"]: FilterExpression("*")},
                                await_duration=AWAIT_S) for _ in range(args["consumers"])]
    for consumer in consumers:
        consumer.startup()
    tally = _Received(args)
    acks: list[float] = []  # seconds of each ack call

    def consume(consumer) -> None:
        while tally.going():
            asked = time.perf_counter()
            try:
                messages = consumer.receive(args["batch"], INVISIBLE_S)
            except Exception as error:  # noqa: BLE001 - counted and reported
                tally.failed("receives_failed", error)
                continue
            received = tally.received(asked, len(messages))
            for message in messages:
                # 5.1.2 reads the store timestamp but has no property for it.
                due = tally.message(message.body, received, message._Message__store_timestamp)
                with tally.lock:
                    tally.state["delivery_timestamp_differs"] += message.delivery_timestamp != due
                began = time.perf_counter()
                try:
                    consumer.ack(message)
                except Exception as error:  # noqa: BLE001 - counted and reported
                    tally.failed("acks_failed", error)
                acks.append(time.perf_counter() - began)

    t0 = int(_wait_go(args)) / 1000
    cpu0: list[float] = []  # this process's CPU seconds at the window's start
    threading.Timer(max(0.0, t0 - time.time()), lambda: cpu0.append(time.process_time())).start()
    threads = [threading.Thread(target=consume, args=(consumer,)) for consumer in consumers]
    threads.append(tally.count_thread())
    for thread in threads:
        thread.start()
    for thread in threads[:-1]:
        thread.join()
    cpu_s = round(time.process_time() - cpu0[0], 2) if cpu0 else None
    for consumer in consumers:
        bench_fifo.bf._quiet_shutdown(consumer)
    return tally.result(cpu_s, acks)


def w_pull_timers(args):
    """quorumq's PullConsumer long-polling each queue of `topic` from offset 0 with PullBatch until
    the stop file exists or `deadline`, one task a queue; w_receive_timers's figures (no acks)."""
    from quorumq.client import PullConsumer

    tally = _Received(args)

    async def drain(consumer, queue_id: int) -> None:
        offset = 0
        while tally.going():
            asked = time.perf_counter()
            try:
                result = await consumer.pull(args["topic"], queue_id, offset, args["batch"], AWAIT_S)
            except Exception as error:  # noqa: BLE001 - counted and reported
                tally.failed("receives_failed", error)
                continue
            received = tally.received(asked, len(result.messages))
            for message in result.messages:
                tally.message(message.body, received, message.store_timestamp_ms)
            offset = result.next_offset

    async def main() -> float:
        async with PullConsumer(args["access_point"], args["group"]) as consumer:
            queues = await consumer.queues(args["topic"])
            t0 = int(_wait_go(args)) / 1000
            await asyncio.sleep(max(0.0, t0 - time.time()))
            cpu0 = time.process_time()
            tally.count_thread().start()
            await asyncio.gather(*(drain(consumer, queue.queue_id) for queue in queues))
            return time.process_time() - cpu0

    return tally.result(round(asyncio.run(main()), 2), [])


def w_send_sync(args):
    """One official Producer shared by `threads` threads, each sending one message at a time for
    `seconds` (after WARMUP sends): a plain send, or with args["transaction"] begin_transaction,
    send(message, tx) and tx.commit(). Latency of each send and of each commit, and the CPU of
    args["server_pids"] (if given) a message. With args["credentials"] ([access key, secret key]) the
    client signs every call; with args["tls"] it talks TLS (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH in its
    environment names the CA)."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

    class Commit(TransactionChecker):
        """Commits any transaction the broker asks about (none should be left undecided here: the
        broker's transactionChecks count says)."""

        def check(self, message):  # noqa: ARG002
            return TransactionResolution.COMMIT

    config = ClientConfiguration(args["access_point"], Credentials(*args.get("credentials", ())), request_timeout=10)
    transactional = args["transaction"]
    producer = Producer(config, (args["topic"],), Commit() if transactional else None,
                        tls_enable=args.get("tls", False))
    producer.startup()
    payload = b"x" * args["body_size"]
    lock = threading.Lock()
    sends: list[float] = []
    commits: list[float] = []
    errors: Counter = Counter()

    def once() -> tuple[float, float | None]:
        message = Message()
        message.topic = args["topic"]
        message.body = payload
        begun = time.perf_counter()
        if not transactional:
            producer.send(message)
            return time.perf_counter() - begun, None
        transaction = producer.begin_transaction()
        producer.send(message, transaction)
        sent = time.perf_counter()
        transaction.commit()
        return sent - begun, time.perf_counter() - sent

    def attempt(record: bool) -> None:
        try:
            send, commit = once()
        except Exception as error:  # noqa: BLE001 - counted and reported
            if record:
                with lock:
                    errors[type(error).__name__] += 1
            return
        if record:
            with lock:
                sends.append(send)
                if commit is not None:
                    commits.append(commit)

    server = bench_fifo.bf.ServerCpu(args.get("server_pids"))
    clock: list[float] = []  # when every thread had warmed up

    def measure() -> None:
        server.start()
        clock.append(time.perf_counter())

    barrier = threading.Barrier(args["threads"], action=measure)

    def run() -> None:
        for _ in range(WARMUP):
            attempt(False)
        barrier.wait()
        while time.perf_counter() < clock[0] + args["seconds"]:
            attempt(True)

    try:
        threads = [threading.Thread(target=run) for _ in range(args["threads"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - clock[0]
        server.stop()
    finally:
        bench_fifo.bf._quiet_shutdown(producer)
    op = [s + c for s, c in zip(sends, commits)] if transactional else sends
    result = {"messages": len(sends), "seconds": round(elapsed, 3), "rate": round(len(sends) / elapsed, 1),
              "errors": dict(errors), **common.latency_summary(op)}
    result.update({f"send_{k}": v for k, v in common.latency_summary(sends).items() if k != "samples"})
    if server.used() is not None and sends:
        result["server_cpu_us_per_msg"] = round(server.used() / len(sends) * 1e6, 1)
    if transactional:
        result.update({f"commit_{k}": v for k, v in common.latency_summary(commits).items() if k != "samples"})
    return result


WORKERS = {"send-timers": w_send_timers, "receive-timers": w_receive_timers, "pull-timers": w_pull_timers,
           "send-sync": w_send_sync}


# ==================================================================================================
# Orchestration


def memory(pid: int) -> dict:
    """A process's resident memory from /proc/PID/status, in MB: all of it, its heap (RssAnon) and
    file pages (RssFile), and its peak (VmHWM)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    keys = (("rss_mb", "VmRSS"), ("anon_mb", "RssAnon"), ("file_mb", "RssFile"), ("peak_mb", "VmHWM"))
    return {name: round(int(fields[key].split()[0]) / 1024, 1) for name, key in keys}


def slope_bytes(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of MB against a count, in bytes per unit."""
    if len(points) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return round(sum((x - mx) * (y - my) for x, y in points) / var * 1024 * 1024, 1) if var else None


class Gang:
    """`processes` worker processes of one kind, run together: each gets args with its index, says
    it is ready and waits for the go file."""

    def __init__(self, bench: Bench, key: str, kind: str, args: dict, processes: int, timeout: float):
        self.dir = bench.workdir / key
        self.dir.mkdir()
        self.results: list[dict] = [{}] * processes

        def run(index: int) -> None:
            argv = [PYTHON, bench.worker_script, "_worker", kind,
                    json.dumps({**args, "index": index, "processes": processes, "run_dir": str(self.dir)})]
            self.results[index] = common.run_worker(argv, label=f"{key}-{index}", log=bench.log,
                                                    env=common.code_env(bench.src), timeout=timeout)

        self.threads = [threading.Thread(target=run, args=(index,)) for index in range(processes)]
        for thread in self.threads:
            thread.start()

    def ready(self) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(list(self.dir.glob("ready-*"))) < len(self.threads) and time.monotonic() < deadline:
            if not any(thread.is_alive() for thread in self.threads):
                return False
            time.sleep(0.05)
        return len(list(self.dir.glob("ready-*"))) == len(self.threads)

    def go(self, text: str) -> None:
        (self.dir / "go").write_text(text)

    def stop(self) -> None:
        (self.dir / "stop").touch()

    def count(self) -> int:
        return sum(int(path.read_text() or 0) for path in self.dir.glob("count-*"))

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def join(self) -> list[dict]:
        for thread in self.threads:
            thread.join()
        return self.results


class Bench(bench_fifo.Bench):
    worker_script = Path(__file__).resolve()

    def __init__(self, opts):
        opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="bench-timers-")
        super().__init__(opts)
        self.figures: dict[str, dict] = {}
        self.master: dict = {}
        self.broker_pids: list[int] = []
        self.access_point = ""
        self.restarted: subprocess.Popen | None = None  # the master started again by restart()

    @staticmethod
    def free_block(preferred: int, span: int = br.PORT_BLOCK) -> int:
        """`preferred` or a free block above it, never in the tests' ports (bench_replicas'
        PORT_RANGE)."""
        for base in range(preferred, 65535 - span, span):
            if all(common.port_free(base + i) for i in range(span)):
                return base
        return preferred

    def status(self) -> dict:
        """The master's status dict ({"error": ...} when it does not answer)."""
        from quorumq.client import AdminClient, ClientError

        async def ask() -> dict:
            async with AdminClient(self.access_point, timeout_s=5.0) as admin:
                try:
                    return await admin.broker_status(self.master["address"])
                except ClientError as error:
                    return {"error": str(error)}
        return asyncio.run(ask())

    def pending(self) -> int:
        return int(self.status().get("timersPending", -1))

    def configure(self, access_point: str, cluster: str) -> None:
        for topic, kind in TOPICS.values():
            self.admin(access_point, "updateTopic", "-c", cluster, "-t", topic, "-r", self.opts.queues,
                       "-w", self.opts.queues, "-a", f"+message.type={kind}")
        self.admin(access_point, "updateSubGroup", "-c", cluster, "-g", GROUP, "-o", "false")

    def sample(self, label: str) -> dict:
        figure = {**memory(self.master["pid"]), "timers_pending": self.pending()}
        self.figures.setdefault("memory", {})[label] = figure
        print(f"  RSS {label}: {figure['rss_mb']} MB (heap {figure['anon_mb']} MB), "
              f"{figure['timers_pending']:,} timers pending", flush=True)
        return figure

    # ---- (a) transactions ---------------------------------------------------------------------------

    def transactions(self) -> None:
        opts, before = self.opts, self.status()
        for threads in sorted({1, opts.threads}):
            for mode in ("plain", "transaction"):
                key = f"{mode}_{threads}t"
                res = self.worker(key, "send-sync", {
                    "access_point": self.access_point, "topic": TOPICS[mode][0], "body_size": opts.body_size,
                    "threads": threads, "transaction": mode == "transaction", "seconds": opts.seconds},
                    timeout=opts.seconds + 120)
                self.figures[key] = res
        after = self.status()
        keys = ("transactionsCommitted", "transactionsRolledBack", "transactionChecks", "transactionsPending")
        counts = {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in keys}
        self.figures["transaction_status"] = counts
        self.notes.append("the master's transaction figures over (a): " + ", ".join(f"{k} {v:+,}"
                                                                                   for k, v in counts.items()))

    # ---- (b) delivery lateness ------------------------------------------------------------------------

    def lateness(self, kind: str) -> None:
        opts = self.opts
        lead = opts.lead if opts.lead is not None else opts.timers / 1500 + 20
        window_ms = int(opts.window * 1000)
        deadline = time.time() + READY_TIMEOUT_S + lead + opts.window + opts.grace
        worker, topic = CONSUMER_KINDS[kind]
        consumers = Gang(self, f"lateness-{kind}-consumers", worker, {
            "access_point": self.access_point, "topic": topic, "group": GROUP, "consumers": opts.consumers,
            "batch": opts.receive_batch, "deadline": deadline}, opts.consumer_processes if kind == "official" else 1,
            timeout=deadline - time.time() + 120)
        senders = Gang(self, f"lateness-{kind}-senders", "send-timers", {
            "access_point": self.access_point, "topic": topic, "total": opts.timers, "window_ms": window_ms,
            "window": opts.send_window, "body_size": opts.body_size}, opts.sender_processes,
            timeout=deadline - time.time() + 120)
        print(f"  lateness, {kind} consumers: {opts.timers:,} timers due over {opts.window:g} s from {lead:.0f} s "
              "after the sends begin ...", flush=True)
        key = f"lateness_{kind}"
        if not (consumers.ready() and senders.ready()):  # with no go file, each ends on its own
            self.figures[key] = {"error": f"the workers did not start (see {self.log})",
                                        "senders": senders.join(), "consumers": consumers.join()}
            return
        t0 = int((time.time() + lead) * 1000)
        consumers.go(str(t0))
        senders.go(str(t0))
        sent = senders.join()
        acked = sum(r.get("ok", 0) for r in sent)
        print(f"  sends in: {acked:,} acknowledged, {t0 / 1000 - time.time():.1f} s before the window", flush=True)
        time.sleep(max(0.0, t0 / 1000 - time.time()))
        servers = bench_fifo.bf.ServerCpu(self.broker_pids)  # the brokers' CPU from the window's start
        servers.start()
        machine0 = common._cpu_times()
        profile = self.workdir / f"lateness-{kind}-master-profile.txt"
        spy = common.py_spy_attach(opts.py_spy, self.master["pid"], profile) if opts.py_spy else None
        while consumers.alive() and consumers.count() < acked and time.time() < deadline:
            time.sleep(0.5)
        servers.stop()
        (total0, idle0), (total1, idle1) = machine0, common._cpu_times()
        seconds = time.time() - t0 / 1000
        if spy is not None:
            common.py_spy_stop(spy)
        consumers.stop()
        self.figures[key] = self.lateness_figures(t0, sent, consumers.join())
        late = self.figures[key]
        late["window_seconds"] = round(seconds, 1)
        late["broker_cpu_share"] = [round(used / seconds, 2) for used in servers.per_pid()]
        late["consumer_cpu_share"] = [round((cpu or 0) / seconds, 2) for cpu in late.get("consumer_cpu_s", [])]
        busy = ((total1 - total0) - (idle1 - idle0)) / os.sysconf("SC_CLK_TCK") / seconds
        late["machine_busy_cores"] = round(busy, 2)  # every process's, of os.cpu_count()
        if spy is not None:
            late["master_profile"] = common.summarize_collapsed(profile)

    def lateness_figures(self, t0: int, sent: list[dict], received: list[dict]) -> dict:
        failed = [r["error"] for r in sent + received if "error" in r]
        if failed:
            return {"error": "; ".join(failed)}
        seen: dict[int, tuple[float, int, float | None]] = {}
        duplicates = sum(r["duplicates"] for r in received)
        for r in received:
            for index, at, due, stored in r["messages"]:
                duplicates += index in seen
                seen.setdefault(index, (at, due, stored))
        late = [(at - due) / 1000 for at, due, _ in seen.values()]
        buckets: dict[int, list[float]] = {}  # lateness by BUCKET_S of due time: a backlog grows across them
        for at, due, _ in seen.values():
            buckets.setdefault(int((due - t0) / 1000 // BUCKET_S), []).append(at - due)
        stored = [(s - due) / 1000 for _, due, s in seen.values() if s]
        errors: Counter = Counter()
        for r in sent:
            errors.update(r["errors"])
        acked = sum(r["ok"] for r in sent)
        started = min(r["started"] for r in sent)
        last_ack = max(r["last_ack"] for r in sent)
        return {
            "t0_ms": t0, "acked": acked, "send_errors": dict(errors),
            "acked_after_due": sum(r["acked_after_due"] for r in sent),
            "send_seconds": round(last_ack - started, 1), "send_rate": round(acked / (last_ack - started), 1),
            "sends_in_before_window_s": round(t0 / 1000 - last_ack, 1),
            "received": len(seen), "early": sum(1 for x in late if x < 0), "duplicates": duplicates,
            "early_max_ms": round(-min(late) * 1000, 1) if late and min(late) < 0 else 0,
            "stored_early": sum(1 for x in stored if x < 0),
            **common.latency_summary(late),
            **{f"store_{k}": v for k, v in common.latency_summary(stored).items()},
            **{k: sum(r[k] for r in received)
               for k in ("acks_failed", "receives_failed", "delivery_timestamp_differs")},
            "last_error": next((r["last_error"] for r in received if r["last_error"]), None),
            "consumer_cpu_s": [r["cpu_s"] for r in received],
            **{f"receive_{k}": v for k, v in common.latency_summary(
                [seconds for r in received for seconds, _ in r["receives"]]).items()},
            "messages_a_receive": round(sum(n for r in received for _, n in r["receives"])
                                        / max(1, sum(len(r["receives"]) for r in received)), 1),
            **{f"ack_{k}": v for k, v in common.latency_summary([x for r in received for x in r["acks"]]).items()},
            "p50_ms_by_due_bucket": [round(common.percentile(sorted(buckets[b]), 50)) for b in sorted(buckets)],
        }

    # ---- (c) memory -------------------------------------------------------------------------------------

    def fill(self) -> None:
        """Timers due 1 to 2 hours ahead, sampling the master's RSS and pending timers meanwhile."""
        opts = self.opts
        gang = Gang(self, "fill", "send-timers", {
            "access_point": self.access_point, "topic": TOPICS["fill"][0], "total": opts.fill_timers,
            "window_ms": FILL_AHEAD_S * 1000, "window": opts.send_window, "body_size": opts.body_size,
            "seconds": opts.fill_seconds}, opts.fill_processes, timeout=READY_TIMEOUT_S + opts.fill_seconds + 180)
        print(f"  fill: {opts.fill_timers:,} timers due in 1-2 h, at most {opts.fill_seconds:g} s of sends ...",
              flush=True)
        points: list[tuple[int, float, float, float]] = []  # pending, RSS MB, heap MB, seconds
        if not gang.ready():  # with no go file, each ends on its own
            self.figures["fill"] = {"error": f"the fill workers did not start (see {self.log})", "workers": gang.join()}
            return
        started = time.monotonic()
        gang.go(str(int((time.time() + FILL_AHEAD_S) * 1000)))
        while gang.alive():
            mem = memory(self.master["pid"])
            points.append((self.pending(), mem["rss_mb"], mem["anon_mb"], round(time.monotonic() - started, 1)))
            print(f"    {points[-1][3]:.0f} s: {points[-1][0]:,} pending, RSS {mem['rss_mb']} MB "
                  f"(heap {mem['anon_mb']} MB)", flush=True)
            time.sleep(SAMPLE_EVERY_S)
        results = gang.join()
        errors: Counter = Counter()
        for r in results:
            errors.update(r.get("errors", {}))
        acked = sum(r.get("ok", 0) for r in results)
        seconds = max((r.get("seconds") or 0) for r in results)
        time.sleep(SAMPLE_EVERY_S)  # the last acknowledgements' work settles
        self.sample("live, all pending")
        self.figures["fill"] = {
            "acked": acked, "errors": dict(errors), "seconds": seconds,
            "rate": round(acked / seconds, 1) if seconds else None,
            "worker_errors": [r["error"] for r in results if "error" in r],
            "rss_slope_bytes_per_timer": slope_bytes([(p, rss) for p, rss, _, _ in points if p >= 0]),
            "heap_slope_bytes_per_timer": slope_bytes([(p, anon) for p, _, anon, _ in points if p >= 0]),
            "points": points}

    def restart(self, label: str) -> None:
        """SIGTERM the master, start it again from its config (as an operator would), time its open
        (to its "listening" log line, and to its status counting every timer pending again), then
        sample its memory once its slaves are back in sync."""
        pending = self.pending()
        log = Path(self.master["log"])
        common.stop_pid(self.master["pid"], term_timeout=60)
        offset = log.stat().st_size
        began = time.monotonic()
        proc = common.start([PYTHON, "-m", "quorumq.cli.main", "broker", "-c", self.master["config"]],
                            label="master-restarted", log=log, cwd=ROOT,
                            env={**common.code_env(self.src), "PYTHONUNBUFFERED": "1"})
        self.master["pid"], self.restarted = proc.pid, proc
        figure: dict = {"pending_before": pending}
        deadline = began + RESTART_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if "listening on" in log.read_text(errors="replace")[offset:] and "listening_s" not in figure:
                figure["listening_s"] = round(time.monotonic() - began, 2)
            if "listening_s" in figure and self.pending() >= pending:
                figure["all_pending_s"] = round(time.monotonic() - began, 2)
                break
            time.sleep(0.1)
        if proc.poll() is None:
            figure["in_sync"] = asyncio.run(br.qq_wait_in_sync(self.access_point, self.master["address"], REPLICAS,
                                                               timeout=60)).get("inSyncReplicas")
            time.sleep(SAMPLE_EVERY_S)
            self.sample(label)
        else:
            figure["error"] = f"the restarted master exited with code {proc.returncode} (see {log})"
        figure["log"] = [line for line in log.read_text(errors="replace")[offset:].splitlines()
                         if re.search(r"timer|recovered|listening", line, re.IGNORECASE)][:20]
        self.figures.setdefault("restart", {})[label] = figure

    # ---- all -------------------------------------------------------------------------------------------

    def run(self):
        opts = self.opts
        started = time.monotonic()
        self.notes += common.settle(opts.wait_quiet)
        up, cluster, data, master, slaves = self.start_group(
            "qq-timers", opts.base_port,
            self.quorumq_sets(REPLICAS, "ASYNC_FLUSH", inSyncReplicas=IN_SYNC_REPLICAS), REPLICAS)
        try:
            if cluster is None:
                self.figures["error"] = "quorumq up did not come up"
            else:
                self.master, self.access_point = master, cluster["access_point"]
                self.broker_pids = [master["pid"]] + [slave["pid"] for slave in slaves]
                self.configure(self.access_point, cluster["cluster"])
                self.sample("fresh")
                if "tx" in opts.parts:
                    print("transactions against plain sends", flush=True)
                    self.transactions()
                if "lateness" in opts.parts:
                    for kind in opts.consumers_kind:
                        print("delivery lateness", flush=True)
                        self.lateness(kind)
                if "memory" in opts.parts:
                    print("memory with pending timers", flush=True)
                    self.sample("live, 0 pending")
                    self.restart("restarted, 0 pending")
                    self.fill()
                    self.restart("restarted, all pending")
                self.figures["slaves_memory"] = {s["address"]: memory(s["pid"]) for s in slaves
                                                 if common.pid_alive(s["pid"])}
        finally:
            if self.restarted is not None:
                common.stop_pid(self.restarted.pid, term_timeout=30)
            self.stop_quorumq(up, cluster, data)
            common.stop_all_started()
        self.report_timers(started)

    def precision_ms(self) -> int:
        for assignment in self.opts.quorumq_set:
            key, _, value = assignment.removeprefix("--set=").partition("=")
            if key == "timerPrecisionMs":
                return int(value)
        return TIMER_PRECISION_MS

    def table_rows(self) -> list[dict]:
        f, opts, rows = self.figures, self.opts, []
        target_ms = self.precision_ms() + LATENESS_SLACK_MS
        for threads in sorted({1, opts.threads}):
            plain, tx = f.get(f"plain_{threads}t"), f.get(f"transaction_{threads}t")
            if plain is None or tx is None:
                continue
            for name, res in (("plain Producer.send", plain), ("begin_transaction + send + commit", tx)):
                row = {"measurement": f"official {name}, {threads} thread{'s' * (threads > 1)}"}
                if "error" in res:
                    rows.append({**row, "result": "ERROR", "note": res["error"]})
                    continue
                vs = (f"; {res['rate'] / plain['rate']:.2f}x plain" if res is tx and plain.get("rate") else "")
                note = f"op p50/p99 {common.fmt_ms(res['p50_ms'])}/{common.fmt_ms(res['p99_ms'])} ms"
                if res is tx:
                    note += (f" (send p50 {common.fmt_ms(res['send_p50_ms'])}, commit p50 "
                             f"{common.fmt_ms(res['commit_p50_ms'])} ms)")
                if res["errors"]:
                    note += f"; errors {res['errors']}"
                rows.append({**row, "result": f"{common.fmt_rate(res['rate'])} msg/s{vs}", "note": note})
        consumers = {"official": f"{opts.consumer_processes} x {opts.consumers} SimpleConsumers, "
                                 f"receive({opts.receive_batch}), an ack each",
                     "pull": f"quorumq PullConsumer, a long-polling PullBatch({opts.receive_batch}) a queue"}
        for kind, described in consumers.items():
            late = f.get(f"lateness_{kind}")
            if late is None:
                continue
            row = {"measurement": f"delivery lateness, {opts.timers:,} timers due over {opts.window:g} s "
                                  f"({opts.sender_processes} send_async processes; {described})"}
            if "error" in late:
                rows.append({**row, "result": "ERROR", "note": late["error"]})
            else:
                rows.append({**row, "result": f"p50 {late['p50_ms']:.0f} / p99 {late['p99_ms']:.0f} / "
                                              f"max {late['max_ms']:.0f} ms",
                             "target": f"p99 <= {target_ms} ms " + ("met" if late["p99_ms"] <= target_ms else "MISSED"),
                             "note": (f"{late['received']:,} of {late['acked']:,} acknowledged arrived, "
                                      f"{late['early']} early, {late['duplicates']} duplicates; broker's store "
                                      f"time - due p50/p99/max {late['store_p50_ms']:.0f}/{late['store_p99_ms']:.0f}/"
                                      f"{late['store_max_ms']:.0f} ms; p50 by {BUCKET_S} s of due time "
                                      f"{'/'.join(map(str, late['p50_ms_by_due_bucket']))} ms; "
                                      f"CPU from the window's start to the last receive, in cores: master/slaves "
                                      f"{'/'.join(map(str, late['broker_cpu_share']))}, consumer processes "
                                      f"{'/'.join(map(str, late['consumer_cpu_share']))}, every process "
                                      f"{late['machine_busy_cores']} of {os.cpu_count()}; a receive that got "
                                      f"messages p50/p99 {late['receive_p50_ms']:.0f}/{late['receive_p99_ms']:.0f} ms, "
                                      f"{late['messages_a_receive']} messages; "
                                      + (f"an ack p50/p99 {late['ack_p50_ms']:.1f}/{late['ack_p99_ms']:.1f} ms; "
                                         if late["ack_samples"] else "")
                                      + f"sends {late['send_rate']:,.0f} msg/s, in "
                                      f"{late['sends_in_before_window_s']} s before the window"
                                      + (f"; {late['acked_after_due']} acked after due" if late["acked_after_due"]
                                         else "")
                                      + (f"; send errors {late['send_errors']}" if late["send_errors"] else ""))})
        rows += self.memory_rows()
        return rows

    def memory_rows(self) -> list[dict]:
        """A row for each RSS sample; those with timers pending against their 0-pending twin: live
        after the fill against live after (b), restarted against restarted."""
        f, rows = self.figures, []
        mem, restarts, fill = f.get("memory", {}), f.get("restart", {}), f.get("fill", {})
        twins = {"live, all pending": "live, 0 pending", "restarted, all pending": "restarted, 0 pending"}
        for label in ("fresh", "live, 0 pending", "live, all pending", "restarted, 0 pending",
                      "restarted, all pending"):
            m = mem.get(label)
            if m is None:
                continue
            row = {"measurement": f"master RSS, {label} ({m['timers_pending']:,} timers pending)",
                   "result": f"{m['rss_mb']:.0f} MB (heap {m['anon_mb']:.0f} MB)"}
            notes = []
            base = mem.get(twins.get(label, ""))
            if base and m["timers_pending"] > base["timers_pending"]:
                growth, count = m["rss_mb"] - base["rss_mb"], m["timers_pending"] - base["timers_pending"]
                at_million = growth * 1_000_000 / count
                row["target"] = (f"<= +{MEMORY_TARGET_MB} MB at 1,000,000: "
                                 + (f"+{growth:.0f} MB" if count >= 1_000_000 else f"+{at_million:.0f} MB pro rata")
                                 + (" met" if at_million <= MEMORY_TARGET_MB else " MISSED"))
                notes.append(f"+{growth:.0f} MB (heap +{m['anon_mb'] - base['anon_mb']:.0f} MB) over {twins[label]}, "
                             f"{growth * 2**20 / count:,.0f} B a timer")
            if label == "live, all pending" and "acked" in fill:
                notes.append(f"{fill['acked']:,} sent in {fill['seconds']} s ({fill['rate']:,.0f} msg/s, "
                             f"{self.opts.fill_processes} send_async processes); least-squares slope over the fill "
                             f"{fill['rss_slope_bytes_per_timer']} B a timer "
                             f"(heap {fill['heap_slope_bytes_per_timer']})"
                             + (f"; send errors {fill['errors']}" if fill["errors"] else ""))
            restart = restarts.get(label)
            if restart:
                notes.append(f"open: listening after {restart.get('listening_s')} s, every timer pending after "
                             f"{restart.get('all_pending_s')} s"
                             + (f"; {restart['error']}" if "error" in restart else ""))
            rows.append({**row, "note": "; ".join(notes)})
        return rows

    def report_timers(self, started: float) -> None:
        opts = self.opts
        columns = [("measurement", "measurement"), ("result", "result"), ("target", "target"), ("note", "note")]
        title = (f"{opts.body_size} B bodies, R{REPLICAS} inSyncReplicas {IN_SYNC_REPLICAS} ASYNC_FLUSH, "
                 f"{opts.queues} queues a topic, one run, {os.cpu_count()} cpus shared by clients and servers")
        rows = self.table_rows()
        print()
        table = common.print_table(rows, columns, title=title)
        for note in self.notes:
            print("note:", note)
        path = common.write_results(NAME, {
            "options": vars(opts), "title": title, "table": table, "rows": rows,
            "targets": {"lateness": f"p99 <= timerPrecisionMs ({self.precision_ms()}) + {LATENESS_SLACK_MS} ms",
                        "memory": f"<= +{MEMORY_TARGET_MB} MB with 1,000,000 timers pending"},
            "figures": self.figures, "server_commands": self.commands, "notes": self.notes,
            "workdir": str(self.workdir), "wall_seconds": round(time.monotonic() - started, 1)})
        print(f"\nwrote {path} (worker logs in {self.workdir}; {time.monotonic() - started:.0f} s)")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        bench_fifo.bf.worker_main(sys.argv[2], sys.argv[3], WORKERS)
        return
    p = argparse.ArgumentParser(description="quorumq timer and transaction benchmark (see the module docstring)")
    p.add_argument("--parts", default="tx,lateness,memory", type=lambda s: set(s.split(",")),
                   help="comma-separated subset of tx,lateness,memory (default: all)")
    common.add_up_options(p, 62000, "quorumq up uses P..P+199")
    p.add_argument("--body-size", type=int, default=1024, help="bytes a message body (default 1024)")
    p.add_argument("--queues", type=int, default=8, help="read and write queues of each topic (default 8)")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each send measurement of (a)")
    p.add_argument("--threads", type=int, default=4, help="threads of (a)'s second pair of rows (default 4)")
    p.add_argument("--timers", type=int, default=100_000, help="timers of (b) (default 100,000)")
    p.add_argument("--window", type=float, default=60.0, help="seconds over which (b)'s timers are due")
    p.add_argument("--lead", type=float,
                   help="seconds from the first send to the window's start (default: timers / 1,500 + 20)")
    p.add_argument("--grace", type=float, default=120.0, help="longest wait for (b)'s timers after the window")
    p.add_argument("--sender-processes", type=int, default=3, help="processes sending (b)'s timers")
    p.add_argument("--send-window", type=int, default=256, help="send_async calls in flight a process")
    p.add_argument("--consumer-processes", type=int, default=2, help="processes of SimpleConsumers (default 2)")
    p.add_argument("--consumers", type=int, default=8, help="SimpleConsumers in each process (default 8)")
    p.add_argument("--consumers-kind", default="official,pull", type=lambda s: s.split(","),
                   help="(b) once with each of these consumers, in turn: official,pull (default both)")
    p.add_argument("--receive-batch", type=int, default=32, help="max messages a receive asks for (default 32)")
    p.add_argument("--fill-timers", type=int, default=1_000_000, help="timers (c) leaves pending (default 1,000,000)")
    p.add_argument("--fill-processes", type=int, default=3, help="processes sending (c)'s timers")
    p.add_argument("--fill-seconds", type=float, default=600.0, help="longest (c)'s sends may take (default 600)")
    p.add_argument("--py-spy", metavar="PATH",
                   help="sample the master with this py-spy binary during (b)'s window (the JSON keeps the hottest "
                        "functions; sampling slows the master: do not quote the figures of such a run)")
    br.add_segment_option(p)
    opts = p.parse_args()
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
