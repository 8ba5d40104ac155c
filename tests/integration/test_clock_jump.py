"""Fault F12 on real processes: one process's wall clock jumps an hour forward or back while it
runs (its Clock reads the offset from QUORUMQ_CLOCK_DIR/<pid>). Goal: timeouts and leases run on
monotonic time, so the name server neither drops live brokers nor keeps dead ones, and a received
message stays invisible for its invisible time; only timestamps that outlive a process use the
wall clock. Method: what an operator and a consumer see: the name server's log and broker list,
and what the official SimpleConsumer receives. Each test also shows the process took the jump: the
times it stamps (a stored message's store time, its log lines) move by the offset, so a process that
ignored its offset file fails the test."""

import os
import signal
import time
import uuid
from datetime import datetime

import pytest

from harness import (
    check_for,
    configuration,
    log_end,
    log_since,
    official_message,
    process_of,
    receive_all,
    simple_consumer,
    started_producer,
    stop_process,
)
from quorumq.client import AdminClient, Blocking, Message, Producer, PullConsumer

JUMP_MS = 3_600_000
SKEW_SLACK_MS = 5_000  # a busy machine between a stamp and this test's reading of its own clock
FAST_EXPIRY = {"brokerNotActiveTimeoutMillis": "2000", "scanNotActiveBrokerInterval": "200",
               "registerNameServerPeriod": "500"}


@pytest.fixture
def clock_dir(tmp_path, monkeypatch):
    """Processes started in this test read their clock offsets here."""
    directory = tmp_path / "clocks"
    directory.mkdir()
    monkeypatch.setenv("QUORUMQ_CLOCK_DIR", str(directory))
    return directory


def jump(clock_dir, process: dict, offset_ms: int) -> None:
    """Set the process's wall-clock offset, written whole."""
    staged = clock_dir / f"{process['pid']}.tmp"
    staged.write_text(str(offset_ms))
    os.replace(staged, clock_dir / str(process["pid"]))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def logged_skew_ms(process: dict, position: int, text: str) -> int:
    """How far ahead of this machine's clock the process stamped the first line after `position`
    that holds `text` (log lines start "YYYY-mm-dd HH:MM:SS,mmm"), the line written a moment ago."""
    [line] = [line for line in log_since(process, position).splitlines() if text in line][:1]
    stamped = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000
    return round(stamped - now_ms())


def stored_skew_ms(cluster: dict) -> int:
    """How far ahead of this machine's clock the broker is: the store time of a message it stores now."""
    with Blocking(Producer, cluster["access_point"]) as producer, \
            Blocking(PullConsumer, cluster["access_point"], "GClockProbe") as consumer:
        sent_ms = now_ms()
        result = producer.send("ClockProbe", Message(b"probe"), queue_id=0)
        [stored] = consumer.pull("ClockProbe", 0, result.queue_offset, 1).messages
        return stored.store_timestamp_ms - sent_ms


def registered_addresses(cluster: dict) -> set[str]:
    with Blocking(AdminClient, cluster["access_point"], timeout_s=2.0) as admin:
        return {broker.address for broker in admin.cluster_info().brokers}


def test_a_name_server_clock_jumping_forward_drops_no_live_broker(clock_dir, start_cluster):
    cluster = start_cluster(sets=FAST_EXPIRY)
    namesrv, broker = process_of(cluster, "namesrv"), process_of(cluster, "broker")
    logged_before = log_end(namesrv)
    jump(clock_dir, namesrv, JUMP_MS)
    # Time passing is what is tested: ten expiry scans, each of which would drop the broker if
    # expiry ran on wall time (the broker registers every 500 ms; it is dropped after 2 s).
    time.sleep(10 * float(FAST_EXPIRY["scanNotActiveBrokerInterval"]) / 1000)
    assert "dropped" not in log_since(namesrv, logged_before)
    assert broker["address"] in registered_addresses(cluster)
    stop_process(broker)  # it unregisters: the name server logs that an hour ahead
    assert abs(logged_skew_ms(namesrv, logged_before, "unregistered") - JUMP_MS) < SKEW_SLACK_MS


def test_a_name_server_clock_jumping_back_still_drops_a_dead_broker(clock_dir, start_cluster):
    cluster = start_cluster(sets=FAST_EXPIRY)
    namesrv, broker = process_of(cluster, "namesrv"), process_of(cluster, "broker")
    logged_before = log_end(namesrv)
    jump(clock_dir, namesrv, -JUMP_MS)
    stop_process(broker, signal.SIGKILL)
    check_for(20, 0.2, lambda: broker["address"] not in registered_addresses(cluster),
              "the dead broker dropped after brokerNotActiveTimeoutMillis")
    assert abs(logged_skew_ms(namesrv, logged_before, "dropped") + JUMP_MS) < SKEW_SLACK_MS


def test_a_broker_clock_jumping_forward_keeps_a_received_message_invisible(clock_dir, start_cluster):
    cluster = start_cluster()
    client_config = configuration(cluster)
    producer = started_producer(client_config)
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "GJump", topic)
    try:
        producer.send(official_message(topic, b"leased"))
        [received] = receive_all(consumer, 1, invisible_s=60)
        assert abs(stored_skew_ms(cluster)) < SKEW_SLACK_MS
        jump(clock_dir, process_of(cluster, "broker"), JUMP_MS)
        check_for(5, 0.05, lambda: abs(stored_skew_ms(cluster) - JUMP_MS) < SKEW_SLACK_MS,
                  "the broker storing messages an hour ahead")
        assert consumer.receive(32, 60) == [], "an hour of wall clock is not 60 s of invisible time"
        consumer.ack(received)
    finally:
        consumer.shutdown()
        producer.shutdown()
