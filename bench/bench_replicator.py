"""Replication between two quorumq clusters on this machine: the Spark replicator (its replicate job,
local[2]) against the simplest alternative, one Python process that pulls from the primary and sends
to the standby with quorumq's client (one asyncio task per queue), in the same run.

1. Throughput: MESSAGES messages of 1 KiB preloaded on the primary (8 queues), replicated to the
   standby; msg/s from the first copy stored to the last (startup shown apart). Spark's session
   first replicates a few messages to start its Python workers (warm_up).
2. Latency: a producer process offers RATE msg/s for SECONDS to a fresh topic while the replicator
   runs; latency = the standby's store time - the primary's store time of each message.

Prints a table and writes bench/results/replicator.json (use --out for smoke runs).
"""

import argparse
import asyncio
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import RESULTS_DIR, fmt_ms, fmt_rate, latency_summary, machine_info, print_table, write_results  # noqa: E402
from harness import LocalCluster, check_for  # noqa: E402
from quorumq.client import AdminClient, Blocking, Message, Producer, PullConsumer  # noqa: E402
from quorumq.core import replicator as plan  # noqa: E402
from quorumq.replicator import jobs  # noqa: E402
from quorumq.replicator.app import spark_session  # noqa: E402
from quorumq.replicator.jobs import Settings  # noqa: E402

QUEUES = 8
BODY = b"x" * 1024
WARM_UP_MESSAGES = QUEUES * 100


def create_topic(access_point: str, topic: str) -> None:
    with Blocking(AdminClient, access_point) as admin:
        for broker in admin.brokers(masters_only=True):
            admin.update_topic(broker.address, topic, QUEUES, QUEUES)


def preload(access_point: str, topic: str, count: int) -> None:
    async def load() -> None:
        async with Producer(access_point) as producer:
            per_queue = count // QUEUES
            await asyncio.gather(*(producer.send_batch(topic, [Message(BODY)] * per_queue, queue_id=q)
                                   for q in range(QUEUES)))

    asyncio.run(load())


def standby_count(access_point: str, topic: str) -> int:
    with Blocking(PullConsumer, access_point, "bench") as consumer:
        return sum(consumer.query_offset(topic, q, "END") for q in range(QUEUES))


def wait_for(access_point: str, topic: str, count: int, timeout_s: float) -> tuple[float, float]:
    """(when the first copy was seen, when all were) in time.monotonic()."""
    first = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = standby_count(access_point, topic)
        if seen and first is None:
            first = time.monotonic()
        if seen >= count:
            return first, time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"{topic}: only {standby_count(access_point, topic)} of {count} replicated")


def latencies(access_point: str, topic: str) -> list[float]:
    """Seconds from the primary's store time to the standby's, per message."""
    values = []
    with Blocking(PullConsumer, access_point, "bench") as consumer:
        for queue in range(QUEUES):
            offset, end = 0, consumer.query_offset(topic, queue, "END")
            while offset < end:
                result = consumer.pull(topic, queue, offset, 1024)
                values += [(m.store_timestamp_ms - int(m.properties[plan.SOURCE_STORE_TIMESTAMP])) / 1000
                           for m in result.messages]
                offset = result.next_offset
    return values


# The baseline: one process, one asyncio task per queue, pull then send, forever.

async def baseline_queue(source: str, target: str, topic: str, queue: int, cluster: str, stop_at: float) -> None:
    async with PullConsumer(source, "baseline") as consumer, Producer(target) as producer:
        offset = 0
        while time.monotonic() < stop_at:
            pulled = await consumer.pull(topic, queue, offset, 1024, long_poll_s=0.5)
            if not pulled.messages:
                offset = max(offset, pulled.next_offset)
                continue
            copies = [Message(m.body, m.tag or None, m.keys, {
                **m.properties, plan.SOURCE_CLUSTER: m.properties.get(plan.SOURCE_CLUSTER, cluster),
                plan.SOURCE_OFFSET: str(m.queue_offset), plan.SOURCE_MESSAGE_ID: m.message_id,
                plan.SOURCE_STORE_TIMESTAMP: str(m.store_timestamp_ms)}) for m in pulled.messages]
            results = await producer.send_batch(topic, copies, queue_id=queue)
            assert all(r.ok for r in results), results[0]
            offset = pulled.next_offset


def run_baseline(source: str, target: str, topic: str, cluster: str, seconds: float) -> None:
    async def run() -> None:
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(baseline_queue(source, target, topic, q, cluster, stop_at) for q in range(QUEUES)))

    asyncio.run(run())


def offer_load(access_point: str, topic: str, rate: int, seconds: float) -> None:
    """RATE msg/s for SECONDS in ticks of 100 ms, spread over the queues."""
    per_tick = max(QUEUES, rate // 10)
    with Blocking(Producer, access_point) as producer:
        start = time.monotonic()
        for tick in range(int(seconds * 10)):
            producer.send_batch(topic, [Message(BODY)] * per_tick)
            time.sleep(max(0.0, start + (tick + 1) / 10 - time.monotonic()))


def offered(access_point: str, topic: str, rate: int, seconds: float) -> multiprocessing.Process:
    process = multiprocessing.get_context("spawn").Process(target=offer_load, args=(access_point, topic, rate, seconds))
    process.start()
    return process


def start_baseline(source: str, target: str, topic: str, seconds: float) -> multiprocessing.Process:
    process = multiprocessing.get_context("spawn").Process(
        target=run_baseline, args=(source, target, topic, "A", seconds), daemon=True)
    process.start()
    return process


def spark_settings(source: str, target: str, topic: str, work: Path, trigger_s: float) -> Settings:
    return Settings(source=source, target=target, topics=(topic,), checkpoint=work / topic, tag_filters={},
                    starting="earliest", trigger_s=trigger_s)


def warm_up(spark, source: str, target: str, work: Path, trigger_s: float) -> None:
    """Replicate a few messages and wait for their micro-batch to commit. Spark starts its Python
    worker processes once a session, at the first micro-batch and at the first commit (over a
    second of CPU each here, most of it compiling pyspark from its zip); unwarmed, the first commit
    stalled the measured copy for about a second between its two micro-batches."""
    preload(source, "W_spark", WARM_UP_MESSAGES)
    query = jobs.start_replicate(spark, spark_settings(source, target, "W_spark", work, trigger_s))
    wait_for(target, "W_spark", WARM_UP_MESSAGES, 120)
    # lastProgress is set once a micro-batch has committed.
    check_for(120, 0.05, lambda: query.lastProgress is not None, "the warm-up's micro-batch committed")
    jobs.stop(query)


def measure_throughput(pipeline: str, target: str, topic: str, messages: int, started: float) -> dict:
    first, done = wait_for(target, topic, messages, 600)
    return {"pipeline": pipeline, "what": "throughput", "msg_per_s": messages / (done - first),
            "with_startup_msg_per_s": messages / (done - started)}


def measure_latency(pipeline: str, source: str, target: str, topic: str, rate: int, seconds: float) -> dict:
    """Offer the load while the pipeline runs, wait for every copy, and compare store times."""
    load = offered(source, topic, rate, seconds)
    load.join()
    wait_for(target, topic, standby_count(source, topic), 120)
    return {"pipeline": pipeline, "what": f"latency at {rate} msg/s", **latency_summary(latencies(target, topic))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.5, help="the replicate job's micro-batch interval")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "replicator.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-replicator-"))
    clusters = [LocalCluster(work / name, cluster=name) for name in ("A", "B")]
    rows = []
    try:
        primary, standby = (cluster.start() for cluster in clusters)
        source, target = primary["access_point"], standby["access_point"]
        for topic in ("W_spark", "T_spark", "T_baseline", "L_spark", "L_baseline"):
            create_topic(source, topic)
            create_topic(target, topic)
        preload(source, "T_spark", args.messages)
        preload(source, "T_baseline", args.messages)

        # Baseline throughput, then latency under the offered load.
        baseline_name, spark_name = "one Python process (baseline)", "Spark replicator (local[2])"
        baseline = start_baseline(source, target, "T_baseline", 600)
        rows.append(measure_throughput(baseline_name, target, "T_baseline", args.messages, time.monotonic()))
        baseline.terminate()
        baseline = start_baseline(source, target, "L_baseline", args.seconds + 30)
        time.sleep(2)
        rows.append(measure_latency(baseline_name, source, target, "L_baseline", args.rate, args.seconds))
        baseline.terminate()

        # The Spark replicator: one session, the replicate job of each topic.
        spark = spark_session("local[2]", "bench-replicator")
        started = time.monotonic()
        warm_up(spark, source, target, work, args.trigger_seconds)
        query = jobs.start_replicate(spark, spark_settings(source, target, "T_spark", work, args.trigger_seconds))
        rows.append(measure_throughput(spark_name, target, "T_spark", args.messages, started))
        jobs.stop(query)
        query = jobs.start_replicate(spark, spark_settings(source, target, "L_spark", work, args.trigger_seconds))
        time.sleep(10)  # past the first micro-batch's worker start
        rows.append(measure_latency(spark_name, source, target, "L_spark", args.rate, args.seconds))
        jobs.stop(query)
        spark.stop()
    finally:
        for cluster in clusters:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)

    for row in rows:
        for key in ("msg_per_s", "with_startup_msg_per_s"):
            if key in row:
                row[key + "_text"] = fmt_rate(row[key])
        for key in ("p50_ms", "p99_ms", "max_ms"):
            if key in row:
                row[key + "_text"] = fmt_ms(row[key])
    print_table(rows, [("pipeline", "pipeline"), ("what", "measure"), ("msg_per_s_text", "msg/s"),
                       ("with_startup_msg_per_s_text", "msg/s incl. startup"), ("p50_ms_text", "p50 ms"),
                       ("p99_ms_text", "p99 ms")],
                title=f"replication of 1 KiB messages, {QUEUES} queues, {args.messages} preloaded")
    path = write_results("replicator", {"messages": args.messages, "rate": args.rate, "seconds": args.seconds,
                                        "rows": rows},
                         machine=machine_info(packages=("grpcio", "protobuf", "pyspark", "pyarrow")), path=args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
