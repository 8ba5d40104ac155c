"""A controller-mode broker's side of the controller (RocketMQ's ReplicasManager, spec
rocketmq-ha.md 2.7 and 2.8): its persistent id, registration, heartbeats, role changes, the
master's SyncStateSet upkeep and the hand-over to a preferred master.

* Identity: `storeRoot/brokerIdentity` holds the id the controller assigned. A registration in
  progress is kept in `brokerIdentity-temp` with its check code, so a broker that crashed between
  asking and writing asks again with the same code and gets the same id.
* One heartbeat stream to the leader (brokerHeartbeatInterval) carries the broker's epoch, offsets
  and brokerElectionPriority; the leader pushes role notices and hand-over requests back on it.
  HTTP/2 keepalive pings (client/controller.KEEPALIVE) find a frozen peer within seconds, well
  before controllerHeartBeatTimeoutMills: the controller's end a frozen broker's stream (and it
  replaces a frozen master); the broker's, on its calls' connection, have it move its stream once
  another controller answers.
  The replica info is also polled every syncBrokerMetadataPeriod, so a lost notice costs a period.
* A master reports SyncStateSet changes (core/sync_state.py): a slave that caught up joins, one
  that fell behind for haMaxTimeSlaveNotCatchup or whose connection ended leaves.
* Hand-over: asked by the leader, a master refuses new sends (a retriable SERVICE_NOT_AVAILABLE),
  waits up to preferredMasterHandOverTimeoutMillis for the preferred broker to hold every byte, then
  asks for the designated election of it; otherwise it resumes and the leader asks again later.
  An election request left unanswered keeps the writes fenced until the controller says who leads.
"""

import asyncio
import json
import logging
import random
from pathlib import Path

import grpc

from quorumq.broker.broker import Broker
from quorumq.client.controller import ControllerClient, controller_addresses
from quorumq.client.errors import ClientError
from quorumq.client.routes import open_channel
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.controller_state import Code
from quorumq.core.epochs import EpochCache
from quorumq.core.quorum import BrokerRole
from quorumq.core.role import HandOverBegins, HandOverEnds, Registered
from quorumq.core.sync_state import expanded, shrunk
from quorumq.store.atomic_file import write_atomically

log = logging.getLogger("quorumq.broker")

RETRY_INTERVAL_S = 1.0  # between attempts to reach a controller leader
ALIGN_RETRY_INTERVAL_S = 0.1  # a new master that has not taken its epoch yet is asked again this soon
HAND_OVER_POLL_S = 0.01  # how often a fenced master looks at its preferred broker's ack
SYNC_STATE_POLL_S = 0.1  # how often a master looks for slaves that caught up
LEADER_CHECK_TIMEOUT_S = 1.0  # a controller that does not answer this soon is taken as not leading


class ControllerLink:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.client = ControllerClient(controller_addresses(self.config["controllerAddr"]),
                                       credentials=self.config.inner_credentials())
        root = Path(self.config["storePathRootDir"])
        self._identity = root / "brokerIdentity"
        self._identity_temp = root / "brokerIdentity-temp"
        self._caught_up_ms: dict[int, float] = {}
        self._reporting = asyncio.Lock()  # one SyncStateSet change at the controller at a time
        self._hand_over: asyncio.Task | None = None
        self._aligning: asyncio.Task | None = None
        self._report_after_s = 0.0  # after a failed report, the next waits until then (monotonic)

    @property
    def _names(self) -> dict[str, str]:
        return {"cluster": self.config["brokerClusterName"], "broker_name": self.config["brokerName"]}

    async def run(self) -> None:
        """Register, then keep the broker's role in step with the controller."""
        self.broker.change_role(Registered(await self._retry(self._broker_id)))
        await self._retry(self._register)
        await asyncio.gather(self._heartbeats(), self._poll(), self._keep_sync_state_set())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.config["syncBrokerMetadataPeriod"] / 1000)
            try:
                await self.apply(await self._replica_info())
            except ClientError as error:
                log.debug("polling the controller failed: %s", error)
            except Exception:  # a bug must not end the polling for good
                log.exception("applying the controller's replica info failed")

    async def _replica_info(self) -> pb.ControllerReply:
        reply = await self.client.call("GetReplicaInfo", pb.BrokerSetRequest(**self._names))
        if reply.code != Code.SUCCESS:
            raise ClientError(Code(reply.code).name, reply.message or "no replica info")
        return reply

    async def close(self) -> None:
        for task in (self._hand_over, self._aligning):
            if task is not None:
                task.cancel()
        await self.client.close()

    async def _retry(self, action):
        while True:
            try:
                return await action()
            except ClientError as error:
                log.warning("controller: %s; retrying", error)
            await asyncio.sleep(RETRY_INTERVAL_S + random.random())

    # Identity and registration.

    async def _broker_id(self) -> int:
        if self._identity.exists():
            return json.loads(self._identity.read_text())["brokerId"]
        if self._identity_temp.exists():
            pending = json.loads(self._identity_temp.read_text())
        else:
            reply = await self.client.call("GetNextBrokerId", pb.BrokerSetRequest(**self._names))
            pending = {"brokerId": reply.broker_id, "checkCode": f"{self.broker.address};{self.broker.clock.now_ms()}"}
            write_atomically(self._identity_temp, json.dumps(pending).encode())
        reply = await self.client.call("ApplyBrokerId", pb.ApplyBrokerIdRequest(
            **self._names, broker_id=pending["brokerId"], check_code=pending["checkCode"], address=self.broker.address))
        if reply.code != Code.SUCCESS:
            self._identity_temp.unlink(missing_ok=True)  # the id went to another broker: ask for a new one
            raise ClientError(Code(reply.code).name, reply.message or f"broker id {pending['brokerId']} refused")
        write_atomically(self._identity, json.dumps({**self._names, "brokerId": pending["brokerId"]}).encode())
        self._identity_temp.unlink(missing_ok=True)
        log.info("controller assigned broker id %d", pending["brokerId"])
        return pending["brokerId"]

    async def _register(self) -> None:
        reply = await self.client.call("RegisterBroker", pb.RegisterBrokerRequest(
            **self._names, broker_id=self.broker.controller_id, address=self.broker.address))
        if reply.code != Code.SUCCESS:
            raise ClientError(Code(reply.code).name, reply.message or "registration refused")
        await self.apply(reply)

    # Role changes.

    async def apply(self, info: pb.ControllerReply) -> None:
        """Follow the controller's view of the broker set: change role for a newer epoch, take a
        newer SyncStateSet, or ask for an election when no master is known."""
        broker = self.broker
        if info.master_id <= 0:
            if info.master_epoch >= broker.master_epoch:
                await self._elect()
            return
        if info.master_id == broker.controller_id:
            if await broker.become_master(info.master_epoch, frozenset(info.sync_state_set),
                                          info.sync_state_set_epoch):
                self._caught_up_ms.clear()  # times from an earlier term say nothing about this one
            elif info.master_epoch == broker.master_epoch:
                broker.adopt_sync_state_set(frozenset(info.sync_state_set), info.sync_state_set_epoch)
        else:
            await broker.become_slave(info.master_epoch, info.master_id, info.master_address)
            if broker.slave is None and (self._aligning is None or self._aligning.done()):
                self._aligning = asyncio.create_task(self._align_and_follow(info.master_address, info.master_epoch))

    async def _align_and_follow(self, master_address: str, epoch: int) -> None:
        """Cut this broker's log to where it agrees with the new master's, then replicate from it;
        retried until done or until another role change supersedes it."""
        broker = self.broker
        channel = open_channel(master_address, credentials=broker.config.inner_credentials())
        try:
            while broker.role is BrokerRole.SLAVE and broker.master_epoch == epoch and broker.slave is None:
                try:
                    epochs = await pb_grpc.BrokerAdminStub(channel).GetBrokerEpochs(pb.Empty(), timeout=3.0)
                except grpc.aio.AioRpcError as exc:
                    log.info("master %s has no epochs for us yet: %s", master_address, exc.code().name)
                    await asyncio.sleep(RETRY_INTERVAL_S)
                    continue
                master_epochs = EpochCache([(entry.epoch, entry.start_offset) for entry in epochs.entries])
                if master_epochs.last_epoch < epoch:  # it has not taken its role yet
                    await asyncio.sleep(ALIGN_RETRY_INTERVAL_S)
                    continue
                point = await broker.align_and_follow(epoch, master_address, epochs.ha_address, master_epochs,
                                                      epochs.max_offset)
                if point is not None and point < 0:
                    log.error("this log shares no epoch with master %s (%s vs %s); not replicating",
                              master_address, broker.epochs.entries, master_epochs.entries)
                    await asyncio.sleep(RETRY_INTERVAL_S * 5)
        finally:
            await channel.close()

    async def _elect(self) -> None:
        """No master: ask to be elected (the controller picks the best candidate of the set); a
        learner waits for a master instead."""
        if self.config["asyncLearner"]:
            return
        reply = await self.client.call("ElectMaster", pb.ElectMasterRequest(
            **self._names, broker_id=self.broker.controller_id))
        if reply.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST) and reply.master_id > 0:
            await self.apply(reply)
        else:
            log.info("no master elected yet: %s %s", Code(reply.code).name, reply.message)

    # Heartbeats and notices.

    def heartbeat(self) -> pb.BrokerHeartbeat:
        broker = self.broker
        return pb.BrokerHeartbeat(
            **self._names, broker_id=broker.controller_id, address=broker.address, ha_address=broker.ha_address,
            epoch=broker.epochs.last_epoch, max_offset=broker.store.max_offset,
            confirm_offset=self.confirm_offset(), election_priority=self.config["brokerElectionPriority"],
            timeout_ms=self.config["controllerHeartBeatTimeoutMills"], async_learner=self.config["asyncLearner"],
            store_damaged=broker.store_damaged)

    async def _heartbeat_source(self):
        while True:
            yield self.heartbeat()
            await asyncio.sleep(self.config["brokerHeartbeatInterval"] / 1000)

    async def _heartbeats(self) -> None:
        """Hold one stream to the leader; a controller that does not lead names the leader."""
        while True:
            address = self.client.leader
            stream = asyncio.create_task(self._stream_to(address))
            try:
                await self._hold(stream, address)
            finally:
                stream.cancel()  # nothing when it ended
                await asyncio.gather(stream, return_exceptions=True)
            if stream.cancelled():  # left for the leader a call found
                continue
            hint = stream.result()
            if self.client.leader == address:  # else a call found the leader meanwhile
                self.client.redirect(address, hint)
            if self.client.leader != hint:  # no leader named that this broker reaches: a pause first
                await asyncio.sleep(RETRY_INTERVAL_S / 4)

    async def _hold(self, stream: asyncio.Task, address: str) -> None:
        """Until the stream ends; or its controller stops answering pings (a frozen process or
        machine never ends the stream) while another controller answers; or a call finds another
        controller leading and the stream's no longer answers as the leader. Leaving a live
        leader's stream would have it fail this broker over, so a broker that hears no
        controller at all (a link that loses the answers) keeps it: its heartbeats may arrive."""
        while True:
            since = self.client.answers
            elsewhere = asyncio.create_task(self.client.answered_elsewhere(address, since))
            unreachable = asyncio.create_task(self.client.unreachable(address, LEADER_CHECK_TIMEOUT_S))
            # Read when it fails, never awaited once cancelled (its channel's waits may not end at
            # once): one whose channel was closed as the broker stopped is no unread exception.
            unreachable.add_done_callback(lambda task: task.cancelled() or task.exception())
            try:
                await asyncio.wait({stream, elsewhere, unreachable}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                elsewhere.cancel()
                unreachable.cancel()
            if stream.done():
                return
            if unreachable.done() and not unreachable.cancelled() and unreachable.exception() is None:
                if await self._another_answers(address):
                    log.warning("controller %s does not answer pings: moving the heartbeat stream to %s", address,
                                self.client.leader)
                    return
                await asyncio.sleep(RETRY_INTERVAL_S)
            elif not await self._leads(address):
                log.warning("controller %s no longer leads: moving the heartbeat stream to %s", address,
                            self.client.leader)
                return

    async def _another_answers(self, address: str) -> bool:
        """Whether a controller other than `address` answers; if one does, the client asks next
        the leader it names, else the address after `address`."""
        others = [other for other in self.client.addresses if other != address]
        answers = await asyncio.gather(
            *(self.client.stub(other).GetMetaData(pb.Empty(), timeout=LEADER_CHECK_TIMEOUT_S) for other in others),
            return_exceptions=True)
        heard = {other: meta for other, meta in zip(others, answers) if isinstance(meta, pb.ControllerMetaData)}
        if not heard:
            return False
        leading = [other for other, meta in heard.items() if meta.is_leader]
        self.client.redirect(address, leading[0] if leading else next(iter(heard.values())).leader_address)
        return True

    async def _leads(self, address: str) -> bool:
        try:
            meta = await self.client.stub(address).GetMetaData(pb.Empty(), timeout=LEADER_CHECK_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return False
        return meta.is_leader

    async def _stream_to(self, address: str) -> str:
        """Heartbeats to `address` and its role notices, until the stream ends; the leader it
        names when it does not lead ("" if none)."""
        try:
            async for notice in self.client.stream_stub(address).Heartbeats(self._heartbeat_source()):
                if notice.leader_address or not notice.ListFields():
                    return notice.leader_address
                # Shielded: leaving the stream must not cut a role change in half.
                await asyncio.shield(self._apply_notice(notice))
        except grpc.aio.AioRpcError as exc:
            log.info("heartbeat stream to %s ended: %s", address, exc.code().name)
        return ""

    async def _apply_notice(self, notice: pb.RoleNotice) -> None:
        try:
            await self._on_notice(notice)
        except Exception:  # a bug must not end the stream: the controller would fail us over
            log.exception("applying a role notice failed")

    async def _on_notice(self, notice: pb.RoleNotice) -> None:
        if notice.HasField("replica_info"):
            await self.apply(notice.replica_info)
        if notice.hand_over_to and (self._hand_over is None or self._hand_over.done()):
            self._hand_over = asyncio.create_task(self.hand_over(notice.hand_over_to))

    # A master's SyncStateSet.

    def confirm_offset(self) -> int:
        """What every connected SyncStateSet member holds (the master's end when it is alone)."""
        broker = self.broker
        if broker.replication is None or broker.sync_state is None:
            return broker.store.max_offset
        slaves = broker.replication.tracker.slaves
        acks = [slaves[member].ack_offset for member in broker.sync_state.members
                if member in slaves and slaves[member].ack_offset is not None]
        return min([broker.store.max_offset, *acks])

    async def _keep_sync_state_set(self) -> None:
        """Expand as slaves catch up (checked often), shrink every checkSyncStateSetPeriod and at
        once when a slave's connection ends."""
        last_shrink_s = self.broker.clock.monotonic()
        while True:
            try:
                await asyncio.wait_for(self.broker.slave_lost.wait(), SYNC_STATE_POLL_S)
            except TimeoutError:
                pass
            lost = self.broker.slave_lost.is_set()
            self.broker.slave_lost.clear()
            now_s = self.broker.clock.monotonic()
            shrink = lost or now_s - last_shrink_s >= self.config["checkSyncStateSetPeriod"] / 1000
            if shrink:
                last_shrink_s = now_s
            try:
                await self._check_sync_state_set(now_s * 1000, shrink)
            except Exception:  # a bug must not end the upkeep for good
                log.exception("SyncStateSet upkeep failed")

    def _is_master(self) -> bool:
        return self.broker.replication is not None and self.broker.sync_state is not None

    async def _check_sync_state_set(self, now_ms: float, shrink: bool) -> None:
        """One round; the role may change while a report waits for the controller."""
        if not self._is_master():
            return
        if self.broker.sync_state.pending is not None:  # a proposal whose answer was lost
            await self._settle()
            return
        self._note_caught_up(now_ms)
        await self._expand()
        if shrink and self._is_master():
            await self._shrink(now_ms)

    def _note_caught_up(self, now_ms: float) -> None:
        """A slave is caught up when it has acked everything the master held when it last sent."""
        replication = self.broker.replication
        for slave_id, caught_up_to in replication.caught_up_offsets().items():
            progress = replication.tracker.slaves.get(slave_id)
            if progress is not None and progress.ack_offset is not None and progress.ack_offset >= caught_up_to:
                self._caught_up_ms[slave_id] = now_ms

    async def _expand(self) -> None:
        broker = self.broker
        epoch_start = broker.epochs.entries[-1].start_offset if broker.epochs.entries else 0
        handshakes = broker.replication.slaves
        for slave_id, progress in broker.replication.tracker.slaves.items():
            if progress.ack_offset is None or slave_id not in handshakes:
                continue
            proposal = expanded(broker.sync_state, slave_id, progress.ack_offset, slave_id in self._caught_up_ms,
                                self.confirm_offset(), epoch_start, handshakes[slave_id].async_learner)
            # Proposed in the same step as the check, so no change is answered without it between.
            if proposal is not None and broker.metadata_joined(slave_id):
                await self._report(proposal)
                return

    async def _shrink(self, now_ms: float) -> None:
        broker = self.broker
        # A learner counts as gone: one that was a member before it became a learner leaves.
        connected = {slave_id for slave_id, handshake in broker.replication.slaves.items()
                     if not handshake.async_learner}
        for slave_id in list(self._caught_up_ms):
            if slave_id not in connected:
                del self._caught_up_ms[slave_id]
        proposal = shrunk(broker.sync_state, broker.controller_id, connected, self._caught_up_ms, now_ms,
                          self.config["haMaxTimeSlaveNotCatchup"])
        if proposal is not None:
            await self._report(proposal)

    async def _report(self, proposal: frozenset[int]) -> None:
        """Ask the controller for a new SyncStateSet; ALL_ACK sends wait for the union meanwhile,
        and, when the answer is lost, until replica info asked for afterwards settles it."""
        broker = self.broker
        async with self._reporting:
            if (broker.sync_state is None or broker.role is BrokerRole.SLAVE
                    or broker.clock.monotonic() < self._report_after_s):
                return
            broker.propose_sync_state_set(proposal)
            try:
                reply = await self.client.call("AlterSyncStateSet", pb.AlterSyncStateSetRequest(
                    **self._names, master_id=broker.controller_id, master_epoch=broker.master_epoch,
                    sync_state_set=sorted(proposal), sync_state_set_epoch=broker.sync_state.epoch))
            except ClientError as error:
                # The controller may have taken it: going back to the old set would let sends be
                # acknowledged without a broker it may elect.
                log.warning("reporting SyncStateSet %s got no answer (%s): sends wait for both sets until "
                            "the controller says which it holds", sorted(proposal), error)
                self._report_after_s = broker.clock.monotonic() + RETRY_INTERVAL_S
                return  # the proposal stays pending: the next round settles it
            if reply.code == Code.SUCCESS:
                log.info("SyncStateSet %s (epoch %d)", sorted(reply.sync_state_set), reply.sync_state_set_epoch)
                broker.adopt_sync_state_set(frozenset(reply.sync_state_set), reply.sync_state_set_epoch)
            else:
                log.warning("controller refused SyncStateSet %s: %s %s", sorted(proposal), Code(reply.code).name,
                            reply.message)
                broker.drop_sync_state_proposal()
                self._report_after_s = broker.clock.monotonic() + RETRY_INTERVAL_S

    async def _settle(self) -> None:
        """Ask which set the controller holds, after a proposal's answer was lost (until it
        answers); a set of this master's epoch settles the proposal, taken or not."""
        broker = self.broker
        async with self._reporting:
            info = await self._retry(self._replica_info)
            if info.master_id == broker.controller_id and info.master_epoch == broker.master_epoch:
                broker.adopt_sync_state_set(frozenset(info.sync_state_set), info.sync_state_set_epoch, settles=True)
            else:
                await self.apply(info)

    # The hand-over to a preferred master.

    async def hand_over(self, target: int) -> bool:
        """Fence writes, wait until `target` holds every byte, ask for its election; resume when
        it does not catch up in time. Returns whether the role moved."""
        broker = self.broker
        epoch = broker.master_epoch
        if not broker.change_role(HandOverBegins(epoch)):  # not a master, or already handing over
            return False
        try:
            deadline = broker.clock.monotonic() + self.config["preferredMasterHandOverTimeoutMillis"] / 1000
            while not self._holds_everything(target):
                if not broker.handing_over:  # deposed, or elected again, meanwhile
                    return False
                if broker.clock.monotonic() >= deadline:
                    log.warning("preferred broker %d did not catch up in time; this master resumes", target)
                    return False
                await asyncio.sleep(HAND_OVER_POLL_S)
            try:
                reply = await self.client.call("ElectMaster", pb.ElectMasterRequest(
                    **self._names, broker_id=target, designated=True))
            except ClientError as error:
                # The election may have committed though its answer was lost: writes taken now at
                # this epoch could be acknowledged and then cut by the new master. Stay fenced
                # until the controller tells who leads.
                log.warning("hand-over to %d: %s; writes stay fenced until the controller answers", target, error)
                reply = await self._retry(self._replica_info)
            else:
                if reply.code != Code.SUCCESS:
                    log.warning("hand-over to %d refused: %s %s", target, Code(reply.code).name, reply.message)
                    return False
            await self.apply(reply)
            moved = reply.master_id == target
            if moved:
                log.warning("handed the master role to preferred broker %d (epoch %d)", target, reply.master_epoch)
            return moved
        finally:
            if broker.handing_over:  # else a role change ended the hand-over
                broker.change_role(HandOverEnds(epoch))

    def _holds_everything(self, target: int) -> bool:
        broker = self.broker
        progress = broker.replication.tracker.slaves.get(target) if broker.replication else None
        return (progress is not None and progress.ack_offset is not None
                and progress.ack_offset >= broker.store.max_offset)
