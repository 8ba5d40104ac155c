"""`quorumq replicator run` as an operator runs it: its own process is the Spark driver. A SIGKILL
of the driver in the middle of a batch and a restart on the same checkpoint lose nothing and send
at most one batch twice; with --dedupe, nothing twice. The kill is proven to land mid-batch: the
checkpoint holds the batch's offsets and no commit for it, and the standby holds part of it, so
the restart replays it."""

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from harness import Driver, check_for, create_topic, free_base_port, metric, scrape
from quorumq.cli.main import build_parser, main
from quorumq.core.replicator import decode_offsets
from quorumq.replicator.app import main as main_spark_submit
from replicator_support import new_topic, produce, queue_ends, queue_messages, source_offsets

QUEUES, PER_QUEUE, BATCH = 4, 3000, 2000
RUN_TIMEOUT_S = 150.0


def test_a_checkpoint_url_of_another_file_system_is_refused_before_spark_starts(capsys, tmp_path):
    args = ["--source", "127.0.0.1:1", "--target", "127.0.0.1:2", "--topics", "T", "--checkpoint"]
    for run in (lambda argv: main(["replicator", "run", *argv]), main_spark_submit):
        with pytest.raises(SystemExit) as exited:
            run([*args, "hdfs://namenode:8020/replicator/a-to-b"])
        assert exited.value.code == 2
        assert "argument --checkpoint: CONFIG_INVALID: checkpoint 'hdfs://namenode:8020/replicator/a-to-b' is not " \
               "a local directory" in capsys.readouterr().err
    parsed = build_parser().parse_args(["replicator", "run", *args, f"file://{tmp_path}/checkpoint"])
    assert parsed.checkpoint == tmp_path / "checkpoint"


def last_planned_batch(job: Path) -> int | None:
    batches = [int(path.name) for path in (job / "offsets").glob("[0-9]*")]
    return max(batches, default=None)


def planned_end(job: Path, batch: int) -> int:
    """How many messages the replicate query had read once `batch` ended: the sum of its end
    offsets in Spark's offset log (a line of Spark's metadata, then our source's offset); 0 before
    the first batch, since the topic is new and read from its start."""
    if batch < 0:
        return 0
    source_offset = (job / "offsets" / str(batch)).read_text().splitlines()[2]
    return sum(decode_offsets(json.loads(source_offset)).values())


def kill_mid_batch(driver: Driver, checkpoint: Path, held: Callable[[], int]) -> int | None:
    """If the replicate query has planned a batch it has not committed (offsets/N, no commits/N,
    not counted by the sink's commit) and the standby holds part of it, SIGKILL the driver there
    and return how many of that batch's messages the standby held; else None, and it runs on.
    The driver's processes are frozen (SIGSTOP) while this is checked, so no commit slips in
    between the check and the kill."""
    job = checkpoint / "replicate"

    def in_flight() -> int | None:
        batch = last_planned_batch(job)
        if batch is None or (job / "commits" / str(batch)).exists():
            return None
        metrics = checkpoint / "replicate-metrics.json"
        if metrics.exists() and json.loads(metrics.read_text())["batch"] >= batch:
            return None  # every send answered already: only the commit marker is missing
        sent = held() - planned_end(job, batch - 1)
        return sent if sent > 0 else None

    if in_flight() is None:  # checked running first: freezing on every poll would slow the driver
        return None
    driver.signal(signal.SIGSTOP)
    try:
        sent = in_flight()
        if sent is not None:
            driver.kill()
        return sent
    finally:
        driver.signal(signal.SIGCONT)


def replicate_with_a_kill(clusters, tmp_path, *extra: str) -> tuple[list[list[int]], int]:
    """Replicate QUEUES x PER_QUEUE messages, SIGKILL the driver in the middle of a batch once part
    of that batch arrived, restart it on the same checkpoint; the source offsets each standby queue
    holds, in order, and how many messages of the killed batch the standby held at the kill (the
    replay sends them again, or skips them with --dedupe)."""
    primary, standby = clusters
    topic = new_topic()
    create_topic(primary, topic, QUEUES)
    produce(primary, topic, per_queue=PER_QUEUE, queues=QUEUES, body_bytes=1024)
    args = ["--source", primary["access_point"], "--target", standby["access_point"], "--topics", topic,
            "--checkpoint", str(tmp_path / "checkpoint"), "--starting", "earliest", "--spark-master", "local[2]",
            "--max-records-per-trigger", str(BATCH), "--trigger-seconds", "0.5", *extra]
    total = QUEUES * PER_QUEUE
    checkpoint = tmp_path / "checkpoint"

    def held() -> int:
        return sum(queue_ends(standby, topic, QUEUES))

    driver = Driver(args, tmp_path / "driver-1.log")
    try:
        replayed = check_for(RUN_TIMEOUT_S, 0.05, lambda: kill_mid_batch(driver, checkpoint, held),
                             "a kill in the middle of a batch, part of it on the standby")
    finally:
        driver.kill()
    assert held() < total, "killed before the end"
    killed_batch = last_planned_batch(checkpoint / "replicate")
    assert not (checkpoint / "replicate" / "commits" / str(killed_batch)).exists(), "killed before its commit"

    metrics = {"metrics": f"127.0.0.1:{free_base_port(1)}"}
    driver = Driver([*args, "--metrics", metrics["metrics"]], tmp_path / "driver-2.log")
    try:
        check_for(RUN_TIMEOUT_S, 0.5, lambda: [len(set(source_offsets(queue_messages(standby, topic, q))))
                                              for q in range(QUEUES)] == [PER_QUEUE] * QUEUES,
                  "every message on the standby after the restart")
        def caught_up() -> bool:  # the driver's metrics, once its progress shows the last batch
            samples = scrape(metrics)
            return metric(samples, "quorumq_replicator_rows_per_second") > 0 and \
                metric(samples, "quorumq_replicator_lag_messages", topic=topic) == 0
        check_for(RUN_TIMEOUT_S, 0.5, caught_up, "the driver's metrics show no lag")
        # Progress is printed every 5 s: a fast replay may finish before the first line names it.
        check_for(RUN_TIMEOUT_S, 0.5, lambda: "replicate A->B: batch" in (tmp_path / "driver-2.log").read_text(),
                  "progress printed")
        assert driver.stop() == 0
    finally:
        driver.kill()
    assert "replicate A->B: batch" in (tmp_path / "driver-2.log").read_text(), "progress printed"
    assert (checkpoint / "replicate" / "commits" / str(killed_batch)).exists(), "the killed batch ran again"
    return [source_offsets(queue_messages(standby, topic, q)) for q in range(QUEUES)], replayed


def assert_in_order_and_complete(offsets: list[int]) -> None:
    """Every source offset, and in order but for the replay: one step back at most."""
    assert set(offsets) == set(range(PER_QUEUE))
    steps_back = sum(1 for before, after in zip(offsets, offsets[1:]) if after <= before)
    assert steps_back <= 1


def test_a_killed_driver_restarts_on_its_checkpoint_losing_nothing(clusters, tmp_path):
    queues, replayed = replicate_with_a_kill(clusters, tmp_path)
    for offsets in queues:
        assert_in_order_and_complete(offsets)
    duplicates = sum(count - 1 for offsets in queues for count in Counter(offsets).values())
    assert duplicates <= BATCH, "at most one batch sent twice"
    assert duplicates >= replayed, "the replay sent again what the killed batch had sent"


def test_with_dedupe_a_restart_sends_nothing_twice(clusters, tmp_path):
    queues, replayed = replicate_with_a_kill(clusters, tmp_path, "--dedupe")
    for offsets in queues:
        assert offsets == list(range(PER_QUEUE))
    totals = json.loads((tmp_path / "checkpoint" / "replicate-metrics.json").read_text())
    assert totals["deduped"] >= replayed, "the replay skipped what the killed batch had sent"
