"""The admin client: quorumq's cluster protocol on the name server and on each broker.

The name server answers NameServer; every broker answers BrokerAdmin on its v5 address. Operations
that span a cluster (delete a topic, change a config everywhere) ask the name server which brokers
exist and then call each of them, waiting for every answer: when any broker fails, FanOutError says
which applied the change and which did not.
"""

import asyncio
from typing import Any

from quorumq import limits
from quorumq.client.errors import ClientError, FanOutError
from quorumq.client.routes import REQUEST_TIMEOUT_S, Channels, call
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.auth import Credentials

SLAVE = "SLAVE"


class AdminClient:
    """Use `async with AdminClient("127.0.0.1:20000") as admin`; with `credentials` every call is
    signed (client/signing.py), as a cluster with authenticationEnabled requires."""

    def __init__(self, namesrv_address: str, *, timeout_s: float = REQUEST_TIMEOUT_S,
                 credentials: Credentials | None = None) -> None:
        self._channels = Channels(credentials)
        self._namesrv_address = namesrv_address
        self._timeout_s = timeout_s

    async def __aenter__(self) -> "AdminClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channels.close()

    # Name server.

    async def route(self, topic: str) -> pb.TopicRoute:
        return await self._call(self._namesrv().GetRoute, pb.TopicRequest(topic=topic))

    async def cluster_info(self) -> pb.ClusterInfo:
        return await self._call(self._namesrv().GetClusterInfo, pb.Empty())

    async def topic_list(self) -> list[str]:
        return sorted((await self._call(self._namesrv().GetTopicList, pb.Empty())).topics)

    async def topic_types(self) -> dict[str, str]:
        """Every topic -> its message type (NORMAL, FIFO, DELAY, TRANSACTION or MIXED)."""
        listed = await self._call(self._namesrv().GetTopicList, pb.Empty())
        return {topic: message_type_name(kind) for topic, kind in zip(listed.topics, listed.message_types)}

    async def member_group(self, cluster: str, broker_name: str) -> pb.MemberGroup:
        request = pb.MemberGroupRequest(cluster=cluster, broker_name=broker_name)
        return await self._call(self._namesrv().GetBrokerMemberGroup, request)

    async def brokers(self, cluster: str | None = None, masters_only: bool = False) -> list[pb.BrokerInfo]:
        """The registered brokers (of one cluster if named), by cluster, name and id."""
        brokers = [broker for broker in (await self.cluster_info()).brokers
                   if cluster in (None, broker.cluster) and not (masters_only and broker.role == SLAVE)]
        if cluster is not None and not brokers:
            raise ClientError("BROKER_NOT_FOUND", f"no broker of cluster {cluster} is registered")
        return sorted(brokers, key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    # One broker.

    async def update_topic(self, address: str, topic: str, read_queue_nums: int = 8,
                           write_queue_nums: int = 8, perm: int = 6, message_type: str | None = None) -> None:
        await self._call(self._broker(address).UpdateTopic,
                         topic_config(topic, read_queue_nums, write_queue_nums, perm, message_type))

    async def update_topic_on(self, addresses: list[str], topic: str, read_queue_nums: int = 8,
                              write_queue_nums: int = 8, perm: int = 6, message_type: str | None = None) -> None:
        """Create or change a topic on each of the brokers; `message_type` (FIFO, ...) None keeps
        the topic's (NORMAL for a new one)."""
        await self._on_each(addresses, "UpdateTopic",
                            topic_config(topic, read_queue_nums, write_queue_nums, perm, message_type))

    async def broker_config(self, address: str) -> dict[str, str]:
        return dict((await self._call(self._broker(address).GetBrokerConfig, pb.Empty())).entries)

    async def broker_status(self, address: str) -> dict[str, str]:
        return dict((await self._call(self._broker(address).GetBrokerStatus, pb.Empty())).entries)

    async def broker_epochs(self, address: str) -> pb.BrokerEpochs:
        """A controller-mode broker's master epochs (its epoch file)."""
        return await self._call(self._broker(address).GetBrokerEpochs, pb.Empty())

    # Across brokers.

    async def update_broker_config(self, key: str, value: str, address: str | None = None,
                                   cluster: str | None = None) -> list[str]:
        """Change a key on one broker, or on every broker (of the cluster); the addresses changed."""
        addresses = [address] if address else [b.address for b in await self.brokers(cluster)]
        await self._on_each(addresses, "UpdateBrokerConfig", pb.ConfigUpdate(key=key, value=value))
        return addresses

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        """Delete a topic on every broker, slaves included (of the cluster), then its route (also when
        a broker failed: one that still holds the topic registers it again); the brokers' addresses."""
        addresses = [b.address for b in await self.brokers(cluster)]
        request = pb.TopicRequest(topic=topic)
        try:
            await self._on_each(addresses, "DeleteTopic", request)
        finally:
            await self._call(self._namesrv().DeleteTopic, request)
        return addresses

    async def consumer_progress(self, group: str, topic: str = "",
                                cluster: str | None = None) -> list[pb.ConsumerProgress]:
        """Per broker: each queue's min, max and the group's offsets (of one topic, or of all)."""
        request = pb.GroupRequest(group=group, topic=topic)
        return await self._on_masters(cluster, "GetConsumerProgress", request)

    async def consumer_connections(self, group: str, cluster: str | None = None) -> list[pb.ConsumerConnections]:
        """Per master: how many of the group's consumers are connected to it now."""
        return await self._on_masters(cluster, "GetConsumerConnections", pb.GroupRequest(group=group))

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int,
                                   cluster: str | None = None) -> list[pb.ConsumerProgress]:
        """Move the group's offsets to the first message stored at or after the timestamp."""
        request = pb.ResetOffsetRequest(group=group, topic=topic, timestamp_ms=timestamp_ms)
        return await self._on_masters(cluster, "ResetOffsetByTime", request)

    async def update_subscription_group(self, addresses: list[str], config: pb.SubscriptionGroupConfig) -> None:
        """Replace a consumer group's subscription config on each of the brokers."""
        await self._on_each(addresses, "UpdateSubscriptionGroup", config)

    async def delete_subscription_group(self, addresses: list[str], group: str) -> None:
        """Drop a consumer group's subscription config on each of the brokers (it has the defaults again)."""
        await self._on_each(addresses, "DeleteSubscriptionGroup", pb.GroupRequest(group=group))

    async def subscription_groups(self, group: str, cluster: str | None = None) \
            -> list[tuple[pb.BrokerInfo, pb.SubscriptionGroupConfig]]:
        """Per master (of the cluster, or of every cluster): the group's subscription config."""
        masters = await self.brokers(cluster, masters_only=True)
        answers = await self._on_each([b.address for b in masters], "GetSubscriptionGroup",
                                      pb.GroupRequest(group=group))
        return [(master, answers[master.address]) for master in masters]

    async def change_access(self, addresses: list[str], method: str, request: Any) -> None:
        """An ACL 2.0 change on each of the brokers (a Super user's): `method` is CreateUser,
        UpdateUser, DeleteUser, CreateAcl, UpdateAcl or DeleteAcl."""
        await self._on_each(addresses, method, request)

    async def access(self, address: str) -> pb.AccessControl:
        """One broker's users (with their passwords) and rules, those its config names aside."""
        return await self._call(self._broker(address).GetAccess, pb.Empty())

    async def metadata(self, address: str) -> pb.BrokerMetadata:
        """One broker's topic configs, consumer groups and their positions."""
        return await self._call(self._broker(address).GetMetadata, pb.MetadataRequest())

    async def add_consumer_groups(self, address: str, groups: dict[str, int]) -> None:
        """Make one broker know consumer groups (group -> first contact, ms); known ones keep theirs.
        A broker takes GROUPS_PER_REQUEST_MAX groups a request: more go in several."""
        names = list(groups)
        for start in range(0, len(names), limits.GROUPS_PER_REQUEST_MAX):
            chunk = {name: groups[name] for name in names[start:start + limits.GROUPS_PER_REQUEST_MAX]}
            await self._call(self._broker(address).AddConsumerGroups, pb.ConsumerGroups(groups=chunk))

    async def queue_progress(self, address: str, group: str, topic: str) -> pb.ConsumerProgress:
        """One broker's queues of a topic: min, max and the group's offsets."""
        return await self._call(self._broker(address).GetConsumerProgress, pb.GroupRequest(group=group, topic=topic))

    async def _on_masters(self, cluster: str | None, method: str, request: Any) -> list[Any]:
        addresses = [b.address for b in await self.brokers(cluster, masters_only=True)]
        return list((await self._on_each(addresses, method, request)).values())

    async def _on_each(self, addresses: list[str], method: str, request: Any) -> dict[str, Any]:
        """Call each broker and wait for every answer (one broker's failure must not leave the
        others' calls unfinished); the answers by address, or FanOutError when any failed."""
        answers = await asyncio.gather(*(self._call(getattr(self._broker(a), method), request) for a in addresses),
                                       return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, ClientError):
                raise answer
        if any(isinstance(answer, ClientError) for answer in answers):
            raise FanOutError({address: answer if isinstance(answer, ClientError) else None
                               for address, answer in zip(addresses, answers)})
        return dict(zip(addresses, answers))

    # Stubs are made on use: a channel belongs to the event loop that is running when it is made.
    def _namesrv(self) -> pb_grpc.NameServerStub:
        return pb_grpc.NameServerStub(self._channels.channel(self._namesrv_address))

    def _broker(self, address: str) -> pb_grpc.BrokerAdminStub:
        return pb_grpc.BrokerAdminStub(self._channels.channel(address))

    async def _call(self, method: Any, request: Any) -> Any:
        return await call(method, request, self._timeout_s, self._channels.metadata)


def message_type_name(kind: int) -> str:
    """A topic's message type as mqadmin names it; unset is a broker's before message types: NORMAL."""
    return "NORMAL" if kind == pb.MESSAGE_TYPE_UNSET else pb.TopicMessageType.Name(kind)


def topic_config(topic: str, read_queue_nums: int, write_queue_nums: int, perm: int,
                 message_type: str | None) -> pb.TopicConfig:
    return pb.TopicConfig(name=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm,
                          message_type=pb.MESSAGE_TYPE_UNSET if message_type is None
                          else pb.TopicMessageType.Value(message_type))
