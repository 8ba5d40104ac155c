"""The broker assembled: one store, and the parts that work on it.

* the send path (broker/send_path.py): admission, the append, the flush and replica waits;
* topics and consumer groups' positions (broker/topics.py);
* consumer groups' leases, FIFO queues' replicated lease log and dead letters (broker/consumers.py,
  broker/lease_log.py, broker/dead_letters.py);
* metadata replication (broker/metadata.py): what slaves copy besides the log;
* pulls (broker/pulls.py);
* a master's delay messages and transactional messages (broker/timers.py, broker/transactions.py),
  whose state is records in system topics, read afresh by each new master;
* the role, here: a master streams its commit log to its slaves (replication/master.py) and, as a
  SYNC_MASTER, holds each send until the copies RIP-34 asks for hold it (core/quorum.py decides,
  spec rocketmq-ha.md 1.2). A slave follows its master (replication/slave.py) and refuses sends.

In controller mode (spec 2.7) the role is not configured: it is a transition table
(core/role.py) that starts fenced, driven by the controller link (broker/controller_link.py):
`become_master` and `become_slave` for each newer master epoch, `change_role` for registration
and the hand-over. Each role change first settles the epoch file: a new master appends its epoch
at its log's end; a new slave cuts its log back to the point where it and its master's agree
(`align_with`, with the master's epochs) before it replicates anything.

All state is owned by the event-loop thread; only fdatasync runs in a worker thread (the flusher).
"""

import asyncio
import logging
from datetime import datetime
from pathlib import Path

from quorumq import metrics, tls
from quorumq.broker.access import Access
from quorumq.broker.consumers import ConsumerGroups
from quorumq.broker.dead_letters import DeadLetters
from quorumq.broker.lease_log import LeaseLog
from quorumq.broker.metadata import MetadataSync, topic_config_pb
from quorumq.broker.metrics import BrokerCounters
from quorumq.broker.pulls import Arrivals, Pulls
from quorumq.broker.send_path import PutResult, SendPath
from quorumq.broker.timers import Timers
from quorumq.broker.topics import Topics
from quorumq.broker.transactions import Transactions
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config
from quorumq.core import auth
from quorumq.core.epochs import EpochCache, find_consistent_point
from quorumq.core.message_types import TopicMessageType
from quorumq.core.quorum import BrokerRole
from quorumq.core.retention import parse_delete_when, retention_action
from quorumq.core.role import Elected, Event, Follow, Phase, Role, RoleRefused, transition
from quorumq.core.sync_state import SyncStateSet
from quorumq.errors import QuorumqError
from quorumq.replication import ReplicationMaster, ReplicationSlave
from quorumq.store import MessageStore, TopicConfig
from quorumq.store.epoch_file import EpochFile
from quorumq.store.flush import Flusher

__all__ = ["Broker", "PutResult"]

log = logging.getLogger("quorumq.broker")


class Broker:
    def __init__(self, config: Config, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.address = config["advertisedAddress"] or f"{config['brokerIP1']}:{config['listenPort']}"
        root = Path(config["storePathRootDir"])
        self.store = MessageStore(root, segment_bytes=config["mappedFileSizeCommitLog"],
                                  store_host=self.address, clock=clock)
        self.consumers: ConsumerGroups | None = None
        self.flusher: Flusher | None = None
        self.arrivals = Arrivals()
        self.topics_changed = asyncio.Event()
        self.writable = True
        self.stats = {"msgPutTotal": 0, "msgGetTotal": 0, "sendRejectedTotal": 0, "msgSkippedTooLargeTotal": 0}
        self.metrics = BrokerCounters(self.clock) if metrics.enabled(config) else None  # None: nothing counted
        self.controller_mode = config["enableControllerMode"]
        self._configured_role = BrokerRole(config["brokerRole"])  # outside controller mode
        self.role_state = Role()  # controller mode: fenced until the controller names a master
        self._role_change = asyncio.Lock()  # one become_master/become_slave at a time
        self.sync_state: SyncStateSet | None = None  # a controller-mode master's SyncStateSet
        self.epoch_file = EpochFile(root)
        self.epochs: EpochCache | None = None  # controller mode: the master epochs of this log
        # The broker member group's size (spec 1.3): totalReplicas until the name server answers.
        self.alive_replicas = config["totalReplicas"]
        self.replication: ReplicationMaster | None = None  # a master's stream to its slaves
        self.slave: ReplicationSlave | None = None  # a slave's stream from its master, once it is known
        # The HA stream's TLS, both ways (None: plaintext), loaded once: a bad file fails the start.
        self._ha_tls_server = tls.server_context(config)
        member = tls.ClientTls.of_member(config)
        self._ha_tls_client = member.context() if member is not None else None
        # With authentication, a slave proves on the HA port that it holds the inner credentials.
        self._ha_inner: auth.User | None = config["innerClientAuthenticationCredentials"]
        self.master_address = ""  # a slave's master (gRPC), from the name server
        self.slave_lost = asyncio.Event()  # controller mode: a slave's connection ended
        self._readable_end = 0  # see readable_end; nothing is known to be on every member yet
        self._repair_until: int | None = None  # see store_damaged
        self.topics = Topics(self)
        self.metadata_sync = MetadataSync(self)
        self.access = Access(self, root)
        self.sends = SendPath(self)
        self.pulls = Pulls(self)
        self.dead_letters = DeadLetters(self)
        self.timers = Timers(self)
        self.transactions = Transactions(self)
        # What the endpoints, the admin service and the loops call.
        self.put, self.put_encoded = self.sends.put, self.sends.put_encoded
        self.accepts_sends, self.in_sync_replicas = self.sends.accepts_sends, self.sends.in_sync_replicas
        self.pull, self.count_read = self.pulls.pull, self.pulls.count_read
        self.topic_config, self.change_topic, self.delete_topic = (self.topics.topic_config, self.topics.change_topic,
                                                                   self.topics.delete_topic)
        self.readable_queue_ids, self.check_queue = self.topics.readable_queue_ids, self.topics.check_queue
        self.commit_offset = self.topics.commit_offset
        self.metadata_for, self.adopt_metadata, self.metadata_joined = (
            self.metadata_sync.metadata_for, self.metadata_sync.adopt_metadata, self.metadata_sync.metadata_joined)

    def open(self) -> None:
        report = self.store.open()
        log.info("store recovered: %s", report)
        if report.truncated_bytes:
            self._repair_until = report.end_offset + report.truncated_bytes
        self.topics.load()
        self.access.load()
        root = Path(self.config["storePathRootDir"])
        lease_log = LeaseLog(self.store, root, self.clock, self.address, self.sends.check_role, self._lease_appended)
        self.consumers = ConsumerGroups(self.store, root, self.clock, self.config, self.readable_end, lease_log,
                                        self._fifo_topic)
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
            self.sends.recall_recent_sends()

    async def start(self) -> None:
        self.flusher.start()
        if self.replication is not None:
            await self.replication.start()
            self._serve_parked()

    def _serve_parked(self) -> None:
        """As the master: read the delay and transactional messages its log holds, then serve them."""
        self.timers.start()
        self.transactions.start()

    async def _stop_parked(self) -> None:
        await self.timers.stop()
        await self.transactions.stop()

    async def close(self) -> None:
        await self._stop_parked()
        if self.replication is not None:
            await self.replication.stop()
        if self.slave is not None:
            await self.slave.stop()
        await self.flusher.stop()
        self.consumers.persist()
        self.store.close()

    # The role: configured, or in controller mode the transition table's (read-only here; changed
    # by change_role, become_master and become_slave).

    @property
    def role(self) -> BrokerRole:
        if not self.controller_mode:
            return self._configured_role
        return BrokerRole.SYNC_MASTER if self.role_state.is_master else BrokerRole.SLAVE

    @property
    def master_epoch(self) -> int:
        """The newest master epoch this process applied (controller mode)."""
        return self.role_state.epoch

    @property
    def master_id(self) -> int:
        """The controller's id of the current master, when known."""
        return self.role_state.master_id

    @property
    def controller_id(self) -> int:
        """This broker's id at the controller (controller mode), once registered."""
        return self.role_state.broker_id

    @property
    def handing_over(self) -> bool:
        """A master fencing its writes for its preferred broker."""
        return self.role_state.phase is Phase.HANDING_OVER

    def change_role(self, event: Event) -> bool:
        """Apply a role event that needs no more than the table (registration, the hand-over's
        begin and end); False, and the role unchanged, when the table refuses it."""
        try:
            self.role_state = transition(self.role_state, event)
        except RoleRefused as refused:
            log.info("role event refused: %s", refused)
            return False
        return True

    def _next_role(self, event: Event) -> Role | None:
        """The role `event` leads to, decided before any side effect; None when the table refuses it."""
        try:
            return transition(self.role_state, event)
        except RoleRefused as refused:
            log.debug("role event refused: %s", refused)
            return None

    async def become_master(self, epoch: int, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> bool:
        """The controller elected this broker master of `epoch`; False when the epoch is not newer
        than the one this process applied, or older than the last epoch of its log (a restarted
        master may take its own last epoch again)."""
        async with self._role_change:
            elected = self._next_role(Elected(epoch))
            if elected is None or self._older_than_log(epoch):
                return False
            if self.slave is not None:
                await self.slave.stop()
                self.slave = None
            if self.epochs.last_epoch != epoch:  # a restarted master keeps its own epoch's start
                self.epochs.truncate_suffix_by_epoch(epoch)
                appended = self.epochs.append(epoch, self.store.max_offset)
                assert appended, (epoch, self.epochs.entries)
                self.epoch_file.save(self.epochs)
            self.master_address = self.address
            self.consumers.lease_log.catch_up()  # the FIFO lease records it holds and has not applied
            self.sync_state = SyncStateSet(frozenset(sync_state_set), sync_state_set_epoch)
            self.metadata_sync.new_term()
            self.sends.recall_recent_sends()  # the log it holds, not what an older role remembered
            if self.replication is None:
                self.replication = self._new_replication_master()
                await self.replication.start()
            self._complete_sync_state_change()
            self.role_state = elected
            self._serve_parked()
            self.topics_changed.set()  # register at once as the master
            log.warning("master of %s at epoch %d from offset %d (SyncStateSet %s)", self.config["brokerName"],
                        epoch, self.store.max_offset, sorted(sync_state_set))
            return True

    async def become_slave(self, epoch: int, master_id: int, master_address: str) -> bool:
        """The controller named another broker master of `epoch`; False when the epoch is older,
        or when it is the epoch this broker already follows. The caller then aligns the log with
        the new master's and follows it (`align_and_follow`). An epoch older than the last of this log
        is refused too."""
        async with self._role_change:
            following = self._next_role(Follow(epoch, master_id))
            if following is None or self._older_than_log(epoch):
                return False
            was_master = self.replication is not None
            await self._stop_parked()
            if was_master:
                # Waiting sends end as FLUSH_SLAVE_TIMEOUT: a deposed master acknowledges nothing more.
                await self.replication.stop()
                self.replication = None
            if self.slave is not None:
                await self.slave.stop()
                self.slave = None
            self.role_state, self.sync_state = following, None
            self.metadata_sync.pulse()  # waiting commits end: a deposed master confirms nothing more
            self.master_address = master_address
            self.topics_changed.set()
            log.warning("slave of %s at epoch %d: master %d at %s%s", self.config["brokerName"], epoch, master_id,
                        master_address, " (was master)" if was_master else "")
            return True

    def _older_than_log(self, epoch: int) -> bool:
        """Spec 2.9: a role of an epoch older than the last one this log holds is refused, so after
        a restart the epoch file, not the process's memory, is the floor. Only stale controller
        data (or a broker set cleaned at the controller while its stores were kept) leads here,
        and only an operator can mend that: said loudly."""
        if epoch >= self.epochs.last_epoch:
            return False
        log.error("refusing a role of master epoch %d: this log already holds epoch %d", epoch, self.epochs.last_epoch)
        return True

    async def align_and_follow(self, epoch: int, master_address: str, master_ha_address: str,
                               master_epochs: EpochCache, master_max_offset: int) -> int | None:
        """As the slave of `epoch`: cut the log to where it agrees with the master's (`align_with`),
        then replicate from the master. Taken between role changes, never in the middle of one (a
        broker being elected must not cut its log against the master it replaces). None when the
        role moved on (nothing done); -1 when the two logs share no epoch."""
        async with self._role_change:
            if self.role is not BrokerRole.SLAVE or self.master_epoch != epoch or self.slave is not None:
                return None
            point = self.align_with(master_epochs, master_max_offset)
            if point >= 0:
                self.follow(master_address, master_ha_address)
            return point

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
            self.consumers.lease_log.log_cut()
            self.epochs.reconcile(corrupt)
        local_max = self.store.max_offset
        point = find_consistent_point(self.epochs, local_max, master_epochs, master_max_offset)
        if point < 0:
            return -1
        if point < local_max:
            log.warning("truncating %d bytes this broker alone holds (from %d)", local_max - point, point)
            self.store.truncate(point)
            self.consumers.lease_log.log_cut()
            self.sends.forget_recent_sends()
            self._readable_end = min(self._readable_end, point)
        self.epochs.truncate_suffix_by_offset(point)
        self.epoch_file.save(self.epochs)
        return point

    # Replication.

    def _new_replication_master(self) -> ReplicationMaster:
        return ReplicationMaster(
            self.store, clock=self.clock, cluster_name=self.config["brokerClusterName"],
            broker_name=self.config["brokerName"], host=self.config["bindAddress"], port=self.config["haListenPort"],
            transfer_batch_bytes=self.config["haTransferBatchSize"], on_slave_lost=self._on_slave_lost,
            epochs=self.epochs, tls=self._ha_tls_server, authenticate=self.config["authenticationEnabled"],
            inner=self._ha_inner, **self._ha_intervals())

    def _new_replication_slave(self, host: str, port: int) -> ReplicationSlave:
        return ReplicationSlave(
            self.store, clock=self.clock, master_host=host, master_port=port,
            broker_id=self.replica_id,
            cluster_name=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            acks_flushed=self.config["flushDiskType"] == "SYNC_FLUSH", async_learner=self.config["asyncLearner"],
            sync_from_last_file=self.config["syncFromLastFile"], epochs=self.epochs,
            epoch_file=self.epoch_file if self.controller_mode else None, known_epoch=self.master_epoch,
            on_appended=self._lease_records_copied, tls=self._ha_tls_client,
            credentials=self._ha_credentials(), **self._ha_intervals())

    def _ha_credentials(self) -> auth.Credentials | None:
        """What a slave answers its master's challenge with (None: it expects no challenge)."""
        return self.config.inner_credentials() if self.config["authenticationEnabled"] else None

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

    def _lease_records_copied(self) -> None:
        """A slave applies the FIFO lease records of what it just copied (broker/lease_log.py)."""
        try:
            self.consumers.lease_log.catch_up()
        except QuorumqError as exc:  # a store error: replication goes on, the next copy retries
            log.error("applying FIFO lease records failed: %s", exc)

    def _lease_appended(self) -> None:
        if self.replication is not None:
            self.replication.notify_appended()

    def _fifo_topic(self, topic: str) -> bool:
        config = self.topics.configs.get(topic)
        return config is not None and config.message_type is TopicMessageType.FIFO

    def _on_slave_lost(self, slave_id: int) -> None:
        if self.controller_mode:
            self.slave_lost.set()  # the controller link drops it from the SyncStateSet at once
        else:
            self.sends.replan_waiting()

    def readable_end(self) -> int | None:
        """Where consumers' reads end: in controller mode with allAckInSyncStateSet, at what every
        member of the SyncStateSet holds (RocketMQ's confirm offset, spec 2.8 and scenario 31), so
        a failover never cuts a message a consumer has read; elsewhere no bound (None). A master
        counts its members' acks, a slave takes its master's word (each frame's confirm offset);
        while a member's copy is unknown the bound stays where it was."""
        if not self.metadata_sync.all_ack_in_sync_state_set:
            return None
        held = None
        if self.replication is not None:
            held = self.replication.tracker.all_members_hold(self.store.max_offset)
        elif self.slave is not None and self.slave.master_confirm_offset is not None:
            held = min(self.slave.master_confirm_offset, self.store.max_offset)
        if held is not None and held > self._readable_end:
            self._readable_end = held
        return self._readable_end

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

    # A controller-mode master's SyncStateSet.

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

    def sync_state_set_size(self) -> int:
        return self.sync_state.size if self.sync_state is not None else 1

    def _complete_sync_state_change(self) -> None:
        """Waiting ALL_ACK sends wait for the stricter view of the set (core/sync_state.py decision 4)."""
        self.metadata_sync.pulse()
        if self.replication is not None:
            self.replication.release(self.replication.tracker.set_sync_state_set(
                self.sync_state.quorum_members - {self.controller_id}))

    # Housekeeping.

    def registration(self, topics: list[TopicConfig] | None = None) -> pb.BrokerRegistration:
        """What the name servers route by: with `topics`, an increment carrying those only."""
        return pb.BrokerRegistration(
            cluster=self.config["brokerClusterName"], broker_name=self.config["brokerName"],
            broker_id=self.advertised_id, address=self.address, ha_address=self.ha_address,
            role=self.role.value if self.controller_mode else self.config["brokerRole"],
            topics=[topic_config_pb(config) for config in (self.topics.all() if topics is None else topics)],
            topics_increment=topics is not None,
            auto_create_topic=self.config["autoCreateTopicEnable"],
            default_queue_nums=self.config["defaultTopicQueueNums"], perm=self.config["brokerPermission"],
            max_offset=self.store.max_offset, acting_master=self.config["enableSlaveActingMaster"],
            master_epoch=self.master_epoch, access=self.access.to_pb())

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
        try:
            self.store.index_pending()  # what a full disk left unindexed is readable once space is back
        except QuorumqError:
            pass  # still full: logged by the store, tried again at the next run
        if action.delete_expired or action.force:
            removed = self.store.clean_expired(self.clock.now_ms(), self.config["fileReservedTime"], action.force)
            if removed:
                log.info("retention removed %d commit-log segment(s); disk usage %.1f%%", removed, ratio * 100)

    def status(self) -> dict[str, str]:
        figures = dict(self.stats)
        figures.update(commitLogMinOffset=self.store.min_offset, commitLogMaxOffset=self.store.max_offset,
                       flushedOffset=self.store.flushed_offset, pendingMessages=self.sends.pending_messages,
                       topicCount=len(self.topics.all()), diskUsedRatio=round(self.store.disk_usage_ratio(), 4),
                       writable=self.writable, brokerRole=self.role.value, acceptsSends=self.accepts_sends())
        figures.update(self.timers.figures, **self.transactions.figures,
                       transactionsUndecided=self.transactions.undecided)
        if self.metrics is not None:
            figures["metricsAddress"] = "%s:%d" % metrics.address(self.config)
        if self.replication is not None:
            figures.update(aliveReplicas=self.alive_replicas, inSyncReplicas=self.in_sync_replicas(),
                           slaves=",".join(str(slave_id) for slave_id in sorted(self.replication.slaves)),
                           waitingForSlaves=self.replication.tracker.waiting)
        if self.controller_mode:
            figures.update(brokerId=self.controller_id, masterEpoch=self.master_epoch, masterId=self.master_id,
                           fenced=self.role_state.phase is Phase.FENCED, handingOver=self.handing_over)
            if self.sync_state is not None:
                figures.update(syncStateSet=",".join(map(str, sorted(self.sync_state.members))),
                               syncStateSetEpoch=self.sync_state.epoch,
                               syncStateSetPending=",".join(map(str, sorted(self.sync_state.pending or ()))))
        if self.role is BrokerRole.SLAVE:
            known = self.slave.master_max_offset if self.slave is not None else None
            figures.update(masterAddress=self.master_address, replicating=bool(self.slave and self.slave.connected),
                           masterMaxOffset="" if known is None else known)
        return {key: str(value) for key, value in figures.items()}
