"""The controller process (`quorumq controller -c FILE`): RocketMQ's controller mode on ZooKeeper.

Several controllers may run; the one whose ZooKeeper member node is oldest leads (metadata.py).
Only the leader answers requests and holds brokers' heartbeat streams; the others answer
CONTROLLER_NOT_LEADER with the leader's address. The leader:

* decides every request with the pure core (core/controller_state.decide), folds the events into
  the broker set and writes it to ZooKeeper conditionally; a conflict means "decide again on what
  is there now", a lost session means "step down";
* keeps each broker's live data (heartbeats) in memory. A broker's stream that ends (its process
  died: the kernel closes the socket; or it froze: an HTTP/2 keepalive ping went unanswered) or
  falls silent past its timeout removes it; a master removed so is replaced at once by a
  controller-triggered election, and a periodic scan elects for any set whose master is inactive
  while a replica lives (spec rocketmq-ha.md 2.6);
* pushes every change of master or SyncStateSet down the members' streams, so brokers change
  roles at once rather than at their next poll;
* with enablePreferredMaster, tells a master to hand its role to the preferred broker once that
  broker is in the SyncStateSet (core/controller_state.handover_target); the master fences its
  writes, waits for the preferred broker to hold every byte, and asks for the designated election.

A new leader has no live data: for one heartbeat timeout it elects for no one on its own, so the
brokers can reconnect before a master counts as lost.
"""

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from quorumq import limits, metrics
from quorumq.client.controller import KEEPALIVE
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.config import Config
from quorumq.controller.metadata import NotLeader, ReplicaMetadata
from quorumq.controller.metrics import ControllerCounters
from quorumq.core import controller_state as cs
from quorumq.errors import QuorumqError
from quorumq.grpc_errors import abort

log = logging.getLogger("quorumq.controller")

TRANSACTION_ATTEMPTS_MAX = 5  # decide-and-write rounds lost to concurrent writes before giving up
NEW_LEADER_GRACE_S = 3.0  # a new leader waits this long for heartbeats before electing on its own
HAND_OVER_RETRY_S = 10.0  # between two hand-over requests to the same master
LEADERSHIP_CHECK_S = 1.0  # how often membership is re-read without a ZooKeeper watch firing
NOTICE_QUEUE_MAX = 16  # role notices waiting on one broker's stream; a slow broker gets the latest
# The server pings the brokers' streams too (a frozen broker's connection ends, so does its stream)
# and accepts the brokers' pings, which come more often than gRPC's 5-minute default allows and on
# connections with no call in flight. It pings a stream only when no heartbeat came for the
# keepalive time: a broker whose heartbeats arrive keeps its stream even if nothing gets back to it
# (gRPC's flow-control probes would be pings as well, each ending the connection when unanswered).
SERVER_OPTIONS = [*KEEPALIVE, ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.bdp_probe", 0),
                  ("grpc.http2.min_ping_interval_without_data_ms", limits.CONTROLLER_PING_INTERVAL_MIN_MS)]


def reply_message(reply: cs.Reply, broker_set: cs.BrokerSet | None, ha_addresses: dict[int, str]) -> pb.ControllerReply:
    """The wire form of a decision, with the broker set's members and the master's HA address."""
    message = pb.ControllerReply(
        code=int(reply.code), message=reply.message,
        master_id=-1 if reply.master_id is None else reply.master_id, master_address=reply.master_address or "",
        master_epoch=reply.master_epoch, sync_state_set=sorted(reply.sync_state_set),
        sync_state_set_epoch=reply.sync_state_set_epoch, broker_id=reply.broker_id or 0,
        master_ha_address=ha_addresses.get(reply.master_id, "") if reply.master_id is not None else "")
    if broker_set is not None:
        for broker_id, (address, _) in broker_set.brokers.items():
            message.brokers[broker_id] = address
    return message


def not_leader(leader_address: str) -> pb.ControllerReply:
    return pb.ControllerReply(code=int(cs.Code.CONTROLLER_NOT_LEADER), master_id=-1,
                              message="this controller is not the leader", leader_address=leader_address)


class Controller(pb_grpc.ControllerServicer):
    def __init__(self, config: Config, zookeeper: KazooClient, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.address = f"{config['bindAddress']}:{config['listenPort']}"
        self.zookeeper = zookeeper
        self.metadata = ReplicaMetadata(zookeeper, config["zookeeperRoot"])
        self.is_leader = False
        self.leader_address = ""
        self.controllers: list[str] = []
        self._leader_since_s = 0.0
        self._membership_changed = asyncio.Event()
        self._rejoin = True  # no member node in the current session
        self._loop = asyncio.get_running_loop()
        # The leader's memory, rebuilt from heartbeats after every change of leader.
        self.live: dict[str, dict[int, cs.LiveBroker]] = {}
        self.ha_addresses: dict[str, dict[int, str]] = {}
        self.clusters: dict[str, str] = {}
        self._streams: dict[tuple[str, int], asyncio.Queue] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._hand_over_asked_s: dict[str, float] = {}
        self.metrics = ControllerCounters(clock) if metrics.enabled(config) else None
        zookeeper.add_listener(self._on_zookeeper_state)

    def settings(self) -> cs.ControllerSettings:
        return cs.ControllerSettings(enable_elect_unclean_master=self.config["enableElectUncleanMaster"],
                                     enable_preferred_master=self.config["enablePreferredMaster"])

    # Leadership.

    def _on_zookeeper_state(self, state: KazooState) -> None:
        """kazoo's thread: a lost or suspended session ends the leadership at once."""
        if state in (KazooState.LOST, KazooState.SUSPENDED):
            self._loop.call_soon_threadsafe(self._step_down, f"ZooKeeper session {state.lower()}")
        if state == KazooState.LOST:
            self._rejoin = True
        self._loop.call_soon_threadsafe(self._membership_changed.set)

    def _on_members_changed(self, _event) -> None:
        self._loop.call_soon_threadsafe(self._membership_changed.set)

    async def keep_leadership(self) -> None:
        """Join the election and follow who leads; step up or down as the members change."""
        while True:
            self._membership_changed.clear()
            try:
                if self._rejoin and self.zookeeper.connected:
                    await asyncio.to_thread(self.metadata.join, self.address)
                    self._rejoin = False
                if self.zookeeper.connected and not self._rejoin:
                    members = await asyncio.to_thread(self.metadata.members, self._on_members_changed)
                    self._follow(members)
            except Exception as exc:  # ZooKeeper unreachable: nothing changes until it is back
                log.warning("reading the controller membership failed: %s: %s", type(exc).__name__, exc)
                self._step_down("ZooKeeper unreachable")
            try:
                await asyncio.wait_for(self._membership_changed.wait(), LEADERSHIP_CHECK_S)
            except TimeoutError:
                pass

    def _follow(self, members: list[tuple[str, str]]) -> None:
        self.controllers = [address for _, address in members]
        self.leader_address = members[0][1] if members else ""
        leads = bool(members) and members[0][0] == self.metadata.member_node
        if leads and not self.is_leader:
            self.is_leader = True
            self._leader_since_s = self.clock.monotonic()
            log.info("controller %s leads (controllers: %s)", self.address, ", ".join(self.controllers))
        elif not leads:
            self._step_down(f"{self.leader_address or 'no one'} leads")

    def _step_down(self, reason: str) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        log.warning("controller %s steps down: %s", self.address, reason)
        for queue in self._streams.values():
            _offer(queue, pb.RoleNotice(leader_address=self.leader_address))
            _offer(queue, None)
        self._streams.clear()
        self.live.clear()

    # Deciding and writing.

    async def _transact(self, broker_name: str, request) -> tuple[pb.ControllerReply, tuple]:
        """Decide `request` on the stored broker set and write the outcome, one request of a set
        at a time; returns the reply and the events that were written. A caller that gives up
        (its deadline passed) while its turn has not come decides nothing; once its decision has
        begun, the decision finishes without it: a write it began may still land, so the set's
        lock is held until the write is known, and its notices still go out."""
        lock = self._locks.setdefault(broker_name, asyncio.Lock())
        await lock.acquire()
        decision = asyncio.ensure_future(self._decide(broker_name, request))
        decision.add_done_callback(lambda _: lock.release())
        try:
            return await asyncio.shield(decision)
        except asyncio.CancelledError:
            decision.add_done_callback(_report_abandoned)
            raise

    async def _decide(self, broker_name: str, request) -> tuple[pb.ControllerReply, tuple]:
        for _ in range(TRANSACTION_ATTEMPTS_MAX):
            if not self.is_leader:
                return not_leader(self.leader_address), ()
            broker_set, version = await asyncio.to_thread(self.metadata.read, broker_name)
            reply, events = cs.decide(broker_set, self.live.get(broker_name, {}), request, self.clock.monotonic_ms(),
                                      self.settings())
            after = cs.fold(broker_set, events)
            if events:
                try:
                    written = await asyncio.to_thread(self.metadata.commit, broker_name, version, after)
                except NotLeader as exc:
                    self._step_down(str(exc))
                    return not_leader(self.leader_address), ()
                if not written:
                    continue  # another decision landed first: decide again on it
                log.info("%s: %s -> %s", broker_name, type(request).__name__,
                         ", ".join(type(event).__name__ for event in events))
            if self.metrics is not None and isinstance(request, cs.ElectMaster):
                self.metrics.election(broker_set, request, reply.code, events)
            message = reply_message(reply, after, self.ha_addresses.get(broker_name, {}))
            if any(isinstance(event, (cs.MasterElected, cs.SyncStateSetAltered)) for event in events):
                self._notify(broker_name, message)
            return message, events
        return pb.ControllerReply(code=int(cs.Code.CONTROLLER_INVALID_REQUEST), master_id=-1,
                                  message=f"{broker_name}: concurrent changes, try again"), ()

    def _notify(self, broker_name: str, message: pb.ControllerReply) -> None:
        """Push the broker set's new state to its live members (notifyBrokerRoleChanged)."""
        if not self.config["notifyBrokerRoleChanged"]:
            return
        for (name, _), queue in self._streams.items():
            if name == broker_name:
                _offer(queue, pb.RoleNotice(replica_info=message))

    async def _elect_for_lost_master(self, broker_name: str) -> None:
        cluster = self.clusters.get(broker_name, "")
        reply, events = await self._transact(broker_name, cs.ElectMaster(cluster, broker_name, -1,
                                                                         cs.Trigger.CONTROLLER))
        if reply.code == cs.Code.SUCCESS:
            log.warning("%s: master %d elected (epoch %d)", broker_name, reply.master_id, reply.master_epoch)
        elif events:  # "not elected" recorded once; later scans find the same and say nothing new
            log.warning("%s: no master elected: %s", broker_name, reply.message or cs.Code(reply.code).name)

    # Liveness.

    def _in_grace(self) -> bool:
        return self.clock.monotonic() - self._leader_since_s < NEW_LEADER_GRACE_S

    async def _broker_gone(self, broker_name: str, broker_id: int, why: str) -> None:
        self.live.get(broker_name, {}).pop(broker_id, None)
        log.info("%s: broker %d gone (%s)", broker_name, broker_id, why)
        try:
            broker_set, _ = await asyncio.to_thread(self.metadata.read, broker_name)
            if broker_set is not None and broker_set.master_id == broker_id and self.is_leader:
                await self._elect_for_lost_master(broker_name)
        except KazooException as exc:  # ZooKeeper gone: the scan elects once it is back
            log.warning("%s: no election for lost broker %d: %s", broker_name, broker_id, type(exc).__name__)

    async def scan(self) -> None:
        """Expire silent brokers (scanNotActiveBrokerInterval) and elect for sets whose master is
        inactive while a replica lives (scanInactiveMasterInterval)."""
        last_master_scan_s = 0.0
        while True:
            await asyncio.sleep(self.config["scanNotActiveBrokerInterval"] / 1000)
            if not self.is_leader or self._in_grace():
                continue
            try:
                await self._expire_silent()
                if self.clock.monotonic() - last_master_scan_s >= self.config["scanInactiveMasterInterval"] / 1000:
                    last_master_scan_s = self.clock.monotonic()
                    await self._elect_for_inactive_masters()
            except KazooException as exc:  # ZooKeeper gone or the session expired: the next scan retries
                log.warning("controller scan: ZooKeeper is unavailable (%s)", type(exc).__name__)
            except Exception:
                log.exception("controller scan failed")

    async def _expire_silent(self) -> None:
        now = self.clock.monotonic_ms()
        for broker_name, brokers in list(self.live.items()):
            for broker_id, live in list(brokers.items()):
                if not live.active(now):
                    await self._broker_gone(broker_name, broker_id, "heartbeat timed out")

    async def _elect_for_inactive_masters(self) -> None:
        for broker_name in await asyncio.to_thread(self.metadata.names):
            broker_set, _ = await asyncio.to_thread(self.metadata.read, broker_name)
            live = self.live.get(broker_name, {})
            if broker_set is not None and cs.inactive_master(broker_set, live, self.clock.monotonic_ms()):
                await self._elect_for_lost_master(broker_name)

    # The preferred master.

    async def _maybe_hand_over(self, broker_name: str) -> None:
        if not self.config["enablePreferredMaster"] or self._in_grace():
            return
        if self.clock.monotonic() - self._hand_over_asked_s.get(broker_name, 0.0) < HAND_OVER_RETRY_S:
            return
        try:
            broker_set, _ = await asyncio.to_thread(self.metadata.read, broker_name)
        except KazooException:
            return  # ZooKeeper unreachable: no hand-over now, nor a failed heartbeat stream
        if broker_set is None:
            return
        target = cs.handover_target(broker_set, self.live.get(broker_name, {}), self.clock.monotonic_ms(),
                                    self.settings())
        queue = self._streams.get((broker_name, broker_set.master_id))
        if target is None or queue is None:
            return
        self._hand_over_asked_s[broker_name] = self.clock.monotonic()
        if self.metrics is not None:
            self.metrics.handback_asked(broker_name)
        log.info("%s: asking master %d to hand over to preferred broker %d", broker_name, broker_set.master_id,
                 target)
        _offer(queue, pb.RoleNotice(hand_over_to=target))

    # The RPCs.

    async def GetNextBrokerId(self, request: pb.BrokerSetRequest, context) -> pb.ControllerReply:
        return await self._answer(request.broker_name, cs.GetNextBrokerId(request.cluster, request.broker_name))

    async def ApplyBrokerId(self, request: pb.ApplyBrokerIdRequest, context) -> pb.ControllerReply:
        self.clusters[request.broker_name] = request.cluster
        return await self._answer(request.broker_name, cs.ApplyBrokerId(
            request.cluster, request.broker_name, request.broker_id, request.check_code, request.address))

    async def RegisterBroker(self, request: pb.RegisterBrokerRequest, context) -> pb.ControllerReply:
        self.clusters[request.broker_name] = request.cluster
        return await self._answer(request.broker_name, cs.RegisterBroker(
            request.cluster, request.broker_name, request.broker_id, request.address))

    async def AlterSyncStateSet(self, request: pb.AlterSyncStateSetRequest, context) -> pb.ControllerReply:
        reply = await self._answer(request.broker_name, cs.AlterSyncStateSet(
            request.broker_name, request.master_id, request.master_epoch, frozenset(request.sync_state_set),
            request.sync_state_set_epoch))
        if reply.code == cs.Code.SUCCESS:
            await self._maybe_hand_over(request.broker_name)
        return reply

    async def ElectMaster(self, request: pb.ElectMasterRequest, context) -> pb.ControllerReply:
        trigger = cs.Trigger.ADMIN if request.designated else cs.Trigger.BROKER
        return await self._answer(request.broker_name, cs.ElectMaster(
            request.cluster, request.broker_name, request.broker_id, trigger))

    async def GetReplicaInfo(self, request: pb.BrokerSetRequest, context) -> pb.ControllerReply:
        return await self._answer(request.broker_name, cs.GetReplicaInfo(request.broker_name))

    async def CleanBrokerData(self, request: pb.CleanBrokerDataRequest, context) -> pb.ControllerReply:
        ids = frozenset(request.broker_ids) or None
        return await self._answer(request.broker_name, cs.CleanBrokerData(request.cluster, request.broker_name, ids))

    async def _answer(self, broker_name: str, request) -> pb.ControllerReply:
        if not self.is_leader:
            return not_leader(self.leader_address)
        started_s = self.clock.monotonic()
        try:
            reply, _ = await self._transact(broker_name, request)
        except KazooException as exc:  # ZooKeeper unreachable: decide nothing, the caller retries
            reply = pb.ControllerReply(code=int(cs.Code.CONTROLLER_NOT_LEADER), master_id=-1,
                                       message=f"ZooKeeper unavailable: {type(exc).__name__}")
        if self.metrics is not None:
            self.metrics.request(request, reply.code, started_s)
        return reply

    async def GetMetaData(self, request: pb.Empty, context) -> pb.ControllerMetaData:
        return pb.ControllerMetaData(leader_address=self.leader_address, controllers=self.controllers,
                                     zookeeper=self.config["zookeeperAddress"], is_leader=self.is_leader)

    async def GetControllerConfig(self, request: pb.Empty, context) -> pb.ConfigMap:
        return pb.ConfigMap(entries=self.config.as_strings())

    async def UpdateControllerConfig(self, request: pb.ConfigUpdate, context) -> pb.Empty:
        try:
            self.config.update_live(request.key, request.value)
        except QuorumqError as error:
            await abort(context, error)
        log.info("config %s=%s", request.key, request.value)
        return pb.Empty()

    async def Heartbeats(self, requests: AsyncIterator[pb.BrokerHeartbeat], context) -> AsyncIterator[pb.RoleNotice]:
        """One broker's stream: its heartbeats in, role notices out. The stream ending is the
        broker's channel closing (RocketMQ's onBrokerChannelClose)."""
        if not self.is_leader:
            yield pb.RoleNotice(leader_address=self.leader_address)
            return
        queue: asyncio.Queue = asyncio.Queue(NOTICE_QUEUE_MAX)
        reader = asyncio.create_task(self._read_heartbeats(requests, queue))
        try:
            while (notice := await queue.get()) is not None:
                yield notice
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _read_heartbeats(self, requests: AsyncIterator[pb.BrokerHeartbeat], queue: asyncio.Queue) -> None:
        key = None
        why = "its stream ended"
        try:
            async for heartbeat in requests:
                if not self.is_leader:
                    break
                key = (heartbeat.broker_name, heartbeat.broker_id)
                self._streams[key] = queue
                self._on_heartbeat(heartbeat)
                await self._maybe_hand_over(heartbeat.broker_name)
        except grpc.aio.AioRpcError as exc:
            why = f"its stream failed: {exc.code().name}"
        except (grpc.RpcError, asyncio.CancelledError):
            why = "its stream was cancelled"
        finally:
            _offer(queue, None)
            if key is not None and self._streams.get(key) is queue:
                del self._streams[key]
                if self.is_leader:
                    await asyncio.shield(self._broker_gone(*key, why))

    def _on_heartbeat(self, heartbeat: pb.BrokerHeartbeat) -> None:
        brokers = self.live.setdefault(heartbeat.broker_name, {})
        report = cs.LiveBroker(heartbeat.broker_id, heartbeat.address, self.clock.monotonic_ms(), heartbeat.timeout_ms,
                               heartbeat.epoch, heartbeat.max_offset, heartbeat.confirm_offset,
                               heartbeat.election_priority, heartbeat.async_learner,
                               heartbeat.store_damaged)
        brokers[heartbeat.broker_id] = cs.on_heartbeat(brokers.get(heartbeat.broker_id), report)
        self.ha_addresses.setdefault(heartbeat.broker_name, {})[heartbeat.broker_id] = heartbeat.ha_address
        self.clusters[heartbeat.broker_name] = heartbeat.cluster


def _report_abandoned(decision: asyncio.Future) -> None:
    """A decision whose caller left: its outcome reaches the brokers through notices and later
    reads, its failure only the log."""
    if not decision.cancelled() and decision.exception() is not None:
        log.warning("a decision whose caller left failed: %r", decision.exception())


def _offer(queue: asyncio.Queue, notice: pb.RoleNotice | None) -> None:
    """Queue a notice for a stream; a full queue drops its oldest notice (the newest state wins)."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(notice)
