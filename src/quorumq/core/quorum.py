"""RIP-34 quorum write: how many copies a put needs, which slaves are in sync, when a waiting put
is released. Pure decision logic: no I/O, no asyncio, no clock reads; time comes in as numbers
read by the caller from its own clock.

The put path (spec rocketmq-ha.md 1.2) asks `plan_put` before appending. A plan with `rejected`
means IN_SYNC_REPLICAS_NOT_ENOUGH and nothing is appended. Otherwise the put appends, and when
`need_ack > 1` it waits in an `AckTracker` until `need_ack` copies, the master's included, hold
everything below the put's end offset, or until its deadline (FLUSH_SLAVE_TIMEOUT; the message
stays on the master). `final_status` merges the flush and replica outcomes.

Decisions on RocketMQ's quirks (spec 1.2, 1.3, 5), KEEP or FIX:

1. FIX. A slave counts once, however many connections it has. Slaves are known by broker id; a
   new handshake from the same id starts a new session and the old session's reports are ignored
   (RocketMQ's GroupTransferService counts connections, and one slave with two connections counts
   twice).
2. FIX. A slave may only report offsets it can hold: written <= what the master sent to it in
   this session (or the offset it said it had at the handshake), flushed <= written, and neither
   goes back within a session. Anything else is `AckRejected`, a protocol error that closes the
   connection (RocketMQ #3015, #1155: the master trusted any reported offset).
3. FIX. A slave that has connected but not yet reported an ack is NOT in sync and does not count
   toward any quorum. RocketMQ starts slaveAckOffset at -1, so such a slave counts as in sync
   while the master offset is below haMaxGapNotInSync - 1; that overstates the copies for one
   round trip. Here the slave acks right after its handshake, so the window is that round trip.
4. KEEP. The in-sync test is strict: `master_offset - ack < haMaxGapNotInSync`, default 256 MiB
   (the code's value; the seeds' and docs' "256K" is wrong). `in_sync = min(alive, ha_in_sync)`.
5. KEEP. The pre-check (IN_SYNC_REPLICAS_NOT_ENOUGH without appending) runs only with
   enableSlaveActingMaster (PR #4554); a plain SYNC_MASTER waits and times out.
6. KEEP. `need_ack <= 1` never waits. RocketMQ's GroupTransferService has an ackNums=1 branch
   that waits for push2SlaveMaxOffset; CommitLog never reaches it, and quorumq has no such branch.
7. KEEP. With need_ack >= 2 and no slave connected, a put waits for its deadline and times out.
8. KEEP. Any reporting slave's ack counts toward a waiting put, in sync or not: a slave that
   catches up releases puts (spec scenario 23).
9. KEEP (from RocketMQ's fix of #1244). Every waiting put has an absolute deadline.
10. KEEP. Controller mode (spec 1.2, 2.8): the pre-check refuses when the SyncStateSet is smaller
    than minInSyncReplicas; with allAckInSyncStateSet a put needs every member of the set
    (`ALL_ACK`; during a pending change, of the union of the confirmed and the proposed set, the
    #5663 fix), otherwise inSyncReplicas copies from any slave, as RocketMQ counts them. A set of
    the master alone needs nothing more. Adaptive degradation does not apply in controller mode.
11. FIX, with enableSlaveActingMaster (where a new put is planned against the live replicas).
    When a slave is lost, puts already waiting are planned again as a new put would be: with
    adaptive degradation they need the degraded count at once (`AckTracker.lower_need`); a put
    that now needs more copies than the master and its attached slaves can give ends at once with
    FLUSH_SLAVE_TIMEOUT (`AckTracker.fail_unreachable`), where the next put would be refused.
    RocketMQ leaves them waiting for slaveTimeout. A plain SYNC_MASTER still waits, as RocketMQ.
"""

import heapq
import itertools
from collections import deque
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from enum import Enum

from quorumq import limits
from quorumq.core.put_status import PutStatus
from quorumq.errors import Error, QuorumqError

ALL_ACK = -1  # need_ack of a put that needs every SyncStateSet member (MixAll.ALL_ACK_IN_SYNC_STATE_SET)


class BrokerRole(str, Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, slots=True)
class QuorumSettings:
    """The config keys the quorum decisions read, with RocketMQ's defaults."""

    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    in_sync_replicas: int = 1  # inSyncReplicas: copies a put needs, the master included
    min_in_sync_replicas: int = 1  # minInSyncReplicas: the floor of adaptive degradation
    enable_auto_in_sync_replicas: bool = False  # enableAutoInSyncReplicas
    ha_max_gap_not_in_sync: int = limits.HA_MAX_GAP_NOT_IN_SYNC_DEFAULT  # haMaxGapNotInSync, bytes
    enable_slave_acting_master: bool = False  # enableSlaveActingMaster: gates the pre-check
    controller_mode: bool = False  # enableControllerMode: the SyncStateSet decides (decision 10)
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet

    def __post_init__(self) -> None:
        if self.in_sync_replicas < 1:
            raise ValueError(f"inSyncReplicas must be at least 1, got {self.in_sync_replicas}")
        if self.min_in_sync_replicas < 1:
            raise ValueError(f"minInSyncReplicas must be at least 1, got {self.min_in_sync_replicas}")
        if self.ha_max_gap_not_in_sync < 1:
            raise ValueError(f"haMaxGapNotInSync must be positive, got {self.ha_max_gap_not_in_sync}")


@dataclass(frozen=True, slots=True)
class AckPlan:
    need_ack: int  # copies that must hold the put, the master included (<= 1: nothing waits), or ALL_ACK
    rejected: bool  # IN_SYNC_REPLICAS_NOT_ENOUGH: append nothing

    @property
    def waits(self) -> bool:
        return not self.rejected and needs_copies(self.need_ack)

    def met_by(self, in_sync: int, sync_state_set_size: int = 1) -> bool:
        """Whether a put planned so would be acknowledged by the copies in sync now (`in_sync`,
        the master included): what a writable group means to `quorumq up`."""
        if self.rejected:
            return False
        if self.need_ack == ALL_ACK:
            return in_sync >= sync_state_set_size
        return in_sync >= self.need_ack


def needs_copies(need_ack: int) -> bool:
    """Whether a put needing `need_ack` waits for slaves at all."""
    return need_ack == ALL_ACK or need_ack > 1


def calc_need_ack(in_sync: int, in_sync_replicas: int, min_in_sync_replicas: int, auto: bool) -> int:
    """RocketMQ's calcNeedAckNums: inSyncReplicas, degraded toward `in_sync` (never below the
    floor minInSyncReplicas) when enableAutoInSyncReplicas is on."""
    assert in_sync >= 1, in_sync  # the master is always in sync with itself
    need = in_sync_replicas
    if auto:
        need = max(min(need, in_sync), min_in_sync_replicas)
    return need


def needs_ha(role: BrokerRole, wait_store_msg_ok: bool) -> bool:
    """Only a SYNC_MASTER waits for replicas, and only for messages that ask to wait."""
    return wait_store_msg_ok and role is BrokerRole.SYNC_MASTER


def plan_put(settings: QuorumSettings, *, wait_store_msg_ok: bool, alive_replicas: int,
             ha_in_sync: int, sync_state_set_size: int = 1) -> AckPlan:
    """The decision taken before appending (spec 1.2).

    `alive_replicas` is the broker member group's size (see `alive_replicas_in_group`);
    `ha_in_sync` is `AckTracker.in_sync_count` at the write position before the append;
    `sync_state_set_size` (controller mode) counts the SyncStateSet, the master included.
    """
    if not needs_ha(settings.broker_role, wait_store_msg_ok):
        return AckPlan(1, False)
    need = settings.in_sync_replicas
    if settings.controller_mode:
        if sync_state_set_size < settings.min_in_sync_replicas:
            return AckPlan(need, True)
        return AckPlan(ALL_ACK if settings.all_ack_in_sync_state_set else need, False)
    if settings.enable_slave_acting_master:
        in_sync = min(alive_replicas, ha_in_sync)
        need = calc_need_ack(in_sync, settings.in_sync_replicas, settings.min_in_sync_replicas,
                             settings.enable_auto_in_sync_replicas)
        if need > in_sync:
            return AckPlan(need, True)
    return AckPlan(need, False)


def final_status(flush_status: PutStatus, replica_status: PutStatus) -> PutStatus:
    """The put's outcome: a replica failure wins over a flush failure (spec scenario 18)."""
    if replica_status is not PutStatus.PUT_OK:
        return replica_status
    return flush_status


def alive_replicas_in_group(member_broker_ids: Collection[int], self_broker_id: int) -> int:
    """The alive-replica count from the name server's broker member group: its members, plus
    this broker when the group lacks it. Before the first answer the count is totalReplicas."""
    members = set(member_broker_ids)
    return len(members) + (self_broker_id not in members)


def is_in_sync(master_offset: int, ack_offset: int | None, gap: int) -> bool:
    """A slave is in sync iff it has acked and lags the master by strictly less than `gap`."""
    return ack_offset is not None and master_offset - ack_offset < gap


class AckRejected(Exception):
    """A slave reported offsets it cannot hold: a protocol error, the connection is closed."""


@dataclass(slots=True)
class SlaveProgress:
    """What the master knows of one slave in its current session."""

    session: int
    start_offset: int  # the slave's max offset at its handshake: where streaming began
    acks_flushed: bool  # the slave acks what it has fsync'd (SYNC_FLUSH) rather than written
    sent_offset: int  # the end of what was handed to this slave's connection
    written_offset: int | None = None  # None until the first ack
    flushed_offset: int | None = None

    @property
    def ack_offset(self) -> int | None:
        """The offset the quorum counts: fsync'd bytes for a SYNC_FLUSH slave, else written."""
        return self.flushed_offset if self.acks_flushed else self.written_offset


@dataclass(slots=True, eq=False)
class _Waiter:
    token: Hashable
    next_offset: int
    need_ack: int
    deadline: float
    arrival: int  # the order puts were added in; releases come back in this order
    done: bool = False


Released = list[tuple[Hashable, PutStatus]]


class AckTracker:
    """Slave acks and the puts waiting for them.

    Waiting puts live in one queue per need_ack, each in next_offset order, and in a deadline
    heap; a put released one way is marked done and dropped lazily from the other.
    """

    def __init__(self, slaves_max: int = limits.REPLICATION_SLAVES_MAX,
                 waiters_max: int = limits.REPLICATION_WAITERS_MAX) -> None:
        assert slaves_max >= 1 and waiters_max >= 1
        self._slaves_max = slaves_max
        self._waiters_max = waiters_max
        self._slaves: dict[int, SlaveProgress] = {}
        self._sessions = itertools.count(1)
        self._queues: dict[int, deque[_Waiter]] = {}  # need_ack -> waiters by next_offset
        self._deadlines: list[tuple[float, int, _Waiter]] = []  # a heap; the int breaks ties
        self._arrivals = itertools.count()
        self._waiting = 0
        self._members: frozenset[int] = frozenset()  # the SyncStateSet's slaves, for ALL_ACK puts

    # Slaves.

    @property
    def slaves(self) -> dict[int, SlaveProgress]:
        """A read-only view: slave id -> progress. Do not mutate."""
        return self._slaves

    @property
    def waiting(self) -> int:
        return self._waiting

    def attach(self, slave_id: int, start_offset: int, acks_flushed: bool = False) -> int:
        """A slave completed a handshake saying its log ends at `start_offset`; returns the new
        session. A session of the same slave still attached is replaced, and its reports from
        now on are ignored."""
        if slave_id not in self._slaves and len(self._slaves) >= self._slaves_max:
            raise AckRejected(f"slave {slave_id} refused: {self._slaves_max} slaves are attached")
        if start_offset < 0:
            raise AckRejected(f"slave {slave_id} says its log ends at {start_offset}")
        session = next(self._sessions)
        self._slaves[slave_id] = SlaveProgress(session, start_offset, acks_flushed, start_offset)
        return session

    def detach(self, slave_id: int, session: int) -> bool:
        """The session's connection is gone; False when a newer session had replaced it."""
        progress = self._slaves.get(slave_id)
        if progress is None or progress.session != session:
            return False
        del self._slaves[slave_id]
        return True

    def on_sent(self, slave_id: int, session: int, end_offset: int) -> None:
        """Bytes up to `end_offset` were handed to the slave's connection."""
        progress = self._current(slave_id, session)
        if progress is None:
            return
        assert end_offset >= progress.sent_offset, (end_offset, progress.sent_offset)
        progress.sent_offset = end_offset

    def on_slave_ack(self, slave_id: int, session: int, written_offset: int,
                     flushed_offset: int) -> Released:
        """A slave's report; returns the puts it releases, in order."""
        progress = self._current(slave_id, session)
        if progress is None:
            return []
        if not 0 <= flushed_offset <= written_offset <= progress.sent_offset:
            raise AckRejected(f"slave {slave_id} reports written {written_offset}, flushed "
                              f"{flushed_offset}, but was sent up to {progress.sent_offset}")
        if progress.written_offset is not None and progress.flushed_offset is not None and (
                written_offset < progress.written_offset or flushed_offset < progress.flushed_offset):
            raise AckRejected(f"slave {slave_id} goes back from written {progress.written_offset}, "
                              f"flushed {progress.flushed_offset} to {written_offset}, {flushed_offset}")
        previous = progress.ack_offset
        progress.written_offset = written_offset
        progress.flushed_offset = flushed_offset
        if progress.ack_offset == previous:
            return []
        return self._release()

    def _current(self, slave_id: int, session: int) -> SlaveProgress | None:
        progress = self._slaves.get(slave_id)
        if progress is None or progress.session != session:
            return None  # a replaced or detached session: its late reports are ignored
        return progress

    def set_sync_state_set(self, slave_ids: frozenset[int]) -> Released:
        """The slaves an ALL_ACK put waits for (controller mode: the SyncStateSet without the
        master); returns the puts a smaller set releases."""
        self._members = frozenset(slave_ids)
        return self._release()

    # Counting.

    def in_sync_count(self, master_offset: int, gap: int) -> int:
        """DHS.inSyncReplicasNums: the master plus every slave lagging by less than `gap`."""
        return 1 + sum(is_in_sync(master_offset, progress.ack_offset, gap)
                       for progress in self._slaves.values())

    def is_slave_ok(self, master_offset: int, gap: int) -> bool:
        """Legacy DHS.isSlaveOK (the put path no longer asks): some slave is in sync."""
        return self.in_sync_count(master_offset, gap) > 1

    def quorum_offset(self, copies: int, master_offset: int) -> int | None:
        """The highest offset held by `copies` copies, the master's included; None if fewer
        slaves have reported than that needs."""
        assert copies >= 1, copies
        if copies == 1:
            return master_offset
        acks = sorted((progress.ack_offset for progress in self._slaves.values()
                       if progress.ack_offset is not None), reverse=True)
        if len(acks) < copies - 1:
            return None
        return min(master_offset, acks[copies - 2])

    def confirmed_offset(self, master_offset: int) -> int:
        """The offset every attached slave that has reported holds (the master's own end when no
        slave has reported): what a master tells its slaves is safe."""
        acks = [progress.ack_offset for progress in self._slaves.values() if progress.ack_offset is not None]
        return min([master_offset, *acks])

    def all_members_hold(self, master_offset: int) -> int | None:
        """What every SyncStateSet member holds, capped by the master's end: what an ALL_ACK put
        waits for. None while a member's copy is unknown (not connected, or not acking yet)."""
        threshold = self._threshold(ALL_ACK)
        return None if threshold is None else min(master_offset, threshold)

    # Waiting puts.

    def add_waiter(self, token: Hashable, next_offset: int, need_ack: int, deadline: float) -> PutStatus | None:
        """A put that ends at `next_offset` needs `need_ack` copies by `deadline`.

        Returns PUT_OK when it needs no waiting; otherwise None, and the put's status comes back
        later, paired with `token`, from `on_slave_ack`, `expire` or `release_all`.
        """
        if next_offset < 0 or need_ack < ALL_ACK:
            raise ValueError(f"bad waiter: next offset {next_offset}, need {need_ack}")
        if not needs_copies(need_ack):
            return PutStatus.PUT_OK
        threshold = self._threshold(need_ack)
        if threshold is not None and threshold >= next_offset:
            return PutStatus.PUT_OK
        if self._waiting >= self._waiters_max:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"{self._waiting} puts already wait for slave acks")
        waiter = _Waiter(token, next_offset, need_ack, deadline, next(self._arrivals))
        queue = self._queues.setdefault(need_ack, deque())
        if queue and queue[-1].next_offset > next_offset:
            _insert_in_order(queue, waiter)  # appends come in offset order, so this is rare
        else:
            queue.append(waiter)
        heapq.heappush(self._deadlines, (deadline, waiter.arrival, waiter))
        self._waiting += 1
        return None

    def lower_need(self, need_ack: int) -> Released:
        """Puts waiting for more than `need_ack` copies now need `need_ack` (decision 11); returns
        the puts that releases, in order."""
        assert need_ack >= 1, need_ack
        lowered = self._take_needing_more(need_ack)
        if need_ack == 1:
            return self._end(lowered, PutStatus.PUT_OK)
        for waiter in lowered:
            waiter.need_ack = need_ack
        self._queues[need_ack] = deque(sorted([*self._queues.get(need_ack, ()), *lowered],
                                              key=lambda waiter: waiter.next_offset))
        return self._release()

    def fail_unreachable(self) -> Released:
        """Puts needing more copies than the master and its attached slaves can give: FLUSH_SLAVE_TIMEOUT
        now (decision 11)."""
        return self._end(self._take_needing_more(1 + len(self._slaves)), PutStatus.FLUSH_SLAVE_TIMEOUT)

    def _take_needing_more(self, copies: int) -> list[_Waiter]:
        """Remove the queues of puts that need more than `copies`; their live waiters, by arrival."""
        taken = [waiter for need in [need for need in self._queues if need > copies]
                 for waiter in self._queues.pop(need) if not waiter.done]
        return sorted(taken, key=lambda waiter: waiter.arrival)

    def _end(self, waiters: list[_Waiter], status: PutStatus) -> Released:
        """Complete taken waiters with `status`."""
        for waiter in waiters:
            waiter.done = True
        self._waiting -= len(waiters)
        self._drop_done_deadlines()
        return [(waiter.token, status) for waiter in waiters]

    def next_deadline(self) -> float | None:
        """The earliest deadline of a put still waiting."""
        self._drop_done_deadlines()
        return self._deadlines[0][0] if self._deadlines else None

    def expire(self, now: float) -> Released:
        """Puts whose deadline is at or before `now`: FLUSH_SLAVE_TIMEOUT."""
        released: Released = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, waiter = heapq.heappop(self._deadlines)
            if not waiter.done:
                waiter.done = True
                self._waiting -= 1
                released.append((waiter.token, PutStatus.FLUSH_SLAVE_TIMEOUT))
        for queue in self._queues.values():
            while queue and queue[0].done:
                queue.popleft()
        return released

    def release_all(self) -> Released:
        """Every waiting put, as FLUSH_SLAVE_TIMEOUT: the master is stopping."""
        waiters = sorted((waiter for queue in self._queues.values() for waiter in queue if not waiter.done),
                         key=lambda waiter: waiter.arrival)
        released = [(waiter.token, PutStatus.FLUSH_SLAVE_TIMEOUT) for waiter in waiters]
        self._queues.clear()
        self._deadlines.clear()
        self._waiting = 0
        return released

    def _threshold(self, need_ack: int) -> int | None:
        """The highest offset that need_ack - 1 slaves have acked, or with ALL_ACK every slave of
        the SyncStateSet (the master holds everything it appended, so only slaves count here)."""
        if need_ack == ALL_ACK:
            if not self._members:
                return _OFFSET_ANY
            members = [self._slaves.get(slave_id) for slave_id in self._members]
            acked = [offset for item in members if item is not None and (offset := item.ack_offset) is not None]
            if len(acked) < len(members):
                return None  # a member not connected, or not yet acking, holds every ALL_ACK put
            return min(acked)
        acks = sorted((progress.ack_offset for progress in self._slaves.values()
                       if progress.ack_offset is not None), reverse=True)
        return acks[need_ack - 2] if len(acks) >= need_ack - 1 else None

    def _release(self) -> Released:
        released: list[_Waiter] = []
        for need_ack, queue in self._queues.items():
            threshold = self._threshold(need_ack)
            while queue and (queue[0].done or (threshold is not None and queue[0].next_offset <= threshold)):
                waiter = queue.popleft()
                if not waiter.done:
                    waiter.done = True
                    self._waiting -= 1
                    released.append(waiter)
        self._drop_done_deadlines()
        assert self._waiting >= 0
        if len(self._queues) > 1:
            released.sort(key=lambda waiter: waiter.arrival)
        return [(waiter.token, PutStatus.PUT_OK) for waiter in released]

    def _drop_done_deadlines(self) -> None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)


_OFFSET_ANY = (1 << 63) - 1  # a threshold no put's end offset exceeds


def _insert_in_order(queue: deque[_Waiter], waiter: _Waiter) -> None:
    index = len(queue)
    while index > 0 and queue[index - 1].next_offset > waiter.next_offset:
        index -= 1
    queue.insert(index, waiter)
