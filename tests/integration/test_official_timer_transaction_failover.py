"""Timers and transactions across a master's SIGKILL in controller mode, through the official
RocketMQ 5 Python client (issue 21).

Goal: what a user of a replicated group (three replicas, allAckInSyncStateSet=true) sees when its
master dies with timers pending and transactions undecided. Every timer the old master
acknowledged is delivered by the new one, none before its time (a timer whose delivery was
replicated but not its done record may come twice: the brief allows that around a failover); a
transaction committed before the kill stays in its topic once, one rolled back never appears; and the
undecided ones are checked by the new master, which does what the producer's checker answers.

Method: `quorumq up --replicas 3 --controller` with the controller tests' settings and a
transactionCheckInterval of 1 s; transactionTimeOut keeps its 6 s, so that nothing is checked before
the kill, which comes right after the sends. The official clients use the access point (the name
server); consumers of groups of their own receive in threads and keep every delivery with its
arrival time.
"""

import time
from collections import Counter

import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5

from controller_group import FAILOVER_S, started_group
from harness import check_for, configuration, official_message, typed_topic
from timer_transaction_support import (
    COMMIT,
    ROLLBACK,
    UNKNOWN,
    Arrivals,
    ScriptedChecker,
    now_ms,
    stored_message_ids,
    timer_message,
    transactional_producer,
)

TIMER_DELAYS_S = (2, 4, 6, 9, 12)
CHECKED = {b"undecided: commit": [COMMIT], b"undecided: rollback": [ROLLBACK],
           b"undecided: unknown, then commit": [UNKNOWN, COMMIT]}


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    with started_group(tmp_path_factory.mktemp("timer-transaction-failover"), controllers=1,
                       sets={"transactionCheckInterval": "1000"}) as group:
        yield group


def test_timers_and_decisions_survive_the_masters_sigkill_and_undecided_ones_are_checked_by_the_new_one(group):
    group.wait_in_sync()
    addresses = [broker["address"] for broker in group.brokers]
    timers, orders = (typed_topic(group.admin, addresses, kind, queues=2) for kind in ("DELAY", "TRANSACTION"))
    config = configuration(group.cluster)
    checker = ScriptedChecker(CHECKED)
    producer = transactional_producer(config, (timers, orders), checker)
    timer_arrivals, order_arrivals = Arrivals(config, timers), Arrivals(config, orders)
    try:
        due = {}  # message id -> due ms, of every acknowledged timer
        for delay in TIMER_DELAYS_S:
            due_ms = now_ms() + delay * 1000
            due[producer.send(timer_message(timers, f"{delay}s".encode(), due_ms)).message_id] = due_ms
        receipts = {}
        for body in (b"committed", b"rolled back", *CHECKED):
            transaction = producer.begin_transaction()
            receipts[body] = producer.send(official_message(orders, body), transaction)
            if body == b"committed":
                transaction.commit()
            elif body == b"rolled back":
                transaction.rollback()
        old_master = group.master()
        killed_at = time.time()
        assert checker.checks == [], "checked before the kill: transactionTimeOut is 6 s"
        group.kill(old_master)
        new_master = group.master(FAILOVER_S)
        assert new_master is not old_master

        # Every acknowledged timer, none before its time.
        timer_arrivals.wait_for(list(due), timeout=max(TIMER_DELAYS_S) + 30)
        for message_id, due_ms in due.items():
            for at_ms, message in timer_arrivals.of(message_id):
                assert message.message_type == v5.MessageType.DELAY and message.delivery_timestamp == due_ms
                assert at_ms >= due_ms, f"{message.body!r} delivered {due_ms - at_ms} ms before its time"

        # Each commit once; the checks, made after the kill, decide the rest as the checker says.
        visible = [receipts[body].message_id for body in
                   (b"committed", b"undecided: commit", b"undecided: unknown, then commit")]
        order_arrivals.wait_for(visible, timeout=40)
        check_for(20, 0.1, lambda: group.status(new_master)["transactionsUndecided"] == "0", "no transaction pending")
        order_arrivals.wait_rounds()
        # A consumer may be handed a message again after a failover (its group's progress is
        # replicated after the fact); the topic itself holds each commit once.
        assert set(order_arrivals.bodies()) == {b"committed", b"undecided: commit", b"undecided: unknown, then commit"}
        assert stored_message_ids(group.cluster["access_point"], orders) == Counter(visible)
        for body, answers in CHECKED.items():
            made = checker.of(body)
            assert len(made) == len(answers), (body, made)
            assert all(at > killed_at for _, _, at in made)
        assert checker.of(b"committed") == checker.of(b"rolled back") == [], "a decided transaction is not checked"
        check_for(10, 0.1, lambda: group.status(new_master)["timersPending"] == "0", "no timer pending")
    finally:
        timer_arrivals.close()
        order_arrivals.close()
        producer.shutdown()
