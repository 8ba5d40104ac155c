"""The broker's side of quorumq's cluster protocol: topics, config, status, subscription groups and
consumer progress."""

import functools
import inspect
import logging
from typing import Awaitable, Callable

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.broker.metadata import topic_config_from_pb
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.dead_letters import dead_letter_topic
from quorumq.core.message_rules import check_group_name, check_name
from quorumq.core.message_types import TopicMessageType
from quorumq.core.quorum import BrokerRole
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort
from quorumq.protocol.configs import group_from_pb, group_to_pb

log = logging.getLogger("quorumq.admin")


def aborts_on_error(handler):
    """A catalogue error ends the RPC the cluster protocol's way (grpc_errors.py)."""

    @functools.wraps(handler)
    async def guarded(self, request, context):
        try:
            result = handler(self, request)
            return await result if inspect.isawaitable(result) else result
        except QuorumqError as exc:
            await abort(context, exc)

    return guarded


class BrokerAdminService(pb_grpc.BrokerAdminServicer):
    """A topic change is answered once the broker holds it (change_topic, delete_topic) and its
    registration with the name servers (`publish_topics`) was answered or failed: with every name
    server up, `updateTopic` then `topicRoute` agree. A name server that did not answer routes the
    change after the broker's next registration, tried again every REGISTER_RETRY_INTERVAL_S
    (broker/loops.py), and the change is answered all the same: it is made, as RocketMQ's broker
    answers updateTopic whatever its registration got."""

    def __init__(self, broker: Broker, publish_topics: Callable[[], Awaitable[bool]]) -> None:
        self.broker = broker
        self.publish_topics = publish_topics

    @aborts_on_error
    async def UpdateTopic(self, request):
        check_name(request.name, Error.ILLEGAL_TOPIC, "topic")
        old = self.broker.topics.configs.get(request.name)
        unset = old.message_type if old is not None else TopicMessageType.NORMAL  # no type given: keep the topic's
        await self.broker.change_topic(topic_config_from_pb(request, unset))
        await self.publish_topics()
        return pb.Empty()

    @aborts_on_error
    async def DeleteTopic(self, request):
        if self.broker.role is not BrokerRole.SLAVE:  # a slave may not have copied the topic yet
            self.broker.topic_config(request.topic, create=False)
        await self.broker.delete_topic(request.topic)
        await self.publish_topics()
        log.info("topic %s deleted", request.topic)
        return pb.Empty()

    @aborts_on_error
    def GetBrokerConfig(self, request):
        return pb.ConfigMap(entries=self.broker.config.as_strings())

    @aborts_on_error
    def UpdateBrokerConfig(self, request):
        self.broker.config.update_live(request.key, request.value)
        log.info("config %s set to %s", request.key, request.value)
        return pb.Empty()

    @aborts_on_error
    def GetBrokerStatus(self, request):
        return pb.ConfigMap(entries=self.broker.status())

    @aborts_on_error
    async def GetMetadata(self, request):
        return await self.broker.metadata_for(request)

    @aborts_on_error
    def GetBrokerEpochs(self, request):
        broker = self.broker
        if broker.epochs is None:
            raise QuorumqError(Error.BAD_REQUEST, f"{broker.address} does not run in controller mode: it has no epochs")
        return pb.BrokerEpochs(
            broker_name=broker.config["brokerName"], broker_id=broker.controller_id, max_offset=broker.store.max_offset,
            ha_address=broker.ha_address,
            entries=[pb.EpochEntry(epoch=entry.epoch, start_offset=entry.start_offset,
                                   end_offset=-1 if entry.end_offset is None else entry.end_offset)
                     for entry in broker.epochs.entries])

    @aborts_on_error
    def AddConsumerGroups(self, request):
        if len(request.groups) > limits.GROUPS_PER_REQUEST_MAX:
            raise QuorumqError(Error.BAD_REQUEST, f"{len(request.groups)} groups in one request, at most "
                                                  f"{limits.GROUPS_PER_REQUEST_MAX}: send them in several")
        for group, first_contact_ms in request.groups.items():
            check_group_name(group)
            if first_contact_ms < 0:
                raise QuorumqError(Error.BAD_REQUEST, f"group {group}: first contact {first_contact_ms} is negative")
        self.broker.consumers.add_groups(dict(request.groups))
        return pb.Empty()

    @aborts_on_error
    async def UpdateSubscriptionGroup(self, request):
        group = group_from_pb(request)
        await self.broker.topics.change_subscription(group)
        log.info("subscription group %s set: %s", group.name, group)
        return pb.Empty()

    @aborts_on_error
    async def DeleteSubscriptionGroup(self, request):
        check_group_name(request.group)
        await self.broker.topics.delete_subscription(request.group)
        log.info("subscription group %s deleted", request.group)
        return pb.Empty()

    @aborts_on_error
    def GetSubscriptionGroup(self, request):
        check_group_name(request.group)
        consumers = self.broker.consumers
        return group_to_pb(consumers.group(request.group), consumers.configured(request.group))

    @aborts_on_error
    def GetConsumerProgress(self, request):
        check_group_name(request.group)
        return self._progress(request.group, request.topic)

    @aborts_on_error
    def GetConsumerConnections(self, request):
        check_group_name(request.group)
        return pb.ConsumerConnections(broker_name=self.broker.config["brokerName"],
                                      live_consumers=self.broker.consumers.live_consumers(request.group))

    @aborts_on_error
    def ResetOffsetByTime(self, request):
        check_group_name(request.group)
        self.broker.consumers.touch(request.group)  # a new group, within GROUPS_MAX
        store = self.broker.store
        for queue_id in self.broker.readable_queue_ids(request.topic):
            offset = store.offset_for_timestamp(request.topic, queue_id, request.timestamp_ms)
            self.broker.consumers.commit(request.group, request.topic, queue_id, offset)
        self.broker.consumers.persist()
        return self._progress(request.group, request.topic)

    def _progress(self, group: str, topic: str) -> pb.ConsumerProgress:
        consumers = self.broker.consumers
        topics = [topic] if topic else consumers.offsets.topics(group)
        progress = pb.ConsumerProgress(broker_name=self.broker.config["brokerName"])
        for name in topics:
            for queue_id in self.broker.readable_queue_ids(name):
                committed = consumers.committed(group, name, queue_id)
                progress.queues.add(
                    topic=name, queue_id=queue_id, min_offset=self.broker.store.queue_min_offset(name, queue_id),
                    max_offset=self.broker.store.queue_max_offset(name, queue_id),
                    consumer_offset=-1 if committed is None else committed,
                    inflight=consumers.inflight(group, name, queue_id))
        store, dead_letters = self.broker.store, dead_letter_topic(group)
        progress.dead_letters = sum(store.queue_max_offset(dead_letters, queue_id)
                                    - store.queue_min_offset(dead_letters, queue_id)
                                    for queue_id in store.topic_queue_ids(dead_letters))
        return progress

    # ACL 2.0 (the Super users' alone: protocol/permissions.py).

    async def _access_changed(self, change: Awaitable[None]) -> pb.Empty:
        try:
            await change
        finally:  # made, even when a slave did not confirm it: the name servers check v5 clients with it
            await self.publish_topics()
        return pb.Empty()

    @aborts_on_error
    async def CreateUser(self, request):
        return await self._access_changed(self.broker.access.create_user(request))

    @aborts_on_error
    async def UpdateUser(self, request):
        return await self._access_changed(self.broker.access.update_user(request))

    @aborts_on_error
    async def DeleteUser(self, request):
        return await self._access_changed(self.broker.access.delete_user(request.username))

    @aborts_on_error
    async def CreateAcl(self, request):
        return await self._access_changed(self.broker.access.put_rules(request))

    UpdateAcl = CreateAcl  # mqadmin has both; each entry replaces the subject's for its resource

    @aborts_on_error
    async def DeleteAcl(self, request):
        return await self._access_changed(self.broker.access.delete_rules(request))

    @aborts_on_error
    def GetAccess(self, request):
        return self.broker.access.to_pb()
