"""Consumer groups over a memory store: FIFO queues hand out one batch at a time and append each
change to the lease log, a second broker applying that log holds the same state, and every group
dead-letters a message after its group's last allowed delivery."""

from collections.abc import Callable

import pytest
from test_consumer_sessions import SteppedClock
from test_store_recovery import crash_with_flipped_byte
from test_store_support import new_store, open_store

from quorumq.broker.consumers import ConsumerGroups, DeadLetter
from quorumq.broker.dead_letters import ahead_of
from quorumq.broker.lease_log import LEASE_TOPIC, LeaseLog
from quorumq.config import Config, Kind
from quorumq.core import fifo
from quorumq.core.subscription import SubscriptionGroup
from quorumq.errors import Error, QuorumqError
from quorumq.store import MemoryStore, MessageIn, UnindexedAppend

TOPIC = "T"


class Broker:
    """The parts of a broker the consumer groups use: a store, a lease log and group configs."""

    def __init__(self, root, store=None, clock=None, orderly=True, retry_max_times=2) -> None:
        self.readable_end: int | None = None  # Broker.readable_end: None reads to the log's end
        self.clock = clock or SteppedClock()
        self.store = store or MemoryStore(clock=self.clock)
        self.master = True
        self.appended = 0
        self.lease_log = LeaseLog(self.store, root, self.clock, "127.0.0.1:1", self.check_role, self.notify)
        self.groups = ConsumerGroups(self.store, root, self.clock, Config(Kind.BROKER, {}), lambda: self.readable_end,
                                     self.lease_log, fifo_topic=lambda topic: topic == TOPIC)
        settings = SubscriptionGroup("G", consume_message_orderly=orderly, retry_max_times=retry_max_times)
        self.groups.group = lambda name: settings

    def check_role(self) -> None:
        if not self.master:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "a slave")

    def notify(self) -> None:
        self.appended += 1

    def send(self, count: int, queue_id: int = 0) -> None:
        self.store.append([MessageIn(topic=TOPIC, queue_id=queue_id, body=b"m%d" % index, properties={},
                                     born_timestamp_ms=0, born_host="h") for index in range(count)])

    def pop(self, batch: int = 3, invisible_ms: int = 100, queue_ids=(0,)):
        return self.groups.pop("G", TOPIC, list(queue_ids), None, batch, invisible_ms, self.in_order)

    def change_invisible(self, handle: str, invisible_ms: int) -> tuple[str, int | None]:
        return self.groups.change_invisible("G", TOPIC, handle, invisible_ms, self.in_order)

    def dead_letter(self, handle: str) -> DeadLetter:
        return self.groups.dead_letter("G", TOPIC, handle, self.in_order)

    @property
    def in_order(self) -> bool:
        return self.groups.in_order(self.groups.group("G"), TOPIC)


def offsets(popped) -> list[int]:
    return [delivery.message.queue_offset for delivery in popped.deliveries]


def held(broker, queue_id: int = 0) -> set[int]:
    return {lease.offset for lease in broker.lease_log.queues[("G", TOPIC, queue_id)].leases}


def test_fifo_queue_hands_out_one_batch_until_it_is_acked(tmp_path):
    broker = Broker(tmp_path)
    broker.send(5)
    first = broker.pop()
    assert offsets(first) == [0, 1, 2] and [d.attempt for d in first.deliveries] == [1, 1, 1]
    assert first.record_end == broker.store.max_offset, "the answer waits for the record that hands them out"
    assert broker.pop().deliveries == [], "the queue is blocked while the batch is out"
    assert broker.groups.committed("G", TOPIC, 0) == 0 and broker.groups.inflight("G", TOPIC, 0) == 3
    for delivery in first.deliveries[:2]:
        assert not broker.groups.ack("G", TOPIC, delivery.receipt_handle)
    assert broker.pop().deliveries == []
    assert broker.groups.ack("G", TOPIC, first.deliveries[2].receipt_handle), "the batch is done"
    assert broker.groups.committed("G", TOPIC, 0) == 3
    assert offsets(broker.pop()) == [3, 4]
    assert broker.store.queue_max_offset(LEASE_TOPIC, 0) == 3, \
        "a record for each batch and for the ack that ended the first; the other acks change memory only"


def test_expired_batch_comes_back_in_order_then_goes_to_the_dead_letter_writer(tmp_path):
    broker = Broker(tmp_path, retry_max_times=1)
    broker.send(3)
    first = broker.pop()
    broker.groups.ack("G", TOPIC, first.deliveries[1].receipt_handle)
    broker.clock.monotonic_now_ms += 100
    again = broker.pop()
    assert offsets(again) == [0, 2] and [d.attempt for d in again.deliveries] == [2, 2]
    handle, end = broker.change_invisible(again.deliveries[0].receipt_handle, 0)
    assert end == broker.store.max_offset, "a change of invisible time is waited for"
    assert broker.pop().deliveries == [], "2 is still held"
    broker.clock.monotonic_now_ms += 100
    dead = broker.pop()
    assert dead.deliveries == [] and dead.record_end is None
    assert [(letter.message.queue_offset, letter.attempts) for letter in dead.dead_letters] == [(0, 2), (2, 2)]
    broker.clock.monotonic_now_ms += 100
    assert broker.pop().dead_letters == [], "held while their copies are written"
    for letter in dead.dead_letters:
        broker.groups.ack("G", TOPIC, letter.receipt_handle)
    assert broker.groups.committed("G", TOPIC, 0) == 3


def test_normal_group_dead_letters_after_its_last_delivery(tmp_path):
    broker = Broker(tmp_path, orderly=False, retry_max_times=1)
    broker.send(2)
    first = broker.pop()
    assert offsets(first) == [0, 1] and first.record_end is None
    broker.groups.ack("G", TOPIC, first.deliveries[1].receipt_handle)
    broker.clock.monotonic_now_ms += 100
    assert [d.attempt for d in broker.pop().deliveries] == [2]
    broker.clock.monotonic_now_ms += 100
    dead = broker.pop()
    assert dead.deliveries == [] and [(letter.message.queue_offset, letter.attempts)
                                      for letter in dead.dead_letters] == [(0, 2)]
    assert broker.dead_letter(dead.dead_letters[0].receipt_handle).attempts == 2
    broker.groups.ack("G", TOPIC, dead.dead_letters[0].receipt_handle)
    assert broker.groups.committed("G", TOPIC, 0) == 2
    assert broker.store.queue_max_offset(LEASE_TOPIC, 0) == 0, "a NORMAL group's leases are not logged"


def test_stale_handles_are_refused(tmp_path):
    broker = Broker(tmp_path)
    broker.send(1)
    [delivery] = broker.pop().deliveries
    broker.change_invisible(delivery.receipt_handle, 1000)
    for call in (lambda: broker.groups.ack("G", TOPIC, delivery.receipt_handle),
                 lambda: broker.change_invisible(delivery.receipt_handle, 0),
                 lambda: broker.dead_letter(delivery.receipt_handle)):
        try:
            call()
        except QuorumqError as exc:
            assert exc.error is Error.INVALID_RECEIPT_HANDLE
        else:
            raise AssertionError("a stale handle was taken")


def test_a_broker_applying_the_lease_log_holds_the_masters_state(tmp_path):
    master = Broker(tmp_path / "m")
    master.send(4, queue_id=0)
    master.send(2, queue_id=1)
    first = master.pop(batch=4, queue_ids=(0, 1))
    master.groups.ack("G", TOPIC, first.deliveries[0].receipt_handle)  # the batch goes on: no record
    master.change_invisible(first.deliveries[1].receipt_handle, 5)  # a record, carrying the ack too
    slave = Broker(tmp_path / "s", store=master.store, clock=master.clock)  # the same log, copied
    slave.master = False
    assert slave.lease_log.queues == master.lease_log.queues
    with pytest.raises(QuorumqError):
        slave.groups.ack("G", TOPIC, first.deliveries[3].receipt_handle)  # a slave takes no ack, recorded or not
    master.groups.ack("G", TOPIC, first.deliveries[2].receipt_handle)
    slave.lease_log.catch_up()
    assert held(slave) == held(master) | {first.deliveries[2].message.queue_offset}, \
        "the slave holds every lease the master holds, and an ack not recorded yet"
    assert slave.groups.committed("G", TOPIC, 0) == 0
    master.clock.monotonic_now_ms += 100  # every lease expired: the pop would hand the batches out again
    before = dict(slave.lease_log.queues)
    with pytest.raises(QuorumqError) as refused:
        slave.pop(queue_ids=(0, 1))
    assert refused.value.error is Error.SERVICE_NOT_AVAILABLE, "a slave appends no lease record"
    assert slave.lease_log.queues == before, "a refused decision changes nothing"
    slave.groups.adopt_position("G", TOPIC, 0, 4)
    assert slave.groups.committed("G", TOPIC, 0) == 0, "the lease log, not the copied position, is the authority"


def test_restart_loads_the_state_then_the_rest_of_the_log_and_leases_last_their_time(tmp_path):
    broker = Broker(tmp_path)
    broker.send(3)
    first = broker.pop(invisible_ms=1000)
    broker.groups.persist()
    broker.clock.monotonic_now_ms += 600
    broker.groups.ack("G", TOPIC, first.deliveries[0].receipt_handle)  # after the file was written...
    broker.change_invisible(first.deliveries[2].receipt_handle, 200)  # ... and recorded with this change
    restarted = Broker(tmp_path, store=broker.store, clock=SteppedClock())
    queue = restarted.lease_log.queues[("G", TOPIC, 0)]
    assert [lease.offset for lease in queue.leases] == [1, 2], "the ack after the file came from the log"
    assert [lease.until_ms for lease in queue.leases] == [400, 200], "the time each had left, from now"
    assert restarted.pop().deliveries == []
    restarted.clock.monotonic_now_ms = 400
    assert offsets(restarted.pop()) == [1, 2]


def test_a_cut_of_the_log_keeps_the_state_and_applies_the_records_that_take_its_place(tmp_path):
    old_master = Broker(tmp_path / "old")
    old_master.send(2)
    first = old_master.pop()
    kept = old_master.store.max_offset
    old_master.groups.ack("G", TOPIC, first.deliveries[0].receipt_handle)
    old_master.change_invisible(first.deliveries[1].receipt_handle, 50)  # the record of both
    slave = Broker(tmp_path / "slave", store=old_master.store, clock=old_master.clock)
    slave.master = False
    changed = slave.lease_log.queues[("G", TOPIC, 0)]
    old_master.store.truncate(kept)  # the slave aligns with a new master that lacks that record
    slave.lease_log.log_cut()
    assert slave.lease_log.queues[("G", TOPIC, 0)] == changed, "the state is not rolled back"
    new_master = Broker(tmp_path / "new", store=old_master.store, clock=old_master.clock)
    assert held(new_master) == {0, 1}
    new_master.change_invisible(first.deliveries[1].receipt_handle, 5)  # its record where the cut one was
    slave.lease_log.catch_up()
    assert slave.lease_log.queues == new_master.lease_log.queues


def test_a_crash_after_a_restart_that_found_a_torn_tail_applies_the_records_since(tmp_path):
    """A torn tail can end the log below what fifoLeases.json covers; the records appended after
    that restart lie there too, and a crash before the next periodic write must not skip them."""
    broker = Broker(tmp_path)
    broker.send(2)
    first = broker.pop(batch=1)
    torn = broker.store.max_offset
    broker.groups.ack("G", TOPIC, first.deliveries[0].receipt_handle)  # a record, not waited for
    broker.groups.persist()
    broker.store.truncate(torn)  # the crash lost the ack's record, not the file
    restarted = Broker(tmp_path, store=broker.store, clock=broker.clock)
    [second] = restarted.pop(batch=1).deliveries  # its record where the lost one was, not waited for by a file
    crashed = Broker(tmp_path, store=broker.store, clock=broker.clock)
    assert held(crashed) == {second.message.queue_offset}, "the lease handed out after the restart"


def test_a_restart_that_finds_a_corrupt_lease_record_applies_those_before_it_and_opens(tmp_path):
    """A flipped bit in a lease record past what fifoLeases.json covers (F10 under W6): the records
    before it are applied and the broker opens, to cut its log there as a slave; raising, it could
    never start again."""
    broker = Broker(tmp_path / "broker", store=open_store(tmp_path / "store"))
    broker.send(4)
    broker.groups.persist()  # covers no record yet
    for _ in range(4):  # a receive's record, then its ack's (the batch done)
        [delivery] = broker.pop(batch=1).deliveries
        broker.groups.ack("G", TOPIC, delivery.receipt_handle)
    [corrupt] = broker.store.get_messages(LEASE_TOPIC, 0, 5, 1, 1 << 20).messages
    damaged = crash_with_flipped_byte(tmp_path, broker.store, corrupt.commit_log_offset + corrupt.store_size - 3)
    copy = new_store(damaged)
    assert copy.open().corrupt_offset == corrupt.commit_log_offset

    restarted = Broker(tmp_path / "broker", store=copy, clock=broker.clock)
    assert restarted.lease_log.cursor == 5, "the records before the corrupt one are applied"
    assert held(restarted) == {2}, "the state those records made: offsets 0 and 1 acked, 2 handed out"


def test_a_reset_of_a_fifo_queue_is_a_lease_record(tmp_path):
    broker = Broker(tmp_path)
    broker.send(3)
    broker.pop()
    broker.groups.commit("G", TOPIC, 0, 2)
    assert broker.lease_log.queues[("G", TOPIC, 0)] == fifo.FifoQueue(2, 2)
    assert offsets(broker.pop()) == [2]


def test_a_group_turned_fifo_goes_on_in_order_from_its_lowest_unacked_offset(tmp_path):
    broker = Broker(tmp_path, orderly=False)
    broker.send(4)
    unordered = broker.pop(batch=2)
    broker.groups.ack("G", TOPIC, unordered.deliveries[1].receipt_handle)
    broker.groups.group = lambda name: SubscriptionGroup("G", consume_message_orderly=True)
    assert offsets(broker.pop()) == [0, 1, 2], "from its lowest unacked offset, its leases ended"


def test_a_leased_message_comes_back_on_a_master_that_does_not_know_its_members_hold_it_yet(tmp_path):
    for orderly in (True, False):
        broker = Broker(tmp_path / str(orderly), orderly=orderly)
        broker.send(2)
        assert offsets(broker.pop(batch=1)) == [0]
        broker.readable_end = 0  # a new master: no member's copy is known yet
        broker.clock.monotonic_now_ms += 100
        again = broker.pop()
        assert offsets(again) == [0] and again.deliveries[0].attempt == 2, "not taken for gone"
        broker.groups.ack("G", TOPIC, again.deliveries[0].receipt_handle)
        assert broker.pop().deliveries == [], "what is not known to be held is not handed out"


def test_deliveries_behind_a_dead_letter_not_written_are_held_back_in_its_queue_only(tmp_path):
    broker = Broker(tmp_path)
    broker.send(3, queue_id=0)
    broker.send(2, queue_id=1)
    popped = broker.pop(batch=5, queue_ids=(0, 1))
    first, too_large, behind, *other_queue = popped.deliveries
    assert [(d.message.queue_id, d.message.queue_offset) for d in other_queue] == [(1, 0), (1, 1)]
    failed = [DeadLetter(too_large.message, too_large.receipt_handle, 1)]
    assert ahead_of(failed, popped.deliveries) == [first, *other_queue]
    assert ahead_of([], popped.deliveries) == popped.deliveries


def test_a_nack_decided_in_one_mode_leaves_a_lease_of_the_other_alone(tmp_path):
    broker = Broker(tmp_path)
    broker.send(1)
    [delivery] = broker.pop().deliveries
    records = broker.store.queue_max_offset(LEASE_TOPIC, 0)
    broker.groups.group = lambda name: SubscriptionGroup("G")  # no longer orderly: its FIFO leases have ended
    with pytest.raises(QuorumqError) as refused:
        broker.change_invisible(delivery.receipt_handle, 0)
    assert refused.value.error is Error.INVALID_RECEIPT_HANDLE
    assert broker.store.queue_max_offset(LEASE_TOPIC, 0) == records, "no lease record appended unawaited"


def test_a_group_that_changes_mode_keeps_its_position_when_nothing_new_lies_there(tmp_path):
    broker = Broker(tmp_path, orderly=False)
    broker.send(2)
    for delivery in broker.pop().deliveries:
        broker.groups.ack("G", TOPIC, delivery.receipt_handle)
    broker.groups.group = lambda name: SubscriptionGroup("G", consume_message_orderly=True)
    assert broker.pop().deliveries == [] and broker.pop().deliveries == [], "what was acked is not handed out again"
    broker.send(1)
    [third] = broker.pop().deliveries
    assert third.message.queue_offset == 2
    broker.groups.ack("G", TOPIC, third.receipt_handle)
    broker.groups.group = lambda name: SubscriptionGroup("G")  # and back
    assert broker.pop().deliveries == []
    assert broker.groups.offsets.get("G", TOPIC, 0) == 3, "the position is set as the queue changes mode"


@pytest.mark.parametrize("orderly", [True, False], ids=["fifo", "normal"])
def test_a_forwarded_message_is_held_while_its_copy_is_written(tmp_path, orderly):
    broker = Broker(tmp_path, orderly=orderly)
    broker.send(1)
    [delivery] = broker.pop(invisible_ms=100).deliveries
    letter = broker.dead_letter(delivery.receipt_handle)
    assert (letter.message.queue_offset, letter.attempts, letter.receipt_handle) == (0, 1, delivery.receipt_handle)
    broker.clock.monotonic_now_ms += 1000  # past the consumer's lease, within the writer's hold
    assert broker.pop().deliveries == [], "not handed out again while its copy is written"
    assert broker.dead_letter(delivery.receipt_handle).attempts == 1, "a retried forward still holds it"
    broker.groups.ack("G", TOPIC, letter.receipt_handle)  # the copy is stored
    assert broker.groups.committed("G", TOPIC, 0) == 1


def test_a_forward_of_a_message_no_longer_stored_records_no_hold(tmp_path):
    broker = Broker(tmp_path)
    broker.send(1)
    [delivery] = broker.pop().deliveries
    records = broker.store.queue_max_offset(LEASE_TOPIC, 0)
    broker.store.delete_topic(TOPIC)  # the store no longer holds the message, as after retention
    with pytest.raises(QuorumqError) as refused:
        broker.dead_letter(delivery.receipt_handle)
    assert refused.value.error is Error.INVALID_RECEIPT_HANDLE
    assert broker.store.queue_max_offset(LEASE_TOPIC, 0) == records, "no hold recorded for a failed forward"


def test_a_write_of_the_positions_alone_leaves_the_fifo_states_to_the_periodic_one(tmp_path):
    broker = Broker(tmp_path)
    broker.send(1)
    broker.pop()
    broker.groups.persist_offsets()  # a commit with SYNC_FLUSH, a slave's metadata copy
    assert broker.groups.offsets.path.exists() and not broker.lease_log.path.exists()
    broker.groups.persist()
    assert broker.lease_log.path.exists()


def failing_appends(broker, fail: Callable[[list, Callable], object]) -> None:
    """The broker's store appends its lease records through `fail(messages, append)` from now on."""
    append = broker.store.append
    broker.store.append = lambda messages: fail(messages, append)


def test_a_lease_record_the_store_fails_takes_nothing_of_its_queue_and_the_earlier_queues_go_out(tmp_path):
    broker = Broker(tmp_path)
    broker.send(2, queue_id=0)
    broker.send(2, queue_id=1)
    failing = [True]

    def queue_1_fails(messages, append):
        if failing[0] and b'"q":1' in messages[0].body:
            raise QuorumqError(Error.INTERNAL_ERROR, "an I/O error")
        return append(messages)

    failing_appends(broker, queue_1_fails)
    popped = broker.pop(batch=4, queue_ids=(0, 1))
    assert offsets(popped) == [0, 1] and popped.record_end == broker.store.max_offset
    assert ("G", TOPIC, 1) not in broker.lease_log.queues, "queue 1 took nothing"
    with pytest.raises(QuorumqError):  # nothing was taken before it: the receive fails
        broker.pop(batch=4, queue_ids=(1, 0))
    failing[0] = False
    assert offsets(broker.pop(batch=4, queue_ids=(1,))) == [0, 1]


def test_a_lease_record_the_log_took_but_could_not_index_is_a_change_like_any_other(tmp_path):
    """A full disk can fail the consume-queue entry of a record the commit log took: the record
    is stored and every replica applies it, so the receive hands its batch out (waiting for its
    copies), and an ack or a nack so recorded is answered, not refused with a handle gone stale."""
    broker = Broker(tmp_path, retry_max_times=0)  # one delivery: a batch thrown away would be dead-lettered unseen
    broker.send(2)

    def unindexed(messages, append):
        raise UnindexedAppend(QuorumqError(Error.DISK_FULL, "the consume queue's disk is full"), append(messages))

    failing_appends(broker, unindexed)
    popped = broker.pop()
    assert offsets(popped) == [0, 1] and popped.record_end == broker.store.max_offset
    assert held(broker) == {0, 1}
    first, second = popped.deliveries
    handle, record_end = broker.change_invisible(second.receipt_handle, 50)
    assert record_end == broker.store.max_offset
    assert not broker.groups.ack("G", TOPIC, first.receipt_handle)
    assert broker.groups.ack("G", TOPIC, handle), "the batch's last ack ends it"
    assert broker.groups.committed("G", TOPIC, 0) == 2
