"""What slaves copy besides the commit log (topic configs, consumer groups, their subscription
configs and positions, ACL 2.0's users and rules),
and, in controller mode with allAckInSyncStateSet, the wait until the SyncStateSet members have
applied a change.

Versions count the topic, subscription group and offset changes of this process (of its term as master, in
controller mode); each slave long-polls `metadata_for` saying which version it has applied."""

import asyncio
import uuid

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.message_types import TopicMessageType
from quorumq.core.quorum import BrokerRole
from quorumq.core.sync_state import MetadataJoin, join_metadata, waits_for_join
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.configs import group_from_pb, group_to_pb, message_type_from_pb, message_type_to_pb
from quorumq.store import TopicConfig


def topic_config_pb(config: TopicConfig) -> pb.TopicConfig:
    return pb.TopicConfig(name=config.name, read_queue_nums=config.read_queue_nums,
                          write_queue_nums=config.write_queue_nums, perm=config.perm,
                          message_type=message_type_to_pb(config.message_type))


def topic_config_from_pb(config: pb.TopicConfig, unset: TopicMessageType = TopicMessageType.NORMAL) -> TopicConfig:
    """The config a message carries; `unset` is its type when it names none."""
    return TopicConfig(config.name, config.read_queue_nums, config.write_queue_nums, config.perm,
                       message_type_from_pb(config.message_type) or unset)


class MetadataSync:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self.config = broker.config
        self.clock = broker.clock
        self.incarnation = uuid.uuid4().hex
        self.version = 0
        self._applied: dict[int, int] = {}  # slave id -> the version it has applied
        self._joins: dict[int, MetadataJoin] = {}  # slave id -> its join (see joined)
        self._changed = asyncio.Event()  # replaced by a set one at each change (pulse)

    @property
    def all_ack_in_sync_state_set(self) -> bool:
        """The durable controller mode: sends, reads' end, commits and topic updates all go by
        what every SyncStateSet member holds."""
        return self._broker.controller_mode and self.config["allAckInSyncStateSet"]

    def new_term(self) -> None:
        """A new master term: what a slave applied in an earlier term is not this term's metadata
        (it adopted other masters' since, and so did this broker). A new version too, so that a
        slave that has applied nothing of this term (recorded as 0) is behind it."""
        self.incarnation = uuid.uuid4().hex
        self._applied.clear()
        self._joins.clear()
        self.new_version()

    def new_version(self) -> int:
        """A change slaves copy: a new version, and their waiting polls are answered."""
        self.version += 1
        self.pulse()
        return self.version

    async def changed(self, what: str) -> None:
        """A change slaves copy; on a controller-mode master with allAckInSyncStateSet it is
        answered once every SyncStateSet member has applied it."""
        version = self.new_version()
        if self._broker.role is not BrokerRole.SLAVE:
            await self.replicated(version, what)

    def metadata(self) -> pb.BrokerMetadata:
        broker = self._broker
        return pb.BrokerMetadata(
            incarnation=self.incarnation, version=self.version,
            topics=[topic_config_pb(config) for config in broker.topics.all()],
            offsets=[pb.QueueOffset(group=group, topic=topic, queue_id=queue_id, offset=offset)
                     for group, topic, queue_id, offset in broker.consumers.positions()],
            groups=broker.consumers.groups,
            subscription_groups=[group_to_pb(group) for group in broker.consumers.subscriptions()],
            access=broker.access.to_pb())

    async def metadata_for(self, request: pb.MetadataRequest) -> pb.BrokerMetadata:
        """A slave's long poll: note the version it has applied, then answer once there is a newer
        one, or after `wait_ms`."""
        def mine() -> bool:  # asked again while it waits: an election starts a new incarnation
            return request.incarnation == self.incarnation

        if request.broker_id > 0:  # a slave that applied another incarnation's has nothing of ours
            self._applied[request.broker_id] = request.applied_version if mine() else 0
            self.pulse()
        deadline = self.clock.monotonic() + request.wait_ms / 1000
        while mine() and self.version <= request.applied_version and not self._deposed(request):
            if not await self._changed_before(deadline):
                break
        if self._deposed(request):  # its positions would take a new master's commits back
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "this broker is not the master: copy from the master")
        return self.metadata()

    def _deposed(self, request: pb.MetadataRequest) -> bool:
        """A controller-mode slave asked by another slave (an admin client may read any broker)."""
        return request.broker_id > 0 and self._broker.controller_mode and self._broker.role is BrokerRole.SLAVE

    def adopt_metadata(self, metadata: pb.BrokerMetadata) -> None:
        """A slave takes its master's topics, consumer groups, their configs and positions, its
        users and rules."""
        consumers = self._broker.consumers
        self._broker.access.adopt(metadata.access)
        self._broker.topics.adopt([topic_config_from_pb(config) for config in metadata.topics])
        consumers.adopt_groups(dict(metadata.groups))
        consumers.adopt_subscriptions([group_from_pb(config) for config in metadata.subscription_groups])
        for position in metadata.offsets:
            consumers.adopt_position(position.group, position.topic, position.queue_id, position.offset)
        consumers.persist_offsets()

    def metadata_joined(self, slave_id: int) -> bool:
        """Whether a slave that caught up on the log may join the SyncStateSet as far as
        metadata goes: it holds every change answered without it. Asking begins its join, from
        which on changes wait for it too (core/sync_state.py decision 5)."""
        if not self.all_ack_in_sync_state_set:
            return True
        join, ready = join_metadata(self._joins.get(slave_id), self._applied.get(slave_id, 0), self.version,
                                    self.clock.monotonic(), self._join_window_s)
        self._joins[slave_id] = join
        return ready

    @property
    def _join_window_s(self) -> float:
        """How long changes wait for a joining slave: half of slaveTimeout, so that a change that
        waits for one still has time for the members."""
        return self.config["slaveTimeout"] / 2000

    async def replicated(self, version: int, what: str, deadline: float | None = None) -> None:
        """In controller mode with allAckInSyncStateSet, wait until every other SyncStateSet
        member, and every slave joining it, has applied metadata `version`
        (SLAVE_PERSISTENCE_TIMEOUT after slaveTimeout, or at `deadline`, the clock's monotonic
        time, if that comes first)."""
        if not self.all_ack_in_sync_state_set:
            return
        broker = self._broker
        deadline = min(self.clock.monotonic() + self.config["slaveTimeout"] / 1000,
                       float("inf") if deadline is None else deadline)
        while True:
            if broker.sync_state is None:
                raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"this broker is no longer the master: make the "
                                   f"{what} again on the new one")
            now = self.clock.monotonic()
            joining = {slave: join.until_s for slave, join in self._joins.items()
                       if waits_for_join(join, version, now)}
            waited = (broker.sync_state.quorum_members | joining.keys()) - {broker.controller_id}
            behind = sorted(member for member in waited if self._applied.get(member, 0) < version)
            if not behind:
                return
            wake = min([deadline, *joining.values()])  # a join that lapses no longer holds the change
            if not await self._changed_before(wake) and wake == deadline:
                raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"replicas {behind} (of the SyncStateSet, or "
                                   f"joining it) did not confirm the {what} within slaveTimeout")

    def pulse(self) -> None:
        """Wake whoever waits for a metadata version, a slave's confirmation or a role change."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _changed_before(self, deadline: float) -> bool:
        """Wait for the next pulse; False once `deadline` (the clock's monotonic time) has passed."""
        remaining = deadline - self.clock.monotonic()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), remaining)
            return True
        except TimeoutError:
            return False
