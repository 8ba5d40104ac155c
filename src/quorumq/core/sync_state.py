"""A controller-mode master's SyncStateSet upkeep (spec rocketmq-ha.md 2.8). Pure: the caller
passes its slaves' progress and the time, and reports what these functions propose to the
controller; the set changes only when the controller confirms it.

Decisions, KEEP or FIX against RocketMQ:

1. KEEP. A slave joins (expand) once it has caught up: its ack reached what the master held when
   it last sent to it, the master's confirm offset, and the start of the current epoch (so a
   slave never joins holding only an older epoch's tail). An asyncLearner never joins.
2. KEEP. A member leaves (shrink) when it has not been caught up for haMaxTimeSlaveNotCatchup,
   when it has never been caught up under this master, or at once when its connection is lost.
   The master itself always stays. (The master counts an asyncLearner as not connected.)
3. FIX (#7219, PR #9897). One change at a time: while a proposal waits for the controller, the
   next one is computed from the proposal, never from an older set, so two slaves dropping at
   once cannot report a stale set.
4. KEEP (#5663). While a change is pending, quorum decisions use the stricter view: the size is
   the larger of the two sets and ALL_ACK waits for the union.
5. FIX (quorumq's metadata: topic updates and offset commits, which RocketMQ does not make wait).
   A slave that caught up on the log joins only once it also holds every metadata change
   answered without it, or its election could take an acknowledged commit back. Asking that it
   hold the master's newest version would starve it under a stream of commits, so it joins in
   two steps: from the moment it begins to join, new changes wait for it too (for a window at
   most); once it has applied the version it began at, it holds everything. A join whose window
   lapsed begins again after one more window, so a slave that never applies delays commits by
   at most a window in two.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    members: frozenset[int]  # as the controller confirmed it, the master's own id included
    epoch: int  # the controller's syncStateSetEpoch of `members`
    pending: frozenset[int] | None = None  # proposed to the controller, not yet confirmed

    @property
    def base(self) -> frozenset[int]:
        """What the next proposal starts from (decision 3)."""
        return self.members if self.pending is None else self.pending

    @property
    def quorum_members(self) -> frozenset[int]:
        """Whom an ALL_ACK put waits for, the master included (decision 4)."""
        return self.members | (self.pending or frozenset())

    @property
    def size(self) -> int:
        """The in-sync count a controller-mode put is planned with (decision 4)."""
        return max(len(self.members), len(self.pending or ()))


def expanded(sync_state_set: SyncStateSet, slave_id: int, ack_offset: int, caught_up: bool,
             confirm_offset: int, epoch_start_offset: int, async_learner: bool = False) -> frozenset[int] | None:
    """The set to propose when `slave_id` has caught up, or None (decision 1)."""
    base = sync_state_set.base
    if slave_id in base or not caught_up or async_learner:
        return None
    if ack_offset < confirm_offset or ack_offset < epoch_start_offset:
        return None
    return base | {slave_id}


@dataclass(frozen=True, slots=True)
class MetadataJoin:
    """A slave joining the SyncStateSet, as far as metadata goes (decision 5)."""
    version: int  # the master's metadata version when the join began
    until_s: float  # changes newer than `version` wait for the slave until then


def join_metadata(join: MetadataJoin | None, applied_version: int, version: int, now_s: float,
                  window_s: float) -> tuple[MetadataJoin, bool]:
    """The slave's join as it goes on, and whether it may be proposed now (decision 5), given
    the metadata version it has applied and the master's current one."""
    if join is None or now_s >= join.until_s + window_s:
        join = MetadataJoin(version, now_s + window_s)
    elif now_s >= join.until_s:
        return join, False
    return join, applied_version >= join.version


def waits_for_join(join: MetadataJoin | None, change_version: int, now_s: float) -> bool:
    """Whether a metadata change is answered only once the joining slave has applied it."""
    return join is not None and change_version > join.version and now_s < join.until_s


def shrunk(sync_state_set: SyncStateSet, master_id: int, connected: Collection[int],
           caught_up_ms: Mapping[int, float], now_ms: float, max_not_caught_up_ms: float) -> frozenset[int] | None:
    """The set to propose without the members that fell behind or went away, or None (decision 2)."""
    base = sync_state_set.base
    kept = frozenset(member for member in base if member == master_id or (
        member in connected and member in caught_up_ms and now_ms - caught_up_ms[member] <= max_not_caught_up_ms))
    kept |= {master_id}
    return None if kept == base else kept
