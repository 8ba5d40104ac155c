"""Transactional messages through the official RocketMQ 5 Python client (issue 21).

Goal: what an application sees of a half message sent to a TRANSACTION topic. It is not visible
until committed; a commit makes it visible once (as a TRANSACTION message), a rollback never. One
left undecided is checked: the broker asks the producer's TransactionChecker over its Telemetry
stream once the message is older than transactionTimeOut, and does what it answers (COMMIT,
ROLLBACK, or UNKNOWN: ask again a transactionCheckInterval later), at most transactionCheckMax
times, then gives up and the message never appears. An EndTransaction for an unknown transaction,
a wrong message id or topic, or one already decided is refused with its code and changes nothing.

Method: one broker with short check settings (1 s, 1 s, at most 2 checks). Each test has its
topic and its producer, which publishes only that topic, so the checks of its messages reach its
checker. A consumer of a group of its own receives in a thread and keeps every delivery; "never
visible" is checked once a receive begun after the decision has returned.
"""

import time
import uuid

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc
from rocketmq.v5.exception import ClientException

from harness import (
    THROUGH_PROXY,
    LocalCluster,
    check_for,
    new_name,
    official_access_point,
    official_message,
    simple_consumer,
    typed_topic,
)
from timer_transaction_support import (
    COMMIT,
    ROLLBACK,
    UNKNOWN,
    Arrivals,
    ScriptedChecker,
    transactional_producer,
)

TIMEOUT_MS = 1000  # transactionTimeOut: a half message older than this is checked
CHECK_INTERVAL_MS = 1000  # transactionCheckInterval
CHECK_MAX = 2  # transactionCheckMax
SETTINGS = {"transactionTimeOut": TIMEOUT_MS, "transactionCheckInterval": CHECK_INTERVAL_MS,
            "transactionCheckMax": CHECK_MAX}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """The module's one-broker cluster, with short transaction checks."""
    cluster = LocalCluster(tmp_path_factory.mktemp("transactions"), sets={k: str(v) for k, v in SETTINGS.items()})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def topic(admin, masters) -> str:
    return typed_topic(admin, masters, "TRANSACTION")


@pytest.fixture
def arrivals(client_config, topic):
    watching = Arrivals(client_config, topic)
    yield watching
    watching.close()


@pytest.fixture
def stub(shared_cluster, masters):
    """Raw v5 calls where the official client makes its own: through the proxy, whose transaction
    ids it holds, under QUORUMQ_ACCESS=proxy."""
    with grpc.insecure_channel(official_access_point(shared_cluster) if THROUGH_PROXY else masters[0]) as channel:
        yield v5_grpc.MessagingServiceStub(channel)


def status(admin, masters) -> dict[str, str]:
    return admin.broker_status(masters[0])


def send_half(producer, topic: str, body: bytes):
    """(transaction, receipt) of one half message."""
    transaction = producer.begin_transaction()
    receipt = producer.send(official_message(topic, body), transaction)
    assert receipt.transaction_id, "a TRANSACTION send's answer carries its transaction id"
    return transaction, receipt


def assert_once(arrivals: Arrivals, receipts) -> None:
    """Each message arrived exactly once, as a TRANSACTION message."""
    arrived = arrivals.wait_for([receipt.message_id for receipt in receipts], timeout=20)
    arrivals.wait_rounds()
    for receipt in receipts:
        deliveries = arrivals.of(receipt.message_id)
        assert len(deliveries) == 1, f"{receipt.message_id} delivered {len(deliveries)} times"
        assert arrived[receipt.message_id][0][1].message_type == v5.MessageType.TRANSACTION


def test_a_commit_is_visible_once_and_a_rollback_never(client_config, admin, masters, topic, arrivals):
    before = status(admin, masters)
    checker = ScriptedChecker()  # UNKNOWN to any check: only the producer's own decisions count
    producer = transactional_producer(client_config, (topic,), checker)
    peek = simple_consumer(client_config, new_name("G"), topic, await_duration=1)
    try:
        rolled_back, _ = send_half(producer, topic, b"rolled back")
        rolled_back.rollback()
        committed, receipt = send_half(producer, topic, b"committed")
        assert peek.receive(32, 30) == [], "a half message is not visible"  # a long poll begun after the send
        committed.commit()
        assert_once(arrivals, [receipt])
        assert arrivals.bodies() == [b"committed"]
    finally:
        peek.shutdown()
        producer.shutdown()
    after = status(admin, masters)
    assert int(after["transactionsCommitted"]) == int(before["transactionsCommitted"]) + 1
    assert int(after["transactionsRolledBack"]) == int(before["transactionsRolledBack"]) + 1


def test_the_checker_decides_an_undecided_transaction(client_config, admin, masters, topic, arrivals):
    checker = ScriptedChecker({b"commit": [COMMIT], b"rollback": [ROLLBACK],
                               b"unknown, then commit": [UNKNOWN, COMMIT]})
    producer = transactional_producer(client_config, (topic,), checker)
    try:
        sent_at, receipts = {}, {}
        for body in (b"commit", b"rollback", b"unknown, then commit"):
            sent_at[body] = time.time()
            receipts[body] = send_half(producer, topic, body)[1]
        assert_once(arrivals, [receipts[b"commit"], receipts[b"unknown, then commit"]])
        check_for(10, 0.05, lambda: status(admin, masters)["transactionsUndecided"] == "0", "nothing pending")
        arrivals.wait_rounds()
        assert sorted(arrivals.bodies()) == [b"commit", b"unknown, then commit"], "the rolled-back one never"
        for body, checks in ((b"commit", 1), (b"rollback", 1), (b"unknown, then commit", 2)):
            made = checker.of(body)
            assert len(made) == checks, (body, made)
            assert {message_id for _, message_id, _ in made} == {receipts[body].message_id}
            assert made[0][2] - sent_at[body] >= TIMEOUT_MS / 1000, f"{body!r} checked before transactionTimeOut"
    finally:
        producer.shutdown()


def test_a_transaction_left_unknown_is_given_up_after_transaction_check_max(client_config, admin, masters, topic,
                                                                            arrivals):
    given_up_before = int(status(admin, masters)["transactionChecksGivenUp"])
    checker = ScriptedChecker()  # always UNKNOWN
    producer = transactional_producer(client_config, (topic,), checker)
    try:
        transaction, _ = send_half(producer, topic, b"unknown")
        check_for(20, 0.1, lambda: int(status(admin, masters)["transactionChecksGivenUp"]) == given_up_before + 1,
                  "the broker gave up")
        with pytest.raises(ClientException) as refused:  # too late: the transaction has ended
            transaction.commit()
        assert refused.value.code == v5.Code.INVALID_TRANSACTION_ID
        assert "TRANSACTION_ALREADY_ENDED" in str(refused.value)
        arrivals.wait_rounds()
        assert len(checker.of(b"unknown")) == CHECK_MAX
        assert arrivals.bodies() == [], "a transaction given up is never visible"
        assert status(admin, masters)["transactionsUndecided"] == "0"
    finally:
        producer.shutdown()


def end_transaction(stub, topic: str, message_id: str, transaction_id: str,
                    resolution=v5.TransactionResolution.COMMIT) -> v5s.EndTransactionResponse:
    return stub.EndTransaction(v5s.EndTransactionRequest(
        topic=v5.Resource(name=topic), message_id=message_id, transaction_id=transaction_id, resolution=resolution,
        source=v5.TransactionSource.SOURCE_CLIENT), timeout=10)


def test_an_end_transaction_for_an_unknown_or_decided_transaction_is_refused(client_config, admin, masters, topic,
                                                                            arrivals, stub):
    other_topic = typed_topic(admin, masters, "TRANSACTION")
    producer = transactional_producer(client_config, (topic,), ScriptedChecker())
    try:
        transaction, receipt = send_half(producer, topic, b"half")
        for what, (on_topic, message_id, transaction_id) in {
            "a transaction id that does not parse": (topic, receipt.message_id, uuid.uuid4().hex.upper()),
            "an unknown transaction id": (topic, receipt.message_id, f"{2**40:x}"),
            "a wrong message id": (topic, uuid.uuid4().hex.upper(), receipt.transaction_id),
            "another topic": (other_topic, receipt.message_id, receipt.transaction_id),
        }.items():
            answer = end_transaction(stub, on_topic, message_id, transaction_id)
            assert answer.status.code == v5.Code.INVALID_TRANSACTION_ID, (what, answer.status)
            assert "INVALID_TRANSACTION_ID" in answer.status.message, (what, answer.status)
        transaction.commit()  # the refusals changed nothing: still the producer's to decide
        assert_once(arrivals, [receipt])
        for resolution in (v5.TransactionResolution.COMMIT, v5.TransactionResolution.ROLLBACK):
            answer = end_transaction(stub, topic, receipt.message_id, receipt.transaction_id, resolution)
            assert answer.status.code == v5.Code.INVALID_TRANSACTION_ID, answer.status
            assert "TRANSACTION_ALREADY_ENDED" in answer.status.message, answer.status
        with pytest.raises(ClientException) as refused:  # the official client's second commit
            transaction.commit()
        assert refused.value.code == v5.Code.INVALID_TRANSACTION_ID
        arrivals.wait_rounds()
        assert arrivals.bodies() == [b"half"], "once: the second commit delivered nothing, the rollback took nothing"
    finally:
        producer.shutdown()
