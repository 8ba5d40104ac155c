"""Fault F12 on real processes: one process's wall clock jumps an hour forward or back while it
runs (its Clock reads the offset from QUORUMQ_CLOCK_DIR/<pid>). Goal: timeouts and leases run on
monotonic time, so the name server neither drops live brokers nor keeps dead ones, and a received
message stays invisible for its invisible time; only timestamps that outlive a process use the
wall clock. Method: what an operator and a consumer see: the name server's log and broker list,
and what the official SimpleConsumer receives."""

import os
import signal
import time
import uuid

import pytest

from harness import (check_for, configuration, log_end, log_since, official_message, receive_all, simple_consumer,
                     started_producer, stop_process)
from quorumq.client import AdminClient, Blocking
from quorumq.clock import OFFSET_FILE_CHECK_S

JUMP_MS = 3_600_000
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
    """Set the process's wall-clock offset, written whole, and wait until it has looked."""
    staged = clock_dir / f"{process['pid']}.tmp"
    staged.write_text(str(offset_ms))
    os.replace(staged, clock_dir / str(process["pid"]))
    time.sleep(3 * OFFSET_FILE_CHECK_S)


def process_of(cluster: dict, kind: str) -> dict:
    return next(p for p in cluster["processes"] if p["kind"] == kind)


def registered_addresses(cluster: dict) -> set[str]:
    with Blocking(AdminClient, cluster["access_point"], timeout_s=2.0) as admin:
        return {broker.address for broker in admin.cluster_info().brokers}


def test_a_name_server_clock_jumping_forward_drops_no_live_broker(clock_dir, start_cluster):
    cluster = start_cluster(sets=FAST_EXPIRY)
    namesrv, broker = process_of(cluster, "namesrv"), process_of(cluster, "broker")
    logged_before = log_end(namesrv)
    jump(clock_dir, namesrv, JUMP_MS)
    time.sleep(10 * float(FAST_EXPIRY["scanNotActiveBrokerInterval"]) / 1000)
    assert "dropped" not in log_since(namesrv, logged_before)
    assert broker["address"] in registered_addresses(cluster)


def test_a_name_server_clock_jumping_back_still_drops_a_dead_broker(clock_dir, start_cluster):
    cluster = start_cluster(sets=FAST_EXPIRY)
    namesrv, broker = process_of(cluster, "namesrv"), process_of(cluster, "broker")
    jump(clock_dir, namesrv, -JUMP_MS)
    stop_process(broker, signal.SIGKILL)
    check_for(20, 0.2, lambda: broker["address"] not in registered_addresses(cluster),
              "the dead broker dropped after brokerNotActiveTimeoutMillis")


def test_a_broker_clock_jumping_forward_keeps_a_received_message_invisible(clock_dir, start_cluster):
    cluster = start_cluster()
    client_config = configuration(cluster)
    producer = started_producer(client_config)
    topic = f"T{uuid.uuid4().hex[:8]}"
    consumer = simple_consumer(client_config, "GJump", topic)
    try:
        producer.send(official_message(topic, b"leased"))
        [received] = receive_all(consumer, 1, invisible_s=60)
        jump(clock_dir, process_of(cluster, "broker"), JUMP_MS)
        assert consumer.receive(32, 60) == [], "an hour of wall clock is not 60 s of invisible time"
        consumer.ack(received)
    finally:
        consumer.shutdown()
        producer.shutdown()
