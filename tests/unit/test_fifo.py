"""FIFO queues (core/fifo.py): one outstanding batch per queue, handed out again together and in
order, dead letters held before anything behind them goes, and state records that rebuild the
same state wherever they are applied. The randomized test drives a master, consumers, failovers
and restarts from a seed, and checks what consumers would see."""

import random

import pytest

from quorumq.core import fifo
from quorumq.core.fifo import FifoLease, FifoQueue, Step

KEY = ("G", "T", 3)


def batch_of(*offsets: int, end: int, now_ms: int = 0, invisible_ms: int = 100) -> FifoQueue:
    return fifo.next_batch(FifoQueue(offsets[0] if offsets else end, offsets[0] if offsets else end),
                           {offset: offset + 100 for offset in offsets}, end, now_ms, invisible_ms)


def test_idle_queue_reads_next_batch_and_filtered_offsets_count_as_done():
    queue = FifoQueue(5, 5)
    assert fifo.next_step(queue, 0, 3) == (Step.NEXT_BATCH, ())
    queue = fifo.next_batch(queue, {6: 1, 8: 2}, end=10, now_ms=0, invisible_ms=100)
    assert (queue.committed, queue.end) == (5, 10)
    assert [(lease.offset, lease.attempt, lease.until_ms) for lease in queue.leases] == [(6, 1, 100), (8, 1, 100)]
    skipped = fifo.next_batch(FifoQueue(10, 10), {}, end=14, now_ms=0, invisible_ms=100)
    assert skipped == FifoQueue(14, 14), "a batch the filter emptied is done at once"


def test_queue_is_blocked_while_any_lease_of_the_batch_is_unexpired():
    queue = batch_of(0, 1, 2, end=3)
    queue = fifo.change_invisible(queue, 0, 100, 7, now_ms=10, invisible_ms=0)  # a nack of the first
    assert fifo.next_step(queue, 10, 3) == (Step.BLOCKED, ()), "1 and 2 are still held"
    queue = fifo.ack(queue, 1, 101)
    queue = fifo.change_invisible(queue, 2, 102, 8, now_ms=20, invisible_ms=500)
    assert fifo.next_step(queue, 519, 3) == (Step.BLOCKED, ())
    step, leases = fifo.next_step(queue, 520, 3)
    assert step is Step.REDELIVER and [lease.offset for lease in leases] == [0, 2]


def test_redelivery_hands_out_every_lease_left_in_order_with_the_next_attempt():
    queue = batch_of(0, 2, 3, end=4)
    queue = fifo.redeliver(queue, {0: 10, 2: 12, 3: 13}, (), now_ms=100, invisible_ms=50)
    assert [(lease.offset, lease.token, lease.attempt, lease.until_ms) for lease in queue.leases] == [
        (0, 10, 2, 150), (2, 12, 2, 150), (3, 13, 2, 150)]
    assert fifo.ack(queue, 0, 100) is None, "the first delivery's handle is stale"


def test_redelivery_of_a_prefix_blocks_the_rest_behind_it():
    queue = fifo.redeliver(batch_of(0, 1, 2, end=3), {0: 10}, (), now_ms=100, invisible_ms=50)
    assert fifo.next_step(queue, 120, 3) == (Step.BLOCKED, ())
    step, leases = fifo.next_step(fifo.ack(queue, 0, 10), 120, 3)
    assert step is Step.REDELIVER and [lease.offset for lease in leases] == [1, 2]
    with pytest.raises(AssertionError):
        fifo.redeliver(batch_of(0, 1, 2, end=3), {1: 11}, (), now_ms=100, invisible_ms=50)  # not a prefix


def test_messages_no_longer_stored_are_dropped_on_redelivery():
    queue = fifo.redeliver(batch_of(0, 1, 2, end=3), {2: 12}, {0, 1}, now_ms=100, invisible_ms=50)
    assert [lease.offset for lease in queue.leases] == [2] and queue.committed == 0
    assert fifo.redeliver(batch_of(0, 1, end=3), {}, {0, 1}, now_ms=100, invisible_ms=50) == FifoQueue(3, 3)


def test_batch_done_when_every_lease_is_acked_and_next_batch_starts_at_its_end():
    queue = batch_of(4, 6, end=8)
    queue = fifo.ack(queue, 6, 106)
    assert (queue.committed, queue.end) == (4, 8), "the position stays at the batch's start until it is done"
    queue = fifo.ack(queue, 4, 104)
    assert queue == FifoQueue(8, 8)
    assert fifo.next_step(queue, 0, 3) == (Step.NEXT_BATCH, ())


def test_stale_handles_change_nothing():
    queue = batch_of(0, end=1)
    assert fifo.ack(queue, 0, 999) is None
    assert fifo.ack(queue, 5, 100) is None
    assert fifo.change_invisible(queue, 0, 999, 1, now_ms=0, invisible_ms=0) is None
    changed = fifo.change_invisible(queue, 0, 100, 1, now_ms=0, invisible_ms=0)
    assert fifo.ack(changed, 0, 100) is None and fifo.ack(changed, 0, 1) == FifoQueue(1, 1)


def test_spent_leases_are_held_for_the_dead_letter_writer_before_anything_else_goes():
    queue = fifo.redeliver(batch_of(0, 1, end=2), {0: 10, 1: 11}, (), now_ms=100, invisible_ms=50)  # attempt 2
    queue = fifo.ack(fifo.change_invisible(queue, 0, 10, 20, now_ms=110, invisible_ms=0), 1, 11)
    step, dead = fifo.next_step(queue, 110, max_attempts=2)
    assert step is Step.DEAD_LETTER and [lease.offset for lease in dead] == [0]
    held = fifo.hold_dead_letters(queue, {0: 30}, now_ms=110, hold_ms=1000)
    assert held.leases == (FifoLease(0, 30, 2, 1110),), "held, not delivered: the attempt count stays"
    assert fifo.next_step(held, 1109, 2) == (Step.BLOCKED, ())
    assert fifo.next_step(held, 1110, 2)[0] is Step.DEAD_LETTER, "a write that failed is tried again"
    assert fifo.ack(held, 0, 30) == FifoQueue(2, 2)


def test_only_spent_leases_go_to_the_dead_letter_writer_the_rest_wait():
    queue = fifo.redeliver(batch_of(0, 1, end=2), {0: 10}, (), now_ms=100, invisible_ms=50)  # 0: attempt 2
    step, dead = fifo.next_step(queue, 150, max_attempts=2)
    assert step is Step.DEAD_LETTER and [lease.offset for lease in dead] == [0]
    held = fifo.hold_dead_letters(queue, {0: 30}, now_ms=150, hold_ms=1000)
    assert held.lease(1).token == 101 and fifo.next_step(held, 200, 2) == (Step.BLOCKED, ())
    step, leases = fifo.next_step(fifo.ack(held, 0, 30), 200, 2)
    assert step is Step.REDELIVER and [lease.offset for lease in leases] == [1]


def test_skip_to_moves_an_idle_queue_forward_only():
    assert fifo.skip_to(FifoQueue(3, 3), 10) == FifoQueue(10, 10)
    assert fifo.skip_to(FifoQueue(12, 12), 10) == FifoQueue(12, 12)
    with pytest.raises(AssertionError):
        fifo.skip_to(batch_of(0, end=1), 10)


def test_state_invariants_are_checked():
    with pytest.raises(AssertionError):
        FifoQueue(2, 1)
    with pytest.raises(AssertionError):
        FifoQueue(0, 2)  # a batch with no lease left is done
    with pytest.raises(AssertionError):
        FifoQueue(0, 2, (FifoLease(2, 1, 1, 0),))  # outside [committed, end)
    with pytest.raises(AssertionError):
        FifoQueue(0, 3, (FifoLease(1, 1, 1, 0), FifoLease(0, 1, 1, 0)))  # out of order


def test_record_is_compact_and_carries_the_time_left():
    queue = batch_of(7, 9, end=10, now_ms=1000, invisible_ms=30_000)
    body = fifo.encode_record(KEY, queue, now_ms=11_000)
    assert body == (b'{"g":"G","t":"T","q":3,"c":7,"e":10,'
                    b'"l":[[7,107,1,20000],[9,109,1,20000]]}')
    key, applied = fifo.decode_record(body, now_ms=50)
    assert key == KEY
    assert applied.leases == (FifoLease(7, 107, 1, 20_050), FifoLease(9, 109, 1, 20_050))
    expired = fifo.encode_record(KEY, queue, now_ms=99_000)
    assert fifo.decode_record(expired, now_ms=5)[1].leases[0].until_ms == 5, "time left never goes below 0"
    assert fifo.decode_record(fifo.encode_record(KEY, FifoQueue(4, 4), 0), 0) == (KEY, FifoQueue(4, 4))


@pytest.mark.parametrize("body", [
    b"not json", b"\xff", b"[]", b'{"g":"G"}',
    b'{"g":"","t":"T","q":0,"c":0,"e":0,"l":[]}',
    b'{"g":"G","t":"T","q":-1,"c":0,"e":0,"l":[]}',
    b'{"g":"G","t":"T","q":0,"c":2,"e":1,"l":[]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":1,"l":[]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":1,"l":[[1,1,1,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[1,1,1,0],[0,1,1,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[0,1,0,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[0,1,1]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[0,1.5,1,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[0,true,1,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":2,"l":[[0,9223372036854775808,1,0]]}',
    b'{"g":"G","t":"T","q":0,"c":0,"e":0,"l":[],"x":1}',
])
def test_records_that_break_a_rule_are_refused(body):
    with pytest.raises(ValueError):
        fifo.decode_record(body, now_ms=0)


# The randomized test: a master, its records, consumers, failovers and restarts.

MESSAGES = 60
MAX_ATTEMPTS = 3
HOLD_MS = 40


class Run:
    """A master's FIFO queue driven by random events, with what consumers hold as the truth to
    check it against. Records the master makes are applied by a slave as they come (same time)
    and kept with whether the master waited for their copies (or its flush): a failover or a
    crash keeps every waited record and any prefix of the rest. An ack that leaves its batch
    going on makes no record, as the broker's (broker/lease_log.py change_unrecorded): the
    queue's next record carries it. The master writes its state now and then, as fifoLeases.json
    (LeaseLog.persist), and a restart applies that, then the records it does not cover."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self.queue = FifoQueue(0, 0)
        self.records: list[tuple[bytes, int, bool]] = []  # body, time made, waited for
        self.slave: dict = {}
        self.held: dict[int, tuple[int, int]] = {}  # offset -> (token, until) a consumer holds
        self.handed: set[int] = set()  # ever handed to a consumer
        self.done: set[int] = set()  # acked or dead-lettered, as consumers and the DLQ saw it
        self.dead_lettered: set[int] = set()
        self.writing: list[tuple[int, int]] = []  # dead letters being written: offset, token
        self.gone = 0  # offsets below this are no longer stored
        self.file = (fifo.record_fields(KEY, self.queue, 0), 0)  # fifoLeases.json: the state, records covered
        self.changed = False  # since the file was written

    def token(self) -> int:
        return self.rng.getrandbits(63)

    def adopt(self, queue: FifoQueue, waited: bool) -> None:
        body = fifo.encode_record(KEY, queue, self.now)
        self.records.append((body, self.now, waited))
        key, applied = fifo.decode_record(body, self.now)
        self.slave[key] = applied
        self.queue = queue
        self.changed = True
        # The same state: an expired lease is expired whenever it expired.
        assert fifo.record_fields(KEY, self.slave[KEY], self.now) == fifo.record_fields(KEY, queue, self.now), \
            "the slave's state is the master's"

    def acked(self, queue: FifoQueue) -> None:
        """An ack (a consumer's, or a dead letter's removal): recorded only when it ends its batch.
        Until the next record the slave holds every lease the master holds, and the acked ones
        too: a failover delivers them once more, in order."""
        if not queue.leases:
            self.adopt(queue, waited=False)  # an ack's record is not waited for
            return
        self.queue = queue
        self.changed = True
        slave = fifo.record_fields(KEY, self.slave[KEY], self.now)
        master = fifo.record_fields(KEY, queue, self.now)
        assert (slave["c"], slave["e"]) == (master["c"], master["e"]), "an ack that is not recorded ends no batch"
        assert all(lease in slave["l"] for lease in master["l"]), "the slave holds every lease the master holds"

    def hand_out(self, queue: FifoQueue, offsets: list[int]) -> None:
        """The checks on what a receive answers, against what consumers hold."""
        assert offsets == sorted(offsets)
        unexpired = [offset for offset, (_, until) in self.held.items() if until > self.now]
        assert not unexpired, f"handed {offsets} while consumers hold {unexpired} unexpired"
        skipped = [offset for offset in self.handed - self.done - set(offsets) if self.gone <= offset < offsets[-1]]
        assert not skipped, f"handed {offsets} ahead of {skipped}, neither acked nor dead-lettered"
        self.adopt(queue, waited=True)
        for offset in offsets:
            lease = queue.lease(offset)
            assert lease.attempt <= MAX_ATTEMPTS
            self.held[offset] = (lease.token, lease.until_ms)
            self.handed.add(offset)
            self.done.discard(offset)  # an ack lost in a failover: delivered once more

    def receive(self) -> None:
        room, invisible = self.rng.randint(1, 5), self.rng.randint(5, 60)
        step, leases = fifo.next_step(self.queue, self.now, MAX_ATTEMPTS)
        if step is Step.DEAD_LETTER:
            tokens = {lease.offset: self.token() for lease in leases}
            self.adopt(fifo.hold_dead_letters(self.queue, tokens, self.now, HOLD_MS), waited=False)
            self.writing += tokens.items()
        elif step is Step.REDELIVER:
            gone = [lease.offset for lease in leases if lease.offset < self.gone]
            tokens = {lease.offset: self.token() for lease in leases if lease.offset >= self.gone}
            tokens = dict(list(tokens.items())[:room])
            queue = fifo.redeliver(self.queue, tokens, gone, self.now, invisible)
            if tokens:
                self.hand_out(queue, list(tokens))
            else:
                self.adopt(queue, waited=False)
        elif step is Step.NEXT_BATCH:
            queue = fifo.skip_to(self.queue, self.gone)
            passed = [offset for offset in range(queue.end, MESSAGES) if self.rng.random() < 0.8][:room]
            end = passed[-1] + 1 if len(passed) == room else MESSAGES
            queue = fifo.next_batch(queue, {offset: self.token() for offset in passed}, end, self.now, invisible)
            if passed:
                self.hand_out(queue, passed)
            elif queue != self.queue:
                self.adopt(queue, waited=False)

    def consumer_acks(self) -> None:
        if self.held:
            offset = self.rng.choice(sorted(self.held))
            token, _ = self.held.pop(offset)
            acked = fifo.ack(self.queue, offset, token)
            if acked is not None:
                self.acked(acked)
                self.done.add(offset)

    def consumer_nacks(self) -> None:
        if self.held:
            offset = self.rng.choice(sorted(self.held))
            token, _ = self.held[offset]
            new_token = self.token()
            changed = fifo.change_invisible(self.queue, offset, token, new_token, self.now, self.rng.randint(0, 30))
            if changed is not None:
                self.adopt(changed, waited=True)
                self.held[offset] = (new_token, changed.lease(offset).until_ms)
            else:
                del self.held[offset]  # the consumer learns its handle is stale

    def dead_letter_written(self) -> None:
        if self.writing:
            offset, token = self.writing.pop(0)
            removed = fifo.ack(self.queue, offset, token)
            if removed is not None:
                assert self.queue.lease(offset).attempt == MAX_ATTEMPTS, "a dead letter before its last attempt"
                self.acked(removed)
                self.dead_lettered.add(offset)
                self.done.add(offset)
                self.held.pop(offset, None)

    def cut(self) -> None:
        """What survives a failover or a crash: every waited record and any prefix of the rest."""
        last_waited = max((index for index, (_, _, waited) in enumerate(self.records) if waited), default=-1)
        self.records = self.records[:self.rng.randint(last_waited + 1, len(self.records))]

    def failover(self) -> None:
        """A slave becomes master: it applied what survives, each record some time after the master
        made it; the log after that is lost. Its own file covers what it applied."""
        self.cut()
        state = {KEY: FifoQueue(0, 0)}
        for body, made, _ in self.records:
            key, queue = fifo.decode_record(body, made + self.rng.randint(0, 10))
            state[key] = queue
        self.queue = state[KEY]
        self.slave = dict(state)
        self.file, self.changed = (fifo.record_fields(KEY, self.queue, self.now), len(self.records)), False
        self.writing.clear()  # the old master's dead-letter writes die with it

    def persist(self) -> None:
        """The periodic write of fifoLeases.json, when the state changed since the last."""
        if self.changed:
            self.file, self.changed = (fifo.record_fields(KEY, self.queue, self.now), len(self.records)), False

    def restart(self) -> None:
        """A clean restart: the state is written as the broker closes, then loaded."""
        self.persist()
        self.load()

    def crash_restart(self) -> None:
        """A crash: the log keeps what survives (a torn tail may end it below what the file
        covers), and the restart loads the file as last written."""
        self.cut()
        self.load()

    def load(self) -> None:
        """LeaseLog.load after a restart: the file's state, then the records from the one it
        covers, applied some time after the restart. A log that ends below that (a torn tail)
        has the file written again at once (LeaseLog.log_cut)."""
        now = self.now + self.rng.randint(0, 100)
        fields, covered = self.file
        key, queue = fifo.from_fields(fields, now)
        if covered > len(self.records):
            self.file = (fifo.record_fields(KEY, queue, self.now), len(self.records))
        applied = self.records[self.file[1]:]
        for body, _, _ in applied:
            key, queue = fifo.decode_record(body, now)
        self.queue, self.slave, self.changed = queue, {key: queue}, bool(applied)
        self.writing.clear()

    def step(self) -> None:
        self.now += self.rng.randint(0, 15)
        if self.rng.random() < 0.01:
            self.gone = min(self.gone + self.rng.randint(1, 3), MESSAGES)  # retention
        action = self.rng.choices(
            [self.receive, self.consumer_acks, self.consumer_nacks, self.dead_letter_written, self.failover,
             self.restart, self.crash_restart, self.persist], weights=[40, 30, 10, 10, 2, 2, 2, 5])[0]
        action()
        # The consumers' leases held past their time are gone from their view.
        self.held = {offset: held for offset, held in self.held.items() if held[1] > self.now - 200}


@pytest.mark.parametrize("seed", range(20))
def test_random_runs_never_hand_out_ahead_of_an_outstanding_message(seed):
    run = Run(seed)
    for _ in range(3000):
        run.step()
    # The queue drains: each message was acked or dead-lettered, dead letters only when spent.
    for _ in range(20_000):
        if run.queue.end == MESSAGES and not run.queue.leases:
            break
        run.now += 20
        run.receive()
        run.consumer_acks() if run.rng.random() < 0.9 else run.consumer_nacks()
        while run.writing:
            run.dead_letter_written()
    assert run.queue == FifoQueue(MESSAGES, MESSAGES), f"seed {seed}: the queue never drained: {run.queue}"
