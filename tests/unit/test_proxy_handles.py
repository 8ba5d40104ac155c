"""A proxy's handles carry the broker group that gave them, and anything else is refused."""

import pytest

from quorumq.core.proxy_handles import send_broker, unwrap, wrap
from quorumq.errors import Error, QuorumqError


@pytest.mark.parametrize("handle", ["abc", "a~b~c", "x" * 300, "~"])
def test_a_wrapped_handle_unwraps_to_its_broker_and_handle(handle):
    assert unwrap(wrap("broker-a", handle)) == ("broker-a", handle)


@pytest.mark.parametrize("handle", ["", "abc", "~abc", "broker-a~"])
def test_a_handle_no_proxy_gave_is_refused(handle):
    with pytest.raises(QuorumqError) as refused:
        unwrap(handle)
    assert refused.value.error is Error.INVALID_RECEIPT_HANDLE


def test_the_caller_names_the_error():
    with pytest.raises(QuorumqError) as refused:
        unwrap("plain", Error.INVALID_TRANSACTION_ID)
    assert refused.value.error is Error.INVALID_TRANSACTION_ID


def test_sends_without_a_message_group_take_the_brokers_in_turn():
    names = ["broker-a", "broker-b", "broker-c"]
    assert [send_broker(names, None, turn) for turn in range(6)] == names * 2


def test_a_message_group_always_goes_to_one_broker():
    names = ["broker-a", "broker-b", "broker-c"]
    chosen = {send_broker(names, "order-42", turn) for turn in range(10)}
    assert len(chosen) == 1
    assert {send_broker(names, f"g{index}", 0) for index in range(50)} == set(names)
