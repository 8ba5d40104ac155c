"""The pure rules of delay and transactional messages (core/timers.py, core/transactions.py)."""

import random

import pytest

from quorumq.core.timers import (
    DoneSet,
    check_delivery,
    decode_done,
    decode_recall_handle,
    delivery_ms,
    encode_done,
    encode_recall_handle,
)
from quorumq.core.transactions import (
    Check,
    CheckRules,
    Decision,
    decode_op,
    decode_transaction_id,
    encode_op,
    encode_transaction_id,
    next_check,
)
from quorumq.errors import Error, QuorumqError


def refused(error: Error, call, *args) -> None:
    with pytest.raises(QuorumqError) as caught:
        call(*args)
    assert caught.value.error is error


def test_a_delivery_time_in_the_clients_units_and_its_bound():
    assert delivery_ms(1_795_316_046_612, 0) == 1_795_316_046_612  # milliseconds in `seconds`
    assert delivery_ms(1_795_316_046, 5_000_000) == 1_795_316_046_005
    check_delivery(0, 10_000, 1)  # in the past: due at once
    check_delivery(11_000, 10_000, 1)
    refused(Error.ILLEGAL_DELIVERY_TIME, check_delivery, 11_001, 10_000, 1)


def test_a_recall_handle_names_its_timer_and_nothing_else_parses():
    handle = encode_recall_handle("Timers", "broker-a", 42, "01AB")
    assert decode_recall_handle(handle) == ("Timers", "broker-a", 42, "01AB")
    for bad in ("", "not base64!", encode_recall_handle("T", "b", 1, "m").replace("dj", "dX"),
                "djIgVCBiIDEgbQ==",  # "v2 T b 1 m"
                "djEgVCBiIC0xIG0="):  # a negative offset
        refused(Error.INVALID_RECALL_HANDLE, decode_recall_handle, bad)


def test_done_records_round_trip():
    assert decode_done(encode_done([3, 1, 2])) == [3, 1, 2]


def test_the_done_set_agrees_with_a_plain_set_and_keeps_only_what_is_pending():
    rng = random.Random(7)
    done, model = DoneSet(base=100), set(range(100))
    offsets = list(range(100, 60_000))
    rng.shuffle(offsets)
    for offset in offsets[:40_000] + sorted(offsets[40_000:]):
        assert done.mark(offset) is (offset not in model)
        model.add(offset)
        if rng.random() < 0.01:
            probe = rng.randrange(0, 61_000)
            assert (probe in done) is (probe in model)
        assert done.mark(offset) is False
    assert all(offset in done for offset in range(60_000)) and 60_000 not in done
    assert done.base == 100 + DoneSet._DROP_BYTES * 8  # what is all done is dropped, a chunk at a time


def test_a_transaction_id_and_an_op_record_round_trip():
    assert decode_transaction_id(encode_transaction_id(123_456)) == 123_456
    for bad in ("", "xyz", "-5", "1" * 17):
        refused(Error.INVALID_TRANSACTION_ID, decode_transaction_id, bad)
    for decision in Decision:
        assert decode_op(encode_op(9, decision)) == (9, decision)
    with pytest.raises(ValueError):
        decode_op(b"9 x")


RULES = CheckRules(timeout_ms=6000, interval_ms=30_000, max_checks=2)


@pytest.mark.parametrize("checks, last_check_ms, now_ms, expected", [
    (0, None, 5_999, Check.WAIT),  # younger than transactionTimeOut
    (0, None, 6_000, Check.CHECK),
    (1, 6_000, 35_999, Check.WAIT),  # within transactionCheckInterval of the last check
    (1, 6_000, 36_000, Check.CHECK),
    (2, 36_000, 66_000, Check.GIVE_UP),  # transactionCheckMax checks done
])
def test_when_an_undecided_half_message_is_checked(checks, last_check_ms, now_ms, expected):
    assert next_check(0, checks, last_check_ms, now_ms, RULES) is expected
