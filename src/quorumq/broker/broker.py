"""The broker assembled: topics, the send path, the read paths and housekeeping over one store.

A master streams its commit log to its slaves (replication/master.py) and, as a SYNC_MASTER, holds
each send until the copies RIP-34 asks for hold it (core/quorum.py decides, spec rocketmq-ha.md
1.2). A slave follows its master (replication/slave.py) and refuses sends.

In controller mode (spec 2.7) the role is not configured: the broker starts fenced (a slave without
a master) and the controller link (broker/controller_link.py) calls `become_master` or
`become_slave` for each newer master epoch. Each role change first settles the epoch file: a new
master appends its epoch at its log's end; a new slave cuts its log back to the point where it and
its master's agree (`align_with`, with the master's epochs) before it replicates anything.

All state is owned by the event-loop thread; only fdatasync runs in a worker thread (the flusher).
"""

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping

from quorumq import limits, metrics
from quorumq.broker.consumers import ConsumerGroups, read_messages
from quorumq.broker.metrics import BrokerCounters, read_size
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config
from quorumq.core.properties import MESSAGE_ID
from quorumq.core.put_status import PutStatus
from quorumq.core.epochs import EpochCache, find_consistent_point
from quorumq.core.quorum import AckPlan, BrokerRole, QuorumSettings, final_status, needs_copies, plan_put
from quorumq.core.recent_sends import RecentSends, StoredCopy
from quorumq.core.retention import parse_delete_when, retention_action
from quorumq.core.sync_state import MetadataJoin, SyncStateSet, join_metadata, waits_for_join
from quorumq.errors import Error, QuorumqError
from quorumq.replication import ReplicationMaster, ReplicationSlave
from quorumq.store import (PERM_READ, PERM_WRITE, AppendResult, GetResult, GetStatus, MessageIn, MessageStore,
                           TopicConfig, TopicConfigs)
from quorumq.core import codec
from quorumq.store.epoch_file import EpochFile
from quorumq.store.flush import Flusher

log = logging.getLogger("quorumq.broker")



@dataclass(slots=True)
class PutResult:
    status: PutStatus | None  # None when `error` rejected the message before it was stored
    queue_id: int = -1
    queue_offset: int = -1
    error: QuorumqError | None = None


class Arrivals:
    """Wakes long polls when a topic receives messages."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, topic: str) -> None:
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    async def wait(self, topic: str, timeout_s: float) -> None:
        event = self._events.setdefault(topic, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass


class Broker:
    def __init__(self, config: Config, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.address = config["advertisedAddress"] or f"{config['brokerIP1']}:{config['listenPort']}"
        root = Path(config["storePathRootDir"])
        self.store = MessageStore(root, segment_bytes=config["mappedFileSizeCommitLog"],
                                  store_host=self.address, clock=clock)
        self.topics = TopicConfigs(root)
        self.consumers: ConsumerGroups | None = None
        self.flusher: Flusher | None = None
        self.arrivals = Arrivals()
        self.topics_changed = asyncio.Event()
        self.pending_messages = 0
        self.writable = True
        self.stats = {"msgPutTotal": 0, "msgGetTotal": 0, "sendRejectedTotal": 0, "msgSkippedTooLargeTotal": 0}
        self.metrics = BrokerCounters() if metrics.enabled(config) else None  # None: nothing counted
        self._round_robin: dict[str, int] = {}
        self.controller_mode = config["enableControllerMode"]
        # Controller mode starts fenced: a slave without a master until the controller names one.
        self.role = BrokerRole.SLAVE if self.controller_mode else BrokerRole(config["brokerRole"])
        self.controller_id = 0  # this broker's id at the controller (controller mode), once registered
        self.master_epoch = 0  # the newest master epoch this process applied (controller mode)
        self.master_id = 0  # the controller's id of the current master, when known
        self.sync_state: SyncStateSet | None = None  # a controller-mode master's SyncStateSet
        self.handing_over = False  # a master fencing its writes for its preferred broker
        self.epoch_file = EpochFile(root)
        self.epochs: EpochCache | None = None  # controller mode: the master epochs of this log
        # The broker member group's size (spec 1.3): totalReplicas until the name server answers.
        self.alive_replicas = config["totalReplicas"]
        self.replication: ReplicationMaster | None = None  # a master's stream to its slaves
        self.slave: ReplicationSlave | None = None  # a slave's stream from its master, once it is known
        self.master_address = ""  # a slave's master (gRPC), from the name server
        self.recent_sends = RecentSends()
        self.slave_lost = asyncio.Event()  # controller mode: a slave's connection ended
        self._readable_end = 0  # see readable_end; nothing is known to be on every member yet
        self._repair_until: int | None = None  # see store_damaged
        # What slaves copy besides the log (metadata): versions count the topic updates and offset
        # commits of this process (of its term as master, in controller mode); each slave says
        # which version it has applied (see _replicated).
        self.incarnation = uuid.uuid4().hex
        self.metadata_version = 0
        self._metadata_applied: dict[int, int] = {}  # slave id -> the version it has applied
        self._metadata_joins: dict[int, MetadataJoin] = {}  # slave id -> its join (see metadata_joined)
        self._metadata_changed = asyncio.Event()  # replaced by a set one at each change (_pulse)
        self.store.readable_end = self.readable_end

    def open(self) -> None:
        report = self.store.open()
        log.info("store recovered: %s", report)
        if report.truncated_bytes:
            self._repair_until = report.end_offset + report.truncated_bytes
        self.topics.load()
        self.consumers = ConsumerGroups(self.store, Path(self.config["storePathRootDir"]), self.clock, self.config)
        self.flusher = Flusher(self.store, sync_flush=self.config["flushDiskType"] == "SYNC_FLUSH",
                               interval_ms=self.config["flushIntervalCommitLog"])
        if self.controller_mode:
            # A crash between a truncation of the log and of the epoch file leaves epochs past the
            # log's end: the log is the truth (the store truncates first).
            self.epochs = self.epoch_file.load()
            self.epochs.reconcile(self.store.max_offset)
            self.epoch_file.save(self.epochs)
        elif self.role is not BrokerRole.SLAVE:
            self.replication = self._new_replication_master()
            self._recall_recent_sends()

    def _new_replication_master(self) -> ReplicationMaster:
        return ReplicationMaster(
            self.store, cluster_name=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            host=self.config["bindAddress"], port=self.config["haListenPort"],
            transfer_batch_bytes=self.config["haTransferBatchSize"], on_slave_lost=self._on_slave_lost,
            epochs=self.epochs, **self._ha_intervals())

    def _new_replication_slave(self, host: str, port: int) -> ReplicationSlave:
        return ReplicationSlave(
            self.store, master_host=host, master_port=port,
            broker_id=self.replica_id,
            cluster_name=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            acks_flushed=self.config["flushDiskType"] == "SYNC_FLUSH", async_learner=self.config["asyncLearner"],
            sync_from_last_file=self.config["syncFromLastFile"], epochs=self.epochs,
            epoch_file=self.epoch_file if self.controller_mode else None, known_epoch=self.master_epoch,
            **self._ha_intervals())

    def _ha_intervals(self) -> dict[str, float]:
        return {"heartbeat_interval_s": self.config["haSendHeartbeatInterval"] / 1000,
                "housekeeping_interval_s": self.config["haHousekeepingInterval"] / 1000}

    def follow(self, master_address: str, master_ha_address: str) -> None:
        """A slave learned its master's addresses from the name server: replicate from there."""
        self.master_address = master_address
        host, _, port = master_ha_address.rpartition(":")
        if self.slave is None:
            self.slave = self._new_replication_slave(host, int(port))
            self.slave.start()
            log.info("following master %s (replication from %s)", master_address, master_ha_address)
        elif self.slave.master_address != (host, int(port)):
            log.warning("the master moved to %s (replication from %s)", master_address, master_ha_address)
            self.slave.master_address = (host, int(port))

    async def start(self) -> None:
        self.flusher.start()
        if self.replication is not None:
            await self.replication.start()

    # Controller mode: role changes (spec 2.7). Each applies only for a newer master epoch.

    async def become_master(self, epoch: int, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> bool:
        """The controller elected this broker master of `epoch`; False when the epoch is not newer
        than the one this process applied, or older than the last epoch of its log (a restarted
        master may take its own last epoch again)."""
        if epoch <= self.master_epoch or self._older_than_log(epoch):
            return False
        if self.slave is not None:
            await self.slave.stop()
            self.slave = None
        if self.epochs.last_epoch != epoch:  # a restarted master keeps its own epoch's start
            self.epochs.truncate_suffix_by_epoch(epoch)
            appended = self.epochs.append(epoch, self.store.max_offset)
            assert appended, (epoch, self.epochs.entries)
            self.epoch_file.save(self.epochs)
        self.master_epoch, self.master_id, self.master_address = epoch, self.controller_id, self.address
        self.sync_state = SyncStateSet(frozenset(sync_state_set), sync_state_set_epoch)
        # What a slave applied in an earlier term is not this term's metadata: it adopted other
        # masters' since, and so did this broker. A new version too, so that a slave that has
        # applied nothing of this term (recorded as 0) is behind it.
        self.incarnation = uuid.uuid4().hex
        self._metadata_applied.clear()
        self._metadata_joins.clear()
        self._new_metadata_version()
        self._recall_recent_sends()  # the log it holds, not what an older role remembered
        if self.replication is None:
            self.replication = self._new_replication_master()
            await self.replication.start()
        self._complete_sync_state_change()
        self.role = BrokerRole.SYNC_MASTER
        self.topics_changed.set()  # register at once as the master
        log.warning("master of %s at epoch %d from offset %d (SyncStateSet %s)", self.config["brokerName"],
                    epoch, self.store.max_offset, sorted(sync_state_set))
        return True

    async def become_slave(self, epoch: int, master_id: int, master_address: str) -> bool:
        """The controller named another broker master of `epoch`; False when the epoch is older,
        or when it is the epoch this broker already follows. The caller then aligns the log with
        the new master's (`align_with`) and follows it. An epoch older than the last of this log
        is refused too."""
        if epoch < self.master_epoch or epoch == self.master_epoch and self.role is BrokerRole.SLAVE \
                or self._older_than_log(epoch):
            return False
        was_master = self.replication is not None
        if was_master:
            # Waiting sends end as FLUSH_SLAVE_TIMEOUT: a deposed master acknowledges nothing more.
            await self.replication.stop()
            self.replication = None
        if self.slave is not None:
            await self.slave.stop()
            self.slave = None
        self.role, self.sync_state = BrokerRole.SLAVE, None
        self._pulse()  # waiting commits end: a deposed master confirms nothing more
        self.master_epoch, self.master_id = epoch, master_id
        self.master_address = master_address
        self.topics_changed.set()
        log.warning("slave of %s at epoch %d: master %d at %s%s", self.config["brokerName"], epoch, master_id,
                    master_address, " (was master)" if was_master else "")
        return True

    def readable_end(self) -> int | None:
        """Where consumers' reads end: in controller mode with allAckInSyncStateSet, at what every
        member of the SyncStateSet holds (RocketMQ's confirm offset, spec 2.8 and scenario 31), so
        a failover never cuts a message a consumer has read; elsewhere no bound (None). A master
        counts its members' acks, a slave takes its master's word (each frame's confirm offset);
        while a member's copy is unknown the bound stays where it was."""
        if not self._all_ack_in_sync_state_set:
            return None
        held = None
        if self.replication is not None:
            held = self.replication.tracker.all_members_hold(self.store.max_offset)
        elif self.slave is not None and self.slave.master_confirm_offset is not None:
            held = min(self.slave.master_confirm_offset, self.store.max_offset)
        if held is not None and held > self._readable_end:
            self._readable_end = held
        return self._readable_end

    def _older_than_log(self, epoch: int) -> bool:
        """Spec 2.9: a role of an epoch older than the last one this log holds is refused, so after
        a restart the epoch file, not the process's memory, is the floor. Only stale controller
        data (or a broker set cleaned at the controller while its stores were kept) leads here,
        and only an operator can mend that: said loudly."""
        if epoch >= self.epochs.last_epoch:
            return False
        log.error("refusing a role of master epoch %d: this log already holds epoch %d", epoch, self.epochs.last_epoch)
        return True

    @property
    def replica_id(self) -> int:
        """How this broker names itself to its master: the controller's id, or brokerId."""
        return self.controller_id if self.controller_mode else self.config["brokerId"]

    @property
    def store_damaged(self) -> bool:
        """Whether this log holds damage it has not yet repaired: a record found failing its check,
        or, after one was cut (with a torn tail cut by recovery), less than it held before, until
        a master has sent that much again. The controller elects a damaged broker only when no
        sound one is alive (core/controller_state, decision 14)."""
        if self.store.corrupt_offset is not None:
            return True
        if self._repair_until is not None and self.store.max_offset >= self._repair_until:
            log.info("the log holds %d bytes again: its damage is repaired", self.store.max_offset)
            self._repair_until = None
        return self._repair_until is not None

    def align_with(self, master_epochs: EpochCache, master_max_offset: int) -> int:
        """Cut this slave's log and epochs back to where they agree with its master's (spec 2.9):
        the log first, durably, then the epoch file. Returns the offset it now ends at; -1 when
        the two logs share no epoch (nothing is cut: an operator must look).

        A record found corrupt in this log (recovery keeps it and refuses to go past it) is cut
        first, with everything after it: the master holds those records and sends them again."""
        corrupt = self.store.corrupt_offset
        if corrupt is not None:
            log.error("the commit log is corrupt at %d: cutting it there to fetch the rest from the master", corrupt)
            # What it held past what its master holds was never acknowledged: not owed back.
            self._repair_until = max(self._repair_until or 0, min(self.store.max_offset, master_max_offset))
            self.store.truncate(corrupt)
            self.epochs.reconcile(corrupt)
        local_max = self.store.max_offset
        point = find_consistent_point(self.epochs, local_max, master_epochs, master_max_offset)
        if point < 0:
            return -1
        if point < local_max:
            log.warning("truncating %d bytes this broker alone holds (from %d)", local_max - point, point)
            self.store.truncate(point)
            self.recent_sends = RecentSends()
            self._readable_end = min(self._readable_end, point)
        self.epochs.truncate_suffix_by_offset(point)
        self.epoch_file.save(self.epochs)
        return point

    def adopt_sync_state_set(self, members: frozenset[int], epoch: int, settles: bool = False) -> None:
        """A master's SyncStateSet as the controller confirmed it: a newer epoch only, unless it
        `settles` a proposal whose answer was lost (replica info asked for after the loss: the
        same epoch then says the controller did not take it). Any other set of the same epoch
        is older news: a notice held on the way, replica info read before the proposal."""
        if self.sync_state is None or epoch < self.sync_state.epoch or epoch == self.sync_state.epoch and not settles:
            return
        self.sync_state = SyncStateSet(frozenset(members), epoch)
        self._complete_sync_state_change()

    def propose_sync_state_set(self, members: frozenset[int]) -> None:
        self.sync_state = SyncStateSet(self.sync_state.members, self.sync_state.epoch, pending=frozenset(members))
        self._complete_sync_state_change()

    def drop_sync_state_proposal(self) -> None:
        if self.sync_state is None:  # deposed while the proposal was on its way: nothing to drop
            return
        self.sync_state = SyncStateSet(self.sync_state.members, self.sync_state.epoch)
        self._complete_sync_state_change()

    def _complete_sync_state_change(self) -> None:
        """Waiting ALL_ACK sends wait for the stricter view of the set (core/sync_state.py decision 4)."""
        self._pulse()
        if self.replication is not None:
            self.replication.release(self.replication.tracker.set_sync_state_set(
                self.sync_state.quorum_members - {self.controller_id}))

    async def close(self) -> None:
        if self.replication is not None:
            await self.replication.stop()
        if self.slave is not None:
            await self.slave.stop()
        await self.flusher.stop()
        self.consumers.persist()
        self.store.close()

    # Topics.

    def topic_config(self, topic: str, create: bool) -> TopicConfig:
        config = self.topics.get(topic)
        if config is not None:
            return config
        if not (create and self.config["autoCreateTopicEnable"]):
            raise QuorumqError(Error.TOPIC_NOT_FOUND, f"topic {topic} does not exist on {self.config['brokerName']} "
                                                      "and autoCreateTopicEnable is false")
        queues = self.config["defaultTopicQueueNums"]
        return self.update_topic(TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues))

    def update_topic(self, config: TopicConfig) -> TopicConfig:
        self.topics.put(config)
        self.topics_changed.set()
        self._new_metadata_version()
        log.info("topic %s: read %d write %d perm %d", config.name, config.read_queue_nums,
                 config.write_queue_nums, config.perm)
        return config

    async def change_topic(self, config: TopicConfig) -> None:
        """An operator's topic update. On a controller-mode master with allAckInSyncStateSet it is
        answered once every SyncStateSet member has applied it, like a commit: a failover right
        after the answer must not lose the topic (slaves used to copy topics every 3 s)."""
        self.update_topic(config)
        if self.role is not BrokerRole.SLAVE:
            await self._replicated(self.metadata_version, "topic update")

    def delete_topic(self, topic: str) -> None:
        self.topics.delete(topic)
        self.store.delete_topic(topic)
        self.consumers.delete_topic(topic)
        self.topics_changed.set()

    def metadata(self) -> pb.BrokerMetadata:
        """What a slave copies besides the commit log: topic configs, consumer groups, positions."""
        return pb.BrokerMetadata(
            incarnation=self.incarnation, version=self.metadata_version,
            topics=[pb.TopicConfig(name=config.name, read_queue_nums=config.read_queue_nums,
                                   write_queue_nums=config.write_queue_nums, perm=config.perm)
                    for config in self.topics.all()],
            offsets=[pb.QueueOffset(group=group, topic=topic, queue_id=queue_id, offset=offset)
                     for group, topic, queue_id, offset in self.consumers.positions()],
            groups=self.consumers.groups)

    async def metadata_for(self, request: pb.MetadataRequest) -> pb.BrokerMetadata:
        """A slave's long poll: note the version it has applied, then answer once there is a newer
        one, or after `wait_ms`."""
        def mine() -> bool:  # asked again while it waits: an election starts a new incarnation
            return request.incarnation == self.incarnation

        if request.broker_id > 0:  # a slave that applied another incarnation's has nothing of ours
            self._metadata_applied[request.broker_id] = request.applied_version if mine() else 0
            self._pulse()
        deadline = asyncio.get_running_loop().time() + request.wait_ms / 1000
        while mine() and self.metadata_version <= request.applied_version and not self._deposed(request):
            if not await self._changed_before(deadline):
                break
        if self._deposed(request):  # its positions would take a new master's commits back
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "this broker is not the master: copy from the master")
        return self.metadata()

    def _deposed(self, request: pb.MetadataRequest) -> bool:
        """A controller-mode slave asked by another slave (an admin client may read any broker)."""
        return request.broker_id > 0 and self.controller_mode and self.role is BrokerRole.SLAVE

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's position. With SYNC_FLUSH it is on disk before the answer, as a send is;
        in controller mode with allAckInSyncStateSet the answer also waits until every member of
        the SyncStateSet has applied it (slaves long-poll for it), so no failover takes an
        acknowledged commit back. Otherwise slaves copy it on their next poll."""
        if self._all_ack_in_sync_state_set and self.sync_state is None:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "this broker is not the master: commit to the master")
        self.consumers.commit(group, topic, queue_id, offset)
        if self.config["flushDiskType"] == "SYNC_FLUSH":
            self.consumers.persist()
        await self._replicated(self._new_metadata_version(), "commit")

    def _new_metadata_version(self) -> int:
        """A change slaves copy: a new version, and their waiting polls are answered."""
        self.metadata_version += 1
        self._pulse()
        return self.metadata_version

    @property
    def _all_ack_in_sync_state_set(self) -> bool:
        """The durable controller mode: sends, reads' end, commits and topic updates all go by
        what every SyncStateSet member holds."""
        return self.controller_mode and self.config["allAckInSyncStateSet"]

    def metadata_joined(self, slave_id: int) -> bool:
        """Whether a slave that caught up on the log may join the SyncStateSet as far as
        metadata goes: it holds every change answered without it. Asking begins its join, from
        which on changes wait for it too (core/sync_state.py decision 5)."""
        if not self._all_ack_in_sync_state_set:
            return True
        join, ready = join_metadata(self._metadata_joins.get(slave_id), self._metadata_applied.get(slave_id, 0),
                                    self.metadata_version, asyncio.get_running_loop().time(), self._join_window_s)
        self._metadata_joins[slave_id] = join
        return ready

    @property
    def _join_window_s(self) -> float:
        """How long changes wait for a joining slave: half of slaveTimeout, so that a change that
        waits for one still has time for the members."""
        return self.config["slaveTimeout"] / 2000

    async def _replicated(self, version: int, what: str) -> None:
        """In controller mode with allAckInSyncStateSet, wait until every other SyncStateSet
        member, and every slave joining it, has applied metadata `version`
        (SLAVE_PERSISTENCE_TIMEOUT after slaveTimeout)."""
        if not self._all_ack_in_sync_state_set:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config["slaveTimeout"] / 1000
        while True:
            if self.sync_state is None:
                raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"this broker is no longer the master: make the "
                                   f"{what} again on the new one")
            now = loop.time()
            joining = {slave: join.until_s for slave, join in self._metadata_joins.items()
                       if waits_for_join(join, version, now)}
            waited = (self.sync_state.quorum_members | joining.keys()) - {self.controller_id}
            behind = sorted(member for member in waited if self._metadata_applied.get(member, 0) < version)
            if not behind:
                return
            wake = min([deadline, *joining.values()])  # a join that lapses no longer holds the change
            if not await self._changed_before(wake) and wake == deadline:
                raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"replicas {behind} (of the SyncStateSet, or "
                                   f"joining it) did not confirm the {what} within slaveTimeout")

    def _pulse(self) -> None:
        """Wake whoever waits for a metadata version, a slave's confirmation or a role change."""
        changed, self._metadata_changed = self._metadata_changed, asyncio.Event()
        changed.set()

    async def _changed_before(self, deadline: float) -> bool:
        """Wait for the next pulse; False once `deadline` (loop time) has passed."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(self._metadata_changed.wait(), remaining)
            return True
        except TimeoutError:
            return False

    def adopt_metadata(self, metadata: pb.BrokerMetadata) -> None:
        """A slave takes its master's topics, consumer groups and their positions. It never deletes
        a topic the master lacks (a master whose config was lost must not empty its slaves);
        `quorumq admin deleteTopic` deletes on every replica."""
        before = self.topics.all()
        for config in metadata.topics:
            self.topics.put(TopicConfig(config.name, config.read_queue_nums, config.write_queue_nums, config.perm))
        if self.topics.all() != before:
            self.topics_changed.set()
        self.consumers.adopt_groups(dict(metadata.groups))
        for position in metadata.offsets:
            if self.consumers.committed(position.group, position.topic, position.queue_id) != position.offset:
                self.consumers.commit(position.group, position.topic, position.queue_id, position.offset)
        self.consumers.persist()

    def readable_queue_ids(self, topic: str) -> list[int]:
        config = self.topic_config(topic, create=False)
        if not config.perm & PERM_READ or not self.config["brokerPermission"] & PERM_READ:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not readable on this broker")
        return list(range(config.read_queue_nums))

    def check_queue(self, topic: str, queue_id: int) -> None:
        if queue_id not in self.readable_queue_ids(topic):
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no readable queue {queue_id}")

    async def pull(self, topic: str, queue_id: int, offset: int, max_count: int, tags: frozenset[str] | None,
                   budget_s: float, raw: bool = False, group: str = "") -> GetResult:
        """Read a queue from `offset` (from its min if below it), waiting up to `budget_s` for news;
        `group` names the reader in the metrics."""
        self.check_queue(topic, queue_id)
        deadline = self.clock.monotonic() + budget_s
        offset = max(offset, 0)
        while True:
            result = read_messages(self.store, topic, queue_id, offset, max_count, tags, raw)
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                offset = result.min_offset
                continue
            left = deadline - self.clock.monotonic()
            if result.messages or result.status is GetStatus.OFFSET_OVERFLOW_BADLY or left <= 0:
                self.count_read(topic, group, result.messages)
                return result
            if result.next_offset > offset:  # only filtered-out messages so far: move on, keep waiting
                offset = result.next_offset
                continue
            await self.arrivals.wait(topic, left)

    def count_read(self, topic: str, group: str, messages: list) -> None:
        self.stats["msgGetTotal"] += len(messages)
        if self.metrics is not None and messages:
            self.metrics.read(topic, group, len(messages), read_size(messages))

    # The send path.

    def _writable_queue(self, topic: str, queue_id: int) -> int:
        """The queue a send goes to: `queue_id`, or when it is negative the topic's next queue round
        robin. The topic is created when the config allows it, and must be writable here. A slave
        refuses first: a send it refuses must not create the topic on it."""
        self._check_role()
        config = self.topic_config(topic, create=True)
        if not config.perm & PERM_WRITE or not self.config["brokerPermission"] & PERM_WRITE:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not writable on this broker")
        if queue_id < 0:
            turn = self._round_robin.get(topic, 0)
            self._round_robin[topic] = turn + 1
            return turn % config.write_queue_nums
        if queue_id >= config.write_queue_nums:
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no writable queue {queue_id}")
        return queue_id

    async def put(self, messages: list[MessageIn | QuorumqError], answer_by: float | None = None) -> list[PutResult]:
        """Append what passed the checks with one write; wait for the flush and the copies the config
        asks for, but not past `answer_by` (loop time: the client's deadline). A message whose id
        this master stored recently is a client's retry: it is not stored again, and it gets the
        first copy's outcome once that copy has its quorum."""
        results = [PutResult(None, error=item) if isinstance(item, QuorumqError) else None for item in messages]
        accepted: list[tuple[int, MessageIn]] = []
        retried: list[tuple[int, StoredCopy]] = []
        for index, message in enumerate(messages):
            if results[index] is not None:
                continue
            copy = self.recent_sends.get(message.properties.get(MESSAGE_ID, ""))
            if copy is not None:
                retried.append((index, copy))
                continue
            try:
                message.queue_id = self._writable_queue(message.topic, message.queue_id)
                accepted.append((index, message))
            except QuorumqError as error:
                results[index] = PutResult(None, error=error)
        try:
            if accepted:
                batch = [message for _, message in accepted]
                status, appended = await self._append(len(batch), Counter(message.topic for message in batch),
                                                      lambda: self._remember(batch, self.store.append(batch)),
                                                      answer_by)
                offsets = appended.offsets if appended is not None else [(-1, -1)] * len(batch)
                for (index, message), (_, queue_offset) in zip(accepted, offsets):
                    results[index] = PutResult(status, message.queue_id, queue_offset)
            if retried:
                status = await self._confirm([copy for _, copy in retried], answer_by)
                for index, copy in retried:
                    results[index] = PutResult(status, copy.queue_id, copy.queue_offset)
        except QuorumqError as error:  # refused whole: disk full, overload, a slave, a store that stopped
            for index in [index for index, _ in accepted] + [index for index, _ in retried]:
                if results[index] is None:
                    results[index] = PutResult(None, error=error)
        if self.metrics is not None:
            for result in results:
                self.metrics.answered(result.status.name if result.error is None else result.error.error.name)
        return results

    def _remember(self, batch: list[MessageIn], appended: AppendResult) -> AppendResult:
        """Note the ids of what was just stored, before any wait, so a retry during the wait finds them."""
        for message, (_, queue_offset) in zip(batch, appended.offsets):
            self.recent_sends.add(message.properties.get(MESSAGE_ID, ""),
                                  StoredCopy(message.queue_id, queue_offset, appended.end_offset))
        return appended

    def _recall_recent_sends(self) -> None:
        """Remember the sends of the log's tail, as the master that stored them did: a producer's
        resend after a failover (or a restart) is then answered from the copy this log holds."""
        started = self.clock.monotonic()
        self.recent_sends = RecentSends()
        try:
            recalled = self.store.recent_message_ids(limits.RECENT_MESSAGE_IDS_MAX)
        except QuorumqError as error:  # a damaged tail: the role matters more than deduplication
            log.error("recalling recent message ids from the log failed (%s): resends of what it holds may be "
                      "stored again", error)
            recalled = []
        for message_id, queue_id, queue_offset, end_offset in recalled:
            self.recent_sends.add(message_id, StoredCopy(queue_id, queue_offset, end_offset))
        log.info("recalled %d recent message ids from the log in %.3f s", len(self.recent_sends),
                 self.clock.monotonic() - started)

    async def _confirm(self, copies: list[StoredCopy], answer_by: float | None) -> PutStatus:
        """A client's resend of what this master stored: the first copies' outcome, once they
        have what the current settings need."""
        self._check_role()
        return await self._await_copies(max(copy.end_offset for copy in copies), self._plan_put().need_ack,
                                        answer_by)

    async def put_encoded(self, topic: str, queue_id: int, records: bytes, count: int, request_id: str = "",
                          answer_by: float | None = None) -> tuple[PutStatus, int]:
        """Append records a producer encoded for one queue (store.append_encoded), through the same
        admission and flush wait as `put`. Returns the status and the first record's queue offset;
        a refusal raises, since the records are stored all or none. IN_SYNC_REPLICAS_NOT_ENOUGH
        stores none: its queue offset is -1. A resend (`request_id`, its first record's message id,
        stored recently for the same queue, core/recent_sends.py) is answered from the first copy."""
        try:
            status, queue_offset = await self._put_encoded(topic, queue_id, records, count, request_id, answer_by)
        except QuorumqError as error:
            if self.metrics is not None:
                self.metrics.answered(error.error.name, count)
            raise
        if self.metrics is not None:
            self.metrics.answered(status.name, count)
        return status, queue_offset

    async def _put_encoded(self, topic: str, queue_id: int, records: bytes, count: int, request_id: str,
                           answer_by: float | None) -> tuple[PutStatus, int]:
        copy = self.recent_sends.batch(request_id, queue_id, count, lambda: _last_message_id(records))
        if copy is not None:
            return await self._confirm([copy], answer_by), copy.queue_offset
        queue_id = self._writable_queue(topic, queue_id)
        max_body_bytes = self.config["maxMessageSize"]

        def append() -> AppendResult:
            appended = self.store.append_encoded(topic, queue_id, records, count, max_body_bytes)
            self.recent_sends.add(request_id, StoredCopy(queue_id, appended.offsets[0][1], appended.end_offset, count))
            return appended

        status, appended = await self._append(count, {topic: count}, append, answer_by)
        return status, appended.offsets[0][1] if appended is not None else -1

    def _check_role(self) -> None:
        if self.role is BrokerRole.SLAVE:
            if self.controller_mode and not self.master_id:
                raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{self.address} is fenced: the controller has not "
                                                                f"named a master of {self.config['brokerName']} yet")
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{self.address} is a slave of "
                                                            f"{self.config['brokerName']}; its master takes sends")
        if self.handing_over:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{self.address} is handing the master role of "
                                                            f"{self.config['brokerName']} to its preferred broker")

    def accepts_sends(self) -> bool:
        """Whether a send would now be acknowledged at the configured quorum: it passes admission
        and the copies in sync meet its plan (what `quorumq up` waits for before it calls a
        cluster up)."""
        try:
            self._check_role()
        except QuorumqError:
            return False
        return self.writable and self._plan_put().met_by(self.in_sync_replicas(), self._sync_state_set_size())

    def _admit(self, count: int) -> None:
        self._check_role()
        if not self.writable:
            self.stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.DISK_FULL, "disk usage is above diskSpaceWarningLevelRatio; writes resume "
                                                "once space is back")
        if self.pending_messages + count > limits.PENDING_SEND_MESSAGES_MAX:
            self.stats["sendRejectedTotal"] += count
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"more than {limits.PENDING_SEND_MESSAGES_MAX} messages "
                                                        "wait to be stored; retry later")

    async def _append(self, count: int, topics: Mapping[str, int], store_append: Callable[[], AppendResult],
                      answer_by: float | None = None) -> tuple[PutStatus, AppendResult | None]:
        """Every send path's append: admission against the pending bound, the quorum pre-check
        (IN_SYNC_REPLICAS_NOT_ENOUGH appends nothing: no AppendResult), `store_append` (one write of
        `count` messages, `topics` counting them per topic), waking the slaves' senders and the
        topics' long polls, then the flush and replica waits."""
        self._admit(count)
        plan = self._plan_put()
        if plan.rejected:
            self.stats["sendRejectedTotal"] += count
            return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, None
        self.pending_messages += count
        try:
            appended = store_append()
            self.stats["msgPutTotal"] += count
            if self.metrics is not None:
                self.metrics.stored(topics, appended)
            # Stored messages are readable at once, as RocketMQ dispatches them before any wait
            # (with a read bound, once the members hold them: readable_end); a send cancelled
            # during its wait must not leave long polls asleep.
            self.replication.notify_appended()
            for topic in topics:
                self.arrivals.notify(topic)
            status = await self._await_copies(appended.end_offset, plan.need_ack, answer_by)
            if self.readable_end() is not None:  # readable only now that the members hold them
                for topic in topics:
                    self.arrivals.notify(topic)
        finally:
            self.pending_messages -= count
        return status, appended

    def quorum_settings(self) -> QuorumSettings:
        config = self.config
        return QuorumSettings(self.role, config["inSyncReplicas"], config["minInSyncReplicas"],
                              config["enableAutoInSyncReplicas"], config["haMaxGapNotInSync"],
                              config["enableSlaveActingMaster"], self.controller_mode, config["allAckInSyncStateSet"])

    def in_sync_replicas(self) -> int:
        """The master and its slaves within haMaxGapNotInSync of the commit log's end."""
        return self.replication.in_sync_replicas(self.config["haMaxGapNotInSync"])

    def _plan_put(self) -> AckPlan:
        return plan_put(self.quorum_settings(), wait_store_msg_ok=True, alive_replicas=self.alive_replicas,
                        ha_in_sync=self.in_sync_replicas(), sync_state_set_size=self._sync_state_set_size())

    def _sync_state_set_size(self) -> int:
        return self.sync_state.size if self.sync_state is not None else 1

    def _on_slave_lost(self, slave_id: int) -> None:
        if self.controller_mode:
            self.slave_lost.set()  # the controller link drops it from the SyncStateSet at once
        else:
            self._replan_waiting()

    def _replan_waiting(self) -> None:
        """A slave was lost: with enableSlaveActingMaster, waiting puts are planned again as a new
        put would be (quorum decision 11)."""
        settings = self.quorum_settings()
        if settings.enable_slave_acting_master:
            plan = self._plan_put()
            degraded = settings.enable_auto_in_sync_replicas and not plan.rejected
            self.replication.replan_waiting(plan.need_ack if degraded else None)

    async def _await_copies(self, end_offset: int, need_ack: int, answer_by: float | None) -> PutStatus:
        """Wait, side by side, for the flush the config asks for (syncFlushTimeout) and for
        `need_ack` copies (the master's included) of everything below `end_offset` (slaveTimeout),
        each cut short at `answer_by` so the client gets a status rather than its own timeout;
        the replica outcome wins."""
        now = asyncio.get_running_loop().time()
        answer_by = float("inf") if answer_by is None else answer_by
        flush = replicas = None
        if self.config["flushDiskType"] == "SYNC_FLUSH":
            flush_by = min(now + self.config["syncFlushTimeout"] / 1000, answer_by)
            flush = self.flusher.wait_flushed(end_offset, max(flush_by - now, 0.0))
        if needs_copies(need_ack):
            replicas = self.replication.wait_acked(
                end_offset, need_ack, min(now + self.config["slaveTimeout"] / 1000, answer_by))
        flushed, replica_status = True, PutStatus.PUT_OK
        if flush is not None and replicas is not None:
            flushed, replica_status = await asyncio.gather(flush, replicas)
        elif flush is not None:
            flushed = await flush
        elif replicas is not None:
            replica_status = await replicas
        return final_status(PutStatus.PUT_OK if flushed else PutStatus.FLUSH_DISK_TIMEOUT, replica_status)

    # Housekeeping.

    def registration(self) -> pb.BrokerRegistration:
        return pb.BrokerRegistration(
            cluster=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            broker_id=self.advertised_id, address=self.address, ha_address=self.ha_address,
            role=self.role.value if self.controller_mode else self.config["brokerRole"],
            topics=[pb.TopicConfig(name=config.name, read_queue_nums=config.read_queue_nums,
                                   write_queue_nums=config.write_queue_nums, perm=config.perm)
                    for config in self.topics.all()],
            auto_create_topic=self.config["autoCreateTopicEnable"],
            default_queue_nums=self.config["defaultTopicQueueNums"], perm=self.config["brokerPermission"],
            max_offset=self.store.max_offset, acting_master=self.config["enableSlaveActingMaster"],
            master_epoch=self.master_epoch)

    @property
    def ha_address(self) -> str:
        return f"{self.config['brokerIP2'] or self.config['brokerIP1']}:{self.config['haListenPort']}"

    @property
    def advertised_id(self) -> int:
        """The id clients and the name server see: 0 for a master, as RocketMQ 5 clients read only
        from id 0; a controller-mode slave shows its controller id."""
        if not self.controller_mode:
            return self.config["brokerId"]
        return 0 if self.role is not BrokerRole.SLAVE else self.controller_id

    def clean_files(self) -> None:
        ratio = self.store.disk_usage_ratio()
        action = retention_action(
            hour=datetime.fromtimestamp(self.clock.now_ms() / 1000).hour,
            delete_hours=parse_delete_when(self.config["deleteWhen"]), disk_ratio=ratio,
            max_used_ratio=self.config["diskMaxUsedSpaceRatio"] / 100,
            force_ratio=self.config["diskSpaceCleanForciblyRatio"],
            warning_ratio=self.config["diskSpaceWarningLevelRatio"])
        if action.writable != self.writable:
            log.warning("disk usage %.1f%%: writes %s", ratio * 100, "resume" if action.writable else "refused")
        self.writable = action.writable
        if action.delete_expired or action.force:
            removed = self.store.clean_expired(self.clock.now_ms(), self.config["fileReservedTime"], action.force)
            if removed:
                log.info("retention removed %d commit-log segment(s); disk usage %.1f%%", removed, ratio * 100)

    def status(self) -> dict[str, str]:
        figures = dict(self.stats)
        figures.update(commitLogMinOffset=self.store.min_offset, commitLogMaxOffset=self.store.max_offset,
                       flushedOffset=self.store.flushed_offset, pendingMessages=self.pending_messages,
                       topicCount=len(self.topics.all()), diskUsedRatio=round(self.store.disk_usage_ratio(), 4),
                       writable=self.writable, brokerRole=self.role.value, acceptsSends=self.accepts_sends())
        if self.metrics is not None:
            figures["metricsAddress"] = "%s:%d" % metrics.address(self.config)
        if self.replication is not None:
            figures.update(aliveReplicas=self.alive_replicas, inSyncReplicas=self.in_sync_replicas(),
                           slaves=",".join(str(slave_id) for slave_id in sorted(self.replication.slaves)),
                           waitingForSlaves=self.replication.tracker.waiting)
        if self.controller_mode:
            figures.update(brokerId=self.controller_id, masterEpoch=self.master_epoch, masterId=self.master_id,
                           fenced=self.role is BrokerRole.SLAVE and not self.master_id,
                           handingOver=self.handing_over)
            if self.sync_state is not None:
                figures.update(syncStateSet=",".join(map(str, sorted(self.sync_state.members))),
                               syncStateSetEpoch=self.sync_state.epoch,
                               syncStateSetPending=",".join(map(str, sorted(self.sync_state.pending or ()))))
        if self.role is BrokerRole.SLAVE:
            known = self.slave.master_max_offset if self.slave is not None else None
            figures.update(masterAddress=self.master_address, replicating=bool(self.slave and self.slave.connected),
                           masterMaxOffset="" if known is None else known)
        return {key: str(value) for key, value in figures.items()}


def _last_message_id(records: bytes) -> str:
    """The message id of the last of a producer's encoded records ("" when they do not parse:
    storing them refuses them with the reason)."""
    position = codec.last_record_position(records)
    try:
        return codec.message_property(records, position, MESSAGE_ID) if position is not None else ""
    except ValueError:
        return ""
