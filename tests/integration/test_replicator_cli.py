"""`quorumq replicator run` as an operator runs it: its own process is the Spark driver. A SIGKILL
of the driver in the middle of replication and a restart on the same checkpoint lose nothing and
send at most one batch twice; with --dedupe, nothing twice."""

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from harness import check_for
from quorumq.cli.main import build_parser, main
from quorumq.cli.replicator import main_spark_submit
from replicator_support import create_topic, new_topic, produce, queue_ends, queue_messages, source_offsets

QUEUES, PER_QUEUE, BATCH = 4, 3000, 2000
RUN_TIMEOUT_S = 150.0


class Driver:
    """One `quorumq replicator run` in its own session, so that it and the JVM and Python workers
    it starts are stopped together by its pid (as a process group)."""

    def __init__(self, args: list[str], log_path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "quorumq.cli.main", "replicator", "run", *args],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def stop(self) -> int:
        """SIGTERM to the driver alone: it stops its queries and Spark, then exits."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.kill()  # whatever of its group is left


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


def replicate_with_a_kill(clusters, tmp_path, *extra: str) -> list[list[int]]:
    """Replicate QUEUES x PER_QUEUE messages, SIGKILL the driver once part of them arrived, restart it
    on the same checkpoint; the source offsets each standby queue holds, in order."""
    primary, standby = clusters
    topic = new_topic()
    create_topic(primary, topic, QUEUES)
    produce(primary, topic, per_queue=PER_QUEUE, queues=QUEUES, body_bytes=1024)
    args = ["--source", primary["access_point"], "--target", standby["access_point"], "--topics", topic,
            "--checkpoint", str(tmp_path / "checkpoint"), "--starting", "earliest", "--spark-master", "local[2]",
            "--max-records-per-trigger", str(BATCH), "--trigger-seconds", "0.5", *extra]
    total = QUEUES * PER_QUEUE

    driver = Driver(args, tmp_path / "driver-1.log")
    try:
        check_for(RUN_TIMEOUT_S, 0.05, lambda: 0 < sum(queue_ends(standby, topic, QUEUES)) < total,
                  "part of the messages replicated")
    finally:
        driver.kill()
    assert sum(queue_ends(standby, topic, QUEUES)) < total, "killed before the end"

    driver = Driver(args, tmp_path / "driver-2.log")
    try:
        check_for(RUN_TIMEOUT_S, 0.5, lambda: [len(set(source_offsets(queue_messages(standby, topic, q))))
                                              for q in range(QUEUES)] == [PER_QUEUE] * QUEUES,
                  "every message on the standby after the restart")
        assert driver.stop() == 0
    finally:
        driver.kill()
    assert "replicate A->B: batch" in (tmp_path / "driver-2.log").read_text(), "progress printed"
    return [source_offsets(queue_messages(standby, topic, q)) for q in range(QUEUES)]


def assert_in_order_and_complete(offsets: list[int]) -> None:
    """Every source offset, and in order but for the replay: one step back at most."""
    assert set(offsets) == set(range(PER_QUEUE))
    steps_back = sum(1 for before, after in zip(offsets, offsets[1:]) if after <= before)
    assert steps_back <= 1


def test_a_killed_driver_restarts_on_its_checkpoint_losing_nothing(clusters, tmp_path):
    queues = replicate_with_a_kill(clusters, tmp_path)
    for offsets in queues:
        assert_in_order_and_complete(offsets)
    duplicates = sum(count - 1 for offsets in queues for count in Counter(offsets).values())
    assert duplicates <= BATCH, "at most one batch sent twice"


def test_with_dedupe_a_restart_sends_nothing_twice(clusters, tmp_path):
    queues = replicate_with_a_kill(clusters, tmp_path, "--dedupe")
    for offsets in queues:
        assert offsets == list(range(PER_QUEUE))
