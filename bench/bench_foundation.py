"""Foundation benchmark: produce and consume on one broker, 1 KiB bodies, side by side in one run.

  (a) NATS JetStream (Debian's nats-server, 1 replica, file store) with nats-py:
      sync publish, async-ack publish (js.publish_async), lean pipeline publish, pull consume.
  (b) quorumq, one broker, ASYNC_FLUSH and SYNC_FLUSH (`quorumq up`), with quorumq's own client:
      batch send (many messages per request, several requests in flight), single send latency,
      pull consume by offset.
  (c) the official rocketmq-python-client against the same quorumq broker (sync send, and send_async
      with a window while client and broker are each pinned to one core), and against an empty gRPC
      server (bench/fake_v5_server.py) to show the client's own ceiling.

Every client measurement runs in its own fresh Python process (`bench_foundation.py _worker KIND
JSON`), bounded in time; servers are started by this script on 127.0.0.1 and stopped by pid at the end,
also on failure. The bench never asserts: it prints a table and writes bench/results/foundation.json.

    .venv/bin/python bench/bench_foundation.py              # everything, about 3 minutes
    .venv/bin/python bench/bench_foundation.py --parts nats,fake --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import HOST, PYTHON, ROOT  # noqa: E402

BODY_SIZE = 1024
WARMUP = 200
NAME = "foundation"
TARGETS = {
    "quorumq_client_send": 60_000,  # NATS JetStream 1-replica lean pipeline on this kind of machine
    "pull_consume": 50_000,
    "official_send_async": 2_500,
}


def body() -> bytes:
    return (b"0123456789abcdef" * (BODY_SIZE // 16 + 1))[:BODY_SIZE]


class ServerCpu:
    """CPU seconds used by the server processes between start() and stop(), read from /proc."""

    def __init__(self, pids):
        self.pids = list(pids or [])
        self.start_values = self.end_values = [0.0] * len(self.pids)

    def _read(self) -> list[float]:
        return [common.cpu_seconds(p) for p in self.pids]

    def start(self):
        self.start_values = self._read()

    def stop(self):
        self.end_values = self._read()

    def used(self) -> float | None:
        return sum(self.per_pid()) if self.pids else None

    def per_pid(self) -> list[float]:
        """CPU seconds of each server process, in the order of `pids`."""
        return [end - start for start, end in zip(self.start_values, self.end_values)]


def finish(result: dict, count: int, elapsed: float, cpu0: float, server: ServerCpu) -> dict:
    server.stop()
    result.update(messages=count, seconds=round(elapsed, 3),
                  rate=round(count / elapsed, 1) if elapsed > 0 else 0.0)
    client_cpu = time.process_time() - cpu0
    if count:
        result["client_cpu_us_per_msg"] = round(client_cpu / count * 1e6, 1)
        used = server.used()
        if used is not None:
            result["server_cpu_us_per_msg"] = round(used / count * 1e6, 1)
        if len(server.pids) > 1:  # in the order of args["server_pids"]
            result["server_cpu_us_per_msg_each"] = [round(u / count * 1e6, 1) for u in server.per_pid()]
    result["client_cpu_share"] = round(client_cpu / elapsed, 2) if elapsed > 0 else None
    if server.used() is not None and elapsed > 0:
        result["server_cpu_share"] = round(server.used() / elapsed, 2)
    return result


# ==================================================================================================
# Workers (run in a fresh process each)

# ---- NATS JetStream ------------------------------------------------------------------------------

STREAM = "BENCH"
SUBJECT = "bench.foundation"


async def _nats_connect(args):
    """Connect to args["servers"] (URLs, tried in order) or to args["port"] on HOST, and make sure the
    stream exists (args["replicas"] copies, default 1)."""
    import nats
    servers = args.get("servers") or [f"nats://{HOST}:{args['port']}"]
    nc = await nats.connect(servers, allow_reconnect=False, max_reconnect_attempts=0, dont_randomize=True)
    js = nc.jetstream(timeout=10)
    try:
        await js.add_stream(name=STREAM, subjects=["bench.>"], storage="file", num_replicas=args.get("replicas", 1))
    except Exception:  # noqa: BLE001 - already exists
        pass
    return nc, js


async def w_nats_sync(args):
    """One publish at a time: js.publish() waits for the PubAck before the next one."""
    nc, js = await _nats_connect(args)
    payload = body()
    for _ in range(WARMUP):
        await js.publish(SUBJECT, payload)
    server = ServerCpu(args.get("server_pids"))
    lat = []
    server.start()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + args["seconds"]
    now = t0
    while now < deadline:
        await js.publish(SUBJECT, payload)
        t = time.perf_counter()
        lat.append(t - now)
        now = t
    result = finish({}, len(lat), now - t0, cpu0, server)
    result.update(common.latency_summary(lat))
    await nc.close()
    return result


async def w_nats_async(args):
    """js.publish_async(): one future per message (nats-py keeps at most `window` unacked)."""
    nc, js = await _nats_connect(args)
    js._publish_async_pending_semaphore = asyncio.Semaphore(args["window"])
    payload = body()
    for _ in range(WARMUP):
        await js.publish(SUBJECT, payload)
    done = [0, 0]  # ok, errors

    def on_done(fut):
        if fut.cancelled() or fut.exception() is not None:
            done[1] += 1
        else:
            done[0] += 1

    server = ServerCpu(args.get("server_pids"))
    server.start()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + args["seconds"]
    sent = 0
    while time.perf_counter() < deadline:
        fut = await js.publish_async(SUBJECT, payload)
        fut.add_done_callback(on_done)
        sent += 1
    await asyncio.wait_for(js.publish_async_completed(), 30)
    elapsed = time.perf_counter() - t0
    result = finish({"window": args["window"], "errors": done[1]}, done[0], elapsed, cpu0, server)
    await nc.close()
    return result


async def w_nats_lean(args):
    """Lean pipeline: core-NATS publishes to the stream's subject with a reply subject, all replies on
    ONE plain subscription (no per-message future, no per-message inbox); a counter bounds the
    messages in flight to `window` (stop publishing when full, resume when half drained). JetStream
    answers each publish with a PubAck, in order; an ack containing "error" is counted as an error."""
    nc, js = await _nats_connect(args)
    payload = body()
    for _ in range(WARMUP):
        await js.publish(SUBJECT, payload)
    window = args["window"]
    low = window // 2
    ack_subject = "_BENCHACK." + nc._nuid.next().decode()
    state = {"acked": 0, "errors": 0}
    sent_at = deque()  # publish times, popped in ack order (acks come back in publish order)
    lat = []
    room = asyncio.Event()
    room.set()

    async def on_ack(msg):
        if b"error" in msg.data:
            state["errors"] += 1
        state["acked"] += 1
        lat.append(time.perf_counter() - sent_at.popleft())
        if not room.is_set() and sent - state["acked"] <= low:
            room.set()

    await nc.subscribe(ack_subject, cb=on_ack, pending_msgs_limit=10 * window)
    server = ServerCpu(args.get("server_pids"))
    server.start()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + args["seconds"]
    sent = 0
    publish = nc.publish
    while True:
        now = time.perf_counter()
        if now >= deadline:
            break
        for _ in range(64):
            if sent - state["acked"] >= window:
                break
            sent_at.append(now)
            await publish(SUBJECT, payload, reply=ack_subject)
            sent += 1
        if sent - state["acked"] >= window:
            room.clear()
            await room.wait()
        else:
            await asyncio.sleep(0)
    drain_deadline = time.perf_counter() + 30
    while state["acked"] < sent and time.perf_counter() < drain_deadline:
        await asyncio.sleep(0.001)
    elapsed = time.perf_counter() - t0
    ok = state["acked"] - state["errors"]
    result = finish({"window": window, "errors": state["errors"], "unacked": sent - state["acked"]},
                    ok, elapsed, cpu0, server)
    summary = common.latency_summary(lat)
    result.update({f"pipelined_{k}": v for k, v in summary.items() if k != "samples"})
    await nc.close()
    return result


async def w_nats_pull(args):
    """Pull consumer (durable, deliver all, AckPolicy.ALL) reading the stream from its start with
    fetch(batch); one ack per batch (its last message), like a consumer committing an offset per batch."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    nc, js = await _nats_connect(args)
    info = await js.stream_info(STREAM)
    available = info.state.messages
    sub = await js.pull_subscribe(SUBJECT, durable="bench-pull", stream=STREAM,
                                  config=ConsumerConfig(ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL,
                                                        max_ack_pending=-1))
    batch = args["batch"]
    server = ServerCpu(args.get("server_pids"))
    server.start()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + args["seconds"]
    count = 0
    nbytes = 0
    while time.perf_counter() < deadline and count < available:
        try:
            msgs = await sub.fetch(batch, timeout=2)
        except Exception:  # noqa: BLE001 - a timeout means nothing left
            break
        for m in msgs:
            nbytes += len(m.data)
        count += len(msgs)
        await msgs[-1].ack()
    elapsed = time.perf_counter() - t0
    result = finish({"batch": batch, "available": available, "bytes": nbytes}, count, elapsed, cpu0, server)
    await nc.close()
    return result


# ---- The official rocketmq-python-client ---------------------------------------------------------


def _official_producer(args):
    from rocketmq import ClientConfiguration, Credentials, Producer
    config = ClientConfiguration(args["access_point"], Credentials(), request_timeout=10)
    producer = Producer(config, (args["topic"],))
    producer.startup()
    return producer


def message_group(args: dict, index: int) -> str | None:
    """The message group of a worker's `index`-th message: one of args["groups"] in turn (bench_fifo.py),
    or none when the worker is given no groups."""
    groups = args.get("groups")
    return f"group-{index % groups}" if groups else None


def _official_message(topic: str, payload: bytes, group: str | None = None):
    from rocketmq import Message
    msg = Message()
    msg.topic = topic
    msg.body = payload
    if group:
        msg.message_group = group
    return msg


def w_official_sync(args):
    """Producer.send(): one message at a time, each waits for its SendReceipt."""
    producer = _official_producer(args)
    topic, payload = args["topic"], body()
    try:
        for _ in range(WARMUP):
            producer.send(_official_message(topic, payload))
        server = ServerCpu(args.get("server_pids"))
        lat = []
        errors = 0
        server.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + args["seconds"]
        now = t0
        while now < deadline:
            msg = _official_message(topic, payload)
            try:
                producer.send(msg)
            except Exception:  # noqa: BLE001
                errors += 1
            t = time.perf_counter()
            lat.append(t - now)
            now = t
        result = finish({"errors": errors}, len(lat) - errors, now - t0, cpu0, server)
        result.update(common.latency_summary(lat))
        return result
    finally:
        _quiet_shutdown(producer)


def w_official_async(args):
    """Producer.send_async(): at most `window` sends in flight (a semaphore released by each future's
    done callback); a new Message object per send, as an application would; with args["groups"], the
    messages go to that many message groups in turn (a FIFO topic)."""
    producer = _official_producer(args)
    topic, payload = args["topic"], body()
    window = args["window"]
    try:
        for index in range(WARMUP):
            producer.send(_official_message(topic, payload, message_group(args, index)))
        slots = threading.Semaphore(window)
        lock = threading.Lock()
        done = [0, 0]  # ok, errors
        last = [0.0]

        def on_done(fut):
            ok = fut.exception() is None
            with lock:
                done[0 if ok else 1] += 1
                last[0] = time.perf_counter()
            slots.release()

        server = ServerCpu(args.get("server_pids"))
        server.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + args["seconds"]
        sent = 0
        while time.perf_counter() < deadline:
            slots.acquire()
            producer.send_async(_official_message(topic, payload, message_group(args, sent))).add_done_callback(on_done)
            sent += 1
        for _ in range(window):  # drain: take back every slot
            if not slots.acquire(timeout=30):
                break
        elapsed = time.perf_counter() - t0
        result = finish({"window": window, "errors": done[1]}, done[0], elapsed, cpu0, server)
        result["affinity"] = sorted(os.sched_getaffinity(0))
        return result
    finally:
        _quiet_shutdown(producer)


def _quiet_shutdown(producer):
    t = threading.Thread(target=producer.shutdown, daemon=True)
    t.start()
    t.join(10)


# ---- quorumq's own client ------------------------------------------------------------------------


def failure_name(error: Exception) -> str:
    """How a send that raised is counted among the statuses: the client's error name, else the type."""
    name = getattr(error, "name", None)
    return f"raised {name}" if isinstance(name, str) else f"raised {type(error).__name__}"


async def w_qq_batch(args):
    """quorumq.client.Producer(window=inflight).send_batch(topic, [batch x Message(1 KiB)]): `inflight`
    asyncio tasks each loop send_batch until the deadline, so `inflight` requests are on the wire;
    the producer spreads requests over the topic's queues round-robin. With args["groups"] the
    messages go to that many message groups in turn, and the producer splits each batch by the
    groups' queues (a FIFO topic). With args["credentials"] ([access key, secret key]) it signs every
    call; only then is `credentials=` passed, which older trees do not know."""
    from quorumq.client import Message, Producer
    topic, payload, batch, inflight = args["topic"], body(), args["batch"], args["inflight"]
    signing = {}
    if args.get("credentials"):
        from quorumq.client import Credentials
        signing["credentials"] = Credentials(*args["credentials"])
    async with Producer(args["access_point"], window=inflight, **signing) as producer:
        sent = 0

        def messages() -> list[Message]:
            nonlocal sent
            sent += batch
            if not args.get("groups"):  # a tree older than message groups knows no message_group
                return [Message(payload) for _ in range(batch)]
            return [Message(payload, message_group=message_group(args, index)) for index in range(sent - batch, sent)]

        for _ in range(max(1, WARMUP // batch) + 2):
            await producer.send_batch(topic, messages())
        server = ServerCpu(args.get("server_pids"))
        state = {"ok": 0, "errors": 0, "error": None}
        statuses = Counter()  # send status (or exception name) -> messages
        lat = []

        async def loop_sender(deadline):
            while time.perf_counter() < deadline:
                outgoing = messages()
                t = time.perf_counter()
                try:
                    results = await producer.send_batch(topic, outgoing)
                except Exception as e:  # noqa: BLE001
                    state["errors"] += batch
                    state["error"] = repr(e)
                    statuses[failure_name(e)] += batch
                    await asyncio.sleep(0.01)
                    continue
                lat.append(time.perf_counter() - t)
                statuses.update(r.status for r in results)
                ok = sum(1 for r in results if r.ok)
                state["ok"] += ok
                if ok != len(results):
                    state["errors"] += len(results) - ok
                    state["error"] = next(f"{r.status} {r.detail}" for r in results if not r.ok)

        server.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(loop_sender(t0 + args["seconds"]) for _ in range(inflight)))
        elapsed = time.perf_counter() - t0
        result = finish({"batch": batch, "inflight": inflight, "errors": state["errors"],
                         "last_error": state["error"], "statuses": dict(statuses)}, state["ok"], elapsed, cpu0,
                        server)
        summary = common.latency_summary(lat)
        result.update({f"request_{k}": v for k, v in summary.items() if k != "samples"})
    return result


async def w_qq_single(args):
    """quorumq.client.Producer.send_batch(topic, [one Message(1 KiB)]), one after the other."""
    from quorumq.client import Message, Producer
    topic, payload = args["topic"], body()
    async with Producer(args["access_point"], window=1) as producer:
        for _ in range(WARMUP):
            await producer.send_batch(topic, [Message(payload)])
        server = ServerCpu(args.get("server_pids"))
        lat = []
        errors = 0
        last_error = None
        statuses = Counter()
        server.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + args["seconds"]
        now = t0
        while now < deadline:
            try:
                results = await producer.send_batch(topic, [Message(payload)])
                statuses[results[0].status] += 1
                if not results[0].ok:
                    errors += 1
                    last_error = f"{results[0].status} {results[0].detail}"
            except Exception as e:  # noqa: BLE001
                errors += 1
                last_error = repr(e)
                statuses[failure_name(e)] += 1
            t = time.perf_counter()
            lat.append(t - now)
            now = t
        result = finish({"errors": errors, "last_error": last_error, "statuses": dict(statuses)},
                        len(lat) - errors, now - t0, cpu0, server)
        result.update(common.latency_summary(lat))
    return result


async def w_qq_pull(args):
    """quorumq.client.PullConsumer.pull(topic, queue_id, offset, batch): every readable queue of the
    topic from offset 0 (the broker starts at the queue's min offset). `inflight` asyncio tasks share
    the queues (task i reads queues i, i+inflight, ...), each with one pull in flight, queue after
    queue round-robin, for at most `seconds` or until every queue answers with no message."""
    from quorumq.client import FOUND, PullConsumer
    topic, batch, inflight = args["topic"], args["batch"], args.get("inflight", 1)
    async with PullConsumer(args["access_point"], args["group"]) as consumer:
        queues = [q.queue_id for q in await consumer.queues(topic)]
        server = ServerCpu(args.get("server_pids"))
        state = {"count": 0, "bytes": 0, "live": 0}

        async def reader(mine, deadline):
            offsets = {q: 0 for q in mine}
            live = list(mine)
            while live and time.perf_counter() < deadline:
                for q in list(live):
                    res = await consumer.pull(topic, q, offsets[q], batch)
                    if res.status != FOUND or not res.messages:
                        live.remove(q)
                        continue
                    state["count"] += len(res.messages)
                    for m in res.messages:
                        state["bytes"] += len(m.body)
                    offsets[q] = res.next_offset
            state["live"] += len(live)

        server.start()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(reader(queues[i::inflight], t0 + args["seconds"]) for i in range(inflight)))
        elapsed = time.perf_counter() - t0
        result = finish({"batch": batch, "inflight": inflight, "queues": len(queues), "bytes": state["bytes"],
                         "drained": state["live"] == 0}, state["count"], elapsed, cpu0, server)
    return result


WORKERS = {
    "nats-sync": w_nats_sync,
    "nats-async": w_nats_async,
    "nats-lean": w_nats_lean,
    "nats-pull": w_nats_pull,
    "official-sync": w_official_sync,
    "official-async": w_official_async,
    "qq-batch": w_qq_batch,
    "qq-single": w_qq_single,
    "qq-pull": w_qq_pull,
}


def worker_main(kind: str, args_json: str, workers: dict | None = None) -> None:
    args = json.loads(args_json)
    fn = (workers or WORKERS)[kind]
    try:
        result = asyncio.run(fn(args)) if asyncio.iscoroutinefunction(fn) else fn(args)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        result = {"error": f"{kind}: {e!r}"}
    common.emit_result(result)
    sys.stdout.flush()
    os._exit(0)  # the official client leaves non-daemon threads behind


# ==================================================================================================
# Orchestration


class Bench:
    worker_script = Path(__file__).resolve()  # runs `SCRIPT _worker KIND JSON` (a subclass may use its own)

    def __init__(self, opts):
        self.opts = opts
        self.workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="bench-foundation-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "workers.log"
        self.rows: list[dict] = []
        self.measured: dict[tuple[str, str], dict] = {}  # (system, measurement) -> runs, target, ...
        self.notes: list[str] = []
        self.results: dict[str, list[dict]] = {}  # worker key -> one result per round
        self.round = 0
        self.commands: dict[str, str] = {}  # how each server was started
        self.src = ROOT / "src"  # the quorumq code the servers and the client workers run

    def worker(self, key: str, kind: str, args: dict, *, cpus: str | None = None, profile: bool = False,
               timeout: float | None = None, env: dict[str, str] | None = None) -> dict:
        """Run one measurement in a fresh worker process (killed after `timeout`, default --seconds + 60,
        with `env` added to its environment); with --py-spy and `profile`, sample the servers and the
        worker meanwhile and summarise where the time went."""
        args = {"seconds": self.opts.seconds, **args}
        argv = [PYTHON, self.worker_script, "_worker", kind, json.dumps(args)]
        spies = []
        if profile and self.opts.py_spy:
            pdir = self.workdir / "profiles"
            pdir.mkdir(exist_ok=True)
            argv = common.py_spy_wrap(self.opts.py_spy, pdir / f"{key}-client.txt", argv)
            spies = [(f"{key}-server-{pid}",
                      common.py_spy_attach(self.opts.py_spy, pid, pdir / f"{key}-server-{pid}.txt"))
                     for pid in args.get("server_pids", [])]
        busy = common.cpu_busy(0.3, exclude=args.get("server_pids", []))
        print(f"  {key} ...", end=" ", flush=True)
        try:
            res = common.run_worker(argv, label=key, timeout=timeout or self.opts.seconds + 60, log=self.log,
                                    cpus=cpus, env={**common.code_env(self.src), **(env or {})})
        finally:
            for _, spy in spies:
                common.py_spy_stop(spy)
        if profile and self.opts.py_spy:
            pdir = self.workdir / "profiles"
            res["profiles"] = {name: common.summarize_collapsed(pdir / f"{name}.txt")
                               for name in [f"{key}-client"] + [n for n, _ in spies]}
        res["cpu_busy_before"] = busy
        if busy > 0.3:
            self.notes.append(f"{key} (round {self.round + 1}): other processes kept the cpus {busy:.0%} busy "
                              "just before it started")
        self.results.setdefault(key, []).append(res)
        print(res.get("error") or f"{common.fmt_rate(res.get('rate'))} msg/s", flush=True)
        return res

    def row(self, system, measurement, res, *, target=None, note="", latency=True):
        """Record one run of a table row; the table shows the run with the median rate."""
        entry = self.measured.setdefault((system, measurement), {"runs": [], "target": target, "latency": latency})
        entry["runs"].append((res, note))

    def build_rows(self) -> None:
        self.rows = []
        for (system, measurement), entry in self.measured.items():
            runs = entry["runs"]
            good = sorted((r for r in runs if "error" not in r[0]), key=lambda r: r[0].get("rate", 0))
            res, note = good[(len(good) - 1) // 2] if good else runs[0]
            target, rates = entry["target"], [r[0].get("rate") for r in runs]
            if len(runs) > 1:
                note = (note + "; " if note else "") + "rates " + "/".join(common.fmt_rate(x) for x in rates)
            self.rows.append({
                "system": system,
                "measurement": measurement,
                "msg/s": "ERROR" if "error" in res else common.fmt_rate(res.get("rate")),
                "p50 ms": common.fmt_ms(res.get("p50_ms")) if entry["latency"] else "-",
                "p99 ms": common.fmt_ms(res.get("p99_ms")) if entry["latency"] else "-",
                "client us/msg": res.get("client_cpu_us_per_msg", "-"),
                "server us/msg": res.get("server_cpu_us_per_msg", "-"),
                "target": (f">= {common.fmt_rate(target)}" + (" met" if res.get("rate", 0) >= target else " MISSED"))
                if target else "",
                "note": res.get("error", note) if "error" in res else note,
                "rate": res.get("rate"),
                "rates": rates,
            })

    # ---- NATS ------------------------------------------------------------------------------------

    def run_nats(self):
        exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        port = self.opts.base_port + 90
        store = self.workdir / "nats-store"
        store.mkdir(exist_ok=True)
        print(f"NATS JetStream (nats-server on {HOST}:{port}, store {store})", flush=True)
        argv = [exe, "-js", "-a", HOST, "-p", port, "-sd", store, "-n", "bench-nats"]
        self.commands["nats-server"] = shlex.join(map(str, argv))
        proc = common.start(argv, label="nats-server", log=self.workdir / "nats-server.log")
        try:
            if not common.wait_port(port, proc=proc):
                self.notes.append(f"nats-server did not start (see {self.workdir / 'nats-server.log'})")
                for m in ("sync publish", "async-ack publish", "lean pipeline publish", "pull consume"):
                    self.row("NATS JetStream R1 file", m, {"error": "nats-server did not start"})
                return
            base = {"port": port, "server_pids": [proc.pid]}
            w = self.opts.nats_window
            r = self.worker("nats_sync", "nats-sync", base)
            self.row("NATS JetStream R1 file", "sync publish (js.publish, 1 in flight)", r)
            r = self.worker("nats_async", "nats-async", {**base, "window": w})
            self.row("NATS JetStream R1 file", f"async-ack publish (js.publish_async, <= {w} in flight)", r)
            r = self.worker("nats_lean", "nats-lean", {**base, "window": w})
            self.row("NATS JetStream R1 file", f"lean pipeline publish (<= {w} in flight, 1 ack sub)", r,
                     note=f"ack latency under load p50/p99 {r.get('pipelined_p50_ms', '-')}/"
                          f"{r.get('pipelined_p99_ms', '-')} ms" if "error" not in r else "")
            r = self.worker("nats_pull", "nats-pull", {**base, "batch": self.opts.pull_batch})
            self.row("NATS JetStream R1 file", f"pull consume (fetch {self.opts.pull_batch}, ack per batch)", r)
        finally:
            common.stop_pid(proc.pid, term_timeout=10)
            if not self.opts.keep:
                shutil.rmtree(store, ignore_errors=True)

    # ---- the empty server --------------------------------------------------------------------------

    def run_fake(self):
        port = self.opts.base_port + 91
        print(f"empty gRPC server (bench/fake_v5_server.py on {HOST}:{port})", flush=True)
        argv = [PYTHON, common.BENCH_DIR / "fake_v5_server.py", "--port", port]
        self.commands["fake server"] = shlex.join(map(str, argv))
        proc = common.start(argv, label="fake-server", log=self.workdir / "fake-server.log")
        try:
            if not common.wait_port(port, proc=proc):
                self.notes.append("fake_v5_server did not start")
                return
            base = {"access_point": f"{HOST}:{port}", "topic": "BenchFake", "server_pids": [proc.pid]}
            r = self.worker("fake_official_sync", "official-sync", base)
            self.row("empty gRPC server", "official Producer.send (sync)", r)
            common.pin(proc.pid, self.opts.server_cpu)
            try:
                r = self.worker("fake_official_async", "official-async", {**base, "window": self.opts.official_window},
                                cpus=self.opts.client_cpu)
            finally:
                common.pin(proc.pid, None)
            self.row("empty gRPC server", f"official send_async (window {self.opts.official_window}, pinned)", r,
                     note="the client's own ceiling")
        finally:
            common.stop_pid(proc.pid, term_timeout=5)

    # ---- quorumq ---------------------------------------------------------------------------------

    def start_quorumq(self, name: str, port: int, up_args) -> tuple[subprocess.Popen, dict | None, Path]:
        """`quorumq up --dir WORKDIR/NAME --base-port PORT UP_ARGS...` (a fresh data dir); returns the
        `up` process, its cluster.json once every process listens (None if it did not come up) and the
        data dir. Stop it with `stop_quorumq`."""
        data = self.workdir / name
        if data.exists():
            shutil.rmtree(data)
        data.mkdir(parents=True)
        argv = [PYTHON, "-m", "quorumq.cli.main", "up", "--dir", data, "--base-port", port, *up_args]
        self.commands[f"quorumq up {name}"] = shlex.join(map(str, argv))
        up = common.start(argv, label=f"quorumq-up-{name}", log=self.workdir / f"{name}-up.log", cwd=ROOT,
                          env=common.code_env(self.src))
        return up, self._wait_cluster(data / "cluster.json", up, timeout=60), data

    def stop_quorumq(self, up: subprocess.Popen, cluster: dict | None, data: Path) -> None:
        """Stop `up` (it stops its processes), SIGKILL whatever is left and delete the data dir."""
        common.stop_pid(up.pid, term_timeout=15)
        common.kill_pids([p["pid"] for p in (cluster or {}).get("processes", [])])
        if not self.opts.keep:
            shutil.rmtree(data, ignore_errors=True)

    def run_quorumq(self, flush: str, port: int):
        system = f"quorumq {flush}"
        name = f"quorumq-{flush.lower()}"
        print(f"quorumq, flushDiskType={flush} (quorumq up --dir {self.workdir / name} --base-port {port})",
              flush=True)
        # No dashboard and no metrics, as the published figures were measured (--set can turn them on).
        up, cluster, data = self.start_quorumq(name, port, ["--no-dashboard", "--set", "metricsExporterType=DISABLE",
                                                            "--set", f"flushDiskType={flush}", *self.opts.quorumq_set])
        pids = []
        try:
            if cluster is None:
                msg = f"quorumq up did not come up (see {self.workdir / f'{name}-up.log'})"
                self.notes.append(msg)
                self.row(system, "everything", {"error": msg})
                return
            pids = [p["pid"] for p in cluster["processes"]]
            broker_pids = [p["pid"] for p in cluster["processes"] if p["kind"] == "broker"]
            ap = cluster["access_point"]
            base = {"access_point": ap, "server_pids": broker_pids}
            topic = f"BenchQ{flush.split('_')[0].capitalize()}"
            b, n = self.opts.batch, self.opts.inflight
            r = self.worker(f"qq_{flush}_batch", "qq-batch", {**base, "topic": topic, "batch": b, "inflight": n},
                            profile=True)
            self.row(system, f"quorumq Producer.send_batch ({b}/request, {n} in flight)", r,
                     target=TARGETS["quorumq_client_send"],
                     note=f"request p50/p99 {r.get('request_p50_ms', '-')}/{r.get('request_p99_ms', '-')} ms"
                          + self._vs_nats_lean(r) if "error" not in r else "", latency=False)
            r = self.worker(f"qq_{flush}_single", "qq-single", {**base, "topic": topic}, profile=True)
            self.row(system, "quorumq single send (1 message, 1 in flight)", r)
            r = self.worker(f"qq_{flush}_pull", "qq-pull", {**base, "topic": topic, "group": "BenchPull",
                                                            "batch": self.opts.pull_batch,
                                                            "inflight": self.opts.pull_inflight}, profile=True)
            self.row(system, f"quorumq PullConsumer.pull ({self.opts.pull_batch}/request, "
                             f"{self.opts.pull_inflight} in flight)", r,
                     target=TARGETS["pull_consume"])
            otopic = topic + "Official"
            r = self.worker(f"qq_{flush}_official_sync", "official-sync", {**base, "topic": otopic})
            self.row(system, "official Producer.send (sync)", r)
            for pid in pids:
                common.pin(pid, self.opts.server_cpu)
            try:
                r = self.worker(f"qq_{flush}_official_async", "official-async",
                                {**base, "topic": otopic, "window": self.opts.official_window},
                                cpus=self.opts.client_cpu, profile=True)
            finally:
                for pid in pids:
                    common.pin(pid, None)
            self.row(system, f"official send_async (window {self.opts.official_window}, pinned)", r,
                     target=TARGETS["official_send_async"])
        finally:
            self.stop_quorumq(up, cluster, data)

    def _vs_nats_lean(self, r: dict) -> str:
        lean = (self.results.get("nats_lean") or [{}])[-1].get("rate")
        return f"; {r['rate'] / lean:.2f}x NATS lean this run" if lean and r.get("rate") is not None else ""

    @staticmethod
    def _wait_cluster(path: Path, up: subprocess.Popen, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if up.poll() is not None:
                return None
            try:
                cluster = json.loads(path.read_text())
            except (OSError, ValueError):
                cluster = None
            if cluster and cluster.get("access_point") and any(p.get("kind") == "broker"
                                                                 for p in cluster.get("processes", [])):
                ports = [int(p["address"].rpartition(":")[2]) for p in cluster["processes"]]
                ports.append(int(cluster["access_point"].rpartition(":")[2]))
                if all(common.wait_port(p, timeout=max(0.1, deadline - time.monotonic()), proc=up) for p in ports):
                    time.sleep(0.5)  # let the broker register with the name server
                    return cluster
            time.sleep(0.1)
        return None

    # ---- all -------------------------------------------------------------------------------------

    def report(self, name: str, columns, title: str, targets: dict, started: float) -> None:
        """Print the table and notes; write bench/results/<name>.json with every raw figure."""
        print()
        table = common.print_table(self.rows, columns, title=title)
        for note in self.notes:
            print("note:", note)
        machine = common.machine_info(tools={"nats_server_version": ["nats-server", "--version"]})
        path = common.write_results(name, {
            "body_size": BODY_SIZE,
            "seconds_per_measurement": self.opts.seconds,
            "options": {k: sorted(v) if isinstance(v, set) else v for k, v in vars(self.opts).items()},
            "targets": targets,
            "title": title,
            "table": table,
            "rows": self.rows,
            "server_commands": self.commands,
            "results": self.results,
            "notes": self.notes,
            "workdir": str(self.workdir),
            "wall_seconds": round(time.monotonic() - started, 1),
        }, machine=machine)
        print(f"\nwrote {path} (worker logs in {self.workdir}; {time.monotonic() - started:.0f} s)")

    def run(self):
        parts = self.opts.parts
        started = time.monotonic()
        self.notes += common.settle(self.opts.wait_quiet)
        try:
            for round_index in range(self.opts.repeat):
                self.round = round_index
                if self.opts.repeat > 1:
                    print(f"--- round {self.round + 1} of {self.opts.repeat}", flush=True)
                if "nats" in parts:
                    self.run_nats()
                if "fake" in parts:
                    self.run_fake()
                if "quorumq" in parts:
                    self.run_quorumq("ASYNC_FLUSH", self.opts.base_port)
                    self.run_quorumq("SYNC_FLUSH", self.opts.base_port + 100)
        finally:
            common.stop_all_started()
        self.build_rows()
        columns = [("system", "system"), ("measurement", "measurement"), ("msg/s", "msg/s"),
                   ("p50 ms", "p50 ms"), ("p99 ms", "p99 ms"), ("client us/msg", "client CPU us/msg"),
                   ("server us/msg", "server CPU us/msg"), ("target", "target"), ("note", "note")]
        rounds = f", median of {self.opts.repeat} rounds" if self.opts.repeat > 1 else ""
        self.report(self.opts.name, columns, f"{BODY_SIZE} B bodies, single broker, {self.opts.seconds:g} s per "
                                             f"measurement{rounds}, {os.cpu_count()} cpus", TARGETS, started)
        if not self.opts.keep:
            for sub in ("nats-store",):
                shutil.rmtree(self.workdir / sub, ignore_errors=True)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2], sys.argv[3])
        return
    p = argparse.ArgumentParser(description="quorumq foundation benchmark (see the module docstring)")
    p.add_argument("--parts", default="nats,fake,quorumq", type=lambda s: set(s.split(",")),
                   help="comma-separated subset of nats,fake,quorumq (default: all)")
    common.add_up_options(p, 24000, "quorumq ASYNC_FLUSH uses P..P+89, SYNC_FLUSH P+100..P+199; NATS P+90, "
                                    "fake server P+91")
    common.add_send_options(p, inflight=4)
    p.add_argument("--pull-batch", type=int, default=256, help="messages per pull request (quorumq and NATS)")
    p.add_argument("--pull-inflight", type=int, default=1, help="quorumq pulls in flight (queues split among them)")
    p.add_argument("--nats-window", type=int, default=1024, help="NATS async/lean publishes in flight")
    p.add_argument("--official-window", type=int, default=256, help="official send_async window")
    p.add_argument("--client-cpu", default="0", help="cpu for the pinned official client")
    p.add_argument("--server-cpu", default="1", help="cpu for the server during the pinned measurement")
    p.add_argument("--name", default=NAME, help="results file bench/results/NAME.json")
    opts = p.parse_args()
    common.install_signal_handlers()
    Bench(opts).run()


if __name__ == "__main__":
    main()
