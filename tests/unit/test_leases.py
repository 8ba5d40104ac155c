"""SimpleConsumer leases: a group's position is its lowest unacked offset, and an unacked message
comes back after its invisible time with a higher attempt count."""

from quorumq.core.leases import QueueLeases, spent


def test_position_is_lowest_unacked_offset():
    leases = QueueLeases(start_offset=10)
    for offset, token in ((10, 1), (11, 2), (12, 3)):
        leases.deliver(offset, token, now_ms=0, invisible_ms=1000)
    assert leases.committed == 10
    assert leases.ack(11, 2)
    assert leases.committed == 10
    assert leases.ack(10, 1)
    assert leases.committed == 12
    assert leases.ack(12, 3)
    assert leases.committed == 13 == leases.next_offset


def test_expired_lease_is_delivered_again_with_next_attempt():
    leases = QueueLeases(start_offset=0)
    leases.deliver(0, token=7, now_ms=0, invisible_ms=1000)
    assert leases.expired(now_ms=999, limit=10) == []
    assert leases.expired(now_ms=1000, limit=10) == [0]
    lease = leases.redeliver(0, token=8, now_ms=1000, invisible_ms=1000)
    assert lease.attempt == 2
    assert not leases.ack(0, 7), "the first delivery's handle is stale after redelivery"
    assert leases.ack(0, 8)


def test_change_invisible_replaces_handle_and_deadline():
    leases = QueueLeases(start_offset=0)
    leases.deliver(0, token=1, now_ms=0, invisible_ms=60_000)
    assert leases.change_invisible(0, token=1, new_token=2, now_ms=10, invisible_ms=0) is not None
    assert leases.expired(now_ms=10, limit=1) == [0]
    assert leases.change_invisible(0, token=1, new_token=3, now_ms=10, invisible_ms=0) is None
    assert not leases.ack(0, 1)
    assert leases.ack(0, 2)


def test_skipped_offsets_count_as_done():
    leases = QueueLeases(start_offset=0)
    leases.skip_to(5)
    assert leases.committed == 5
    leases.deliver(7, token=1, now_ms=0, invisible_ms=10)
    assert leases.committed == 7
    leases.forget(7)
    assert leases.committed == 8


def test_expired_is_oldest_first_and_bounded():
    leases = QueueLeases(start_offset=0)
    for offset in range(5):
        leases.deliver(offset, token=offset, now_ms=0, invisible_ms=10)
    assert leases.expired(now_ms=100, limit=3) == [0, 1, 2]



def test_message_that_had_max_attempts_deliveries_is_a_dead_letter():
    assert not spent(attempt=2, max_attempts=3)
    assert spent(attempt=3, max_attempts=3), "max_attempts deliveries: no more"
    assert spent(attempt=1, max_attempts=1), "retryMaxTimes 0: one delivery"
    leases = QueueLeases(start_offset=0)
    leases.deliver(0, token=1, now_ms=0, invisible_ms=10)
    leases.redeliver(0, token=2, now_ms=10, invisible_ms=10)
    assert spent(leases.leases[0].attempt, max_attempts=2)


def test_dead_letter_is_held_without_a_delivery_then_dropped():
    leases = QueueLeases(start_offset=0)
    leases.deliver(0, token=1, now_ms=0, invisible_ms=10)
    lease = leases.hold(0, token=2, now_ms=10, hold_ms=5000)
    assert lease.attempt == 1, "holding for the dead-letter writer is not a delivery"
    assert leases.expired(now_ms=5009, limit=10) == [], "held while its copy is written"
    assert leases.expired(now_ms=5010, limit=10) == [0], "a write that failed: tried again"
    assert not leases.ack(0, 1), "the consumer's handle is stale once held"
    assert leases.ack(0, 2)
    assert leases.committed == 1
