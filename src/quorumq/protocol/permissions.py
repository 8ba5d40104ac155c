"""What each call of every port needs (ACL 2.0's authorization), as RocketMQ 5.3's proxy and broker
map their requests to resources and actions: a send Pub on its topic; a receive, an ack, a pull or
an offset commit Sub on its topic and its group; a route query Pub or Sub on its topic; an admin
call the action it makes on its topic, group or cluster.

Three kinds of call need more than a rule can give: what only cluster members do (a broker's
registration with the name server and the controllers, its heartbeats and role changes) needs the
inner credentials (MEMBER, checked whenever authentication is on); what changes the cluster itself
(live configs, elections, users and rules) or reads secrets (the metadata a slave copies holds
passwords) needs a Super user (SUPER). A method this table does not name needs a Super user too."""

from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.acl import Action, Need, Resource, ResourceType

MEMBER = "member"
SUPER = "super"
ANYONE = "anyone"  # any authenticated user

Needs = Callable[[Any, str], list[Need]]  # (the parsed request, this server's cluster) -> what it needs
Permission = str | Needs

PUB, SUB, CREATE, UPDATE, DELETE, GET = Action.PUB, Action.SUB, Action.CREATE, Action.UPDATE, Action.DELETE, Action.GET


def _topic(name: str, *actions: Action) -> Need:
    return Need(Resource(ResourceType.TOPIC, name), actions)


def _group(name: str, *actions: Action) -> Need:
    return Need(Resource(ResourceType.GROUP, name), actions)


def _consume(topic: str, group: str) -> list[Need]:
    return [_topic(topic, SUB), _group(group, SUB)]


def _cluster(cluster: str, *actions: Action) -> Need:
    return Need(Resource(ResourceType.CLUSTER, cluster), actions)


def _optional_group(group: str) -> list[Need]:
    return [_group(group, SUB)] if group else []


_V5: dict[str, Permission] = {
    "QueryRoute": lambda r, _: [_topic(r.topic.name, PUB, SUB)],
    "Heartbeat": lambda r, _: _optional_group(r.group.name),
    "SendMessage": lambda r, _: [_topic(name, PUB) for name in dict.fromkeys(m.topic.name for m in r.messages)],
    "QueryAssignment": lambda r, _: _consume(r.topic.name, r.group.name),
    "ReceiveMessage": lambda r, _: _consume(r.message_queue.topic.name, r.group.name),
    "AckMessage": lambda r, _: _consume(r.topic.name, r.group.name),
    "ForwardMessageToDeadLetterQueue": lambda r, _: _consume(r.topic.name, r.group.name),
    "ChangeInvisibleDuration": lambda r, _: _consume(r.topic.name, r.group.name),
    "PullMessage": lambda r, _: _consume(r.message_queue.topic.name, r.group.name),
    "UpdateOffset": lambda r, _: _consume(r.message_queue.topic.name, r.group.name),
    "GetOffset": lambda r, _: _consume(r.message_queue.topic.name, r.group.name),
    "QueryOffset": lambda r, _: [_topic(r.message_queue.topic.name, SUB)],
    "EndTransaction": lambda r, _: [_topic(r.topic.name, PUB)],
    "NotifyClientTermination": lambda r, _: _optional_group(r.group.name),
    "RecallMessage": lambda r, _: [_topic(r.topic.name, PUB)],
    # A stream's settings: the client's own, checked by each call it then makes.
    "Telemetry": ANYONE,
}

_CLUSTER: dict[str, dict[str, Permission]] = {
    "MessageWriter": {"SendBatch": lambda r, _: [_topic(r.topic, PUB)]},
    "MessageReader": {"PullBatch": lambda r, _: _consume(r.topic, r.group)},
    "BrokerAdmin": {
        "UpdateTopic": lambda r, _: [_topic(r.name, CREATE, UPDATE)],
        "DeleteTopic": lambda r, _: [_topic(r.topic, DELETE)],
        "GetBrokerConfig": lambda r, cluster: [_cluster(cluster, GET)],
        "UpdateBrokerConfig": SUPER,
        "GetBrokerStatus": lambda r, cluster: [_cluster(cluster, GET)],
        "GetConsumerProgress": lambda r, _: [_group(r.group, GET)] + ([_topic(r.topic, GET)] if r.topic else []),
        "GetConsumerConnections": lambda r, _: [_group(r.group, GET)],
        "ResetOffsetByTime": lambda r, _: [_group(r.group, UPDATE), _topic(r.topic, SUB)],
        "GetMetadata": SUPER,  # holds the users' passwords
        "GetBrokerEpochs": lambda r, cluster: [_cluster(cluster, GET)],
        "AddConsumerGroups": SUPER,  # the replicator's
        "UpdateSubscriptionGroup": lambda r, _: [_group(r.group_name, CREATE, UPDATE)],
        "DeleteSubscriptionGroup": lambda r, _: [_group(r.group, DELETE)],
        "GetSubscriptionGroup": lambda r, _: [_group(r.group, GET)],
        # CreateUser ... GetAccess: SUPER, as every method not named.
    },
    "NameServer": {
        "RegisterBroker": MEMBER,
        "UnregisterBroker": MEMBER,
        "GetRoute": lambda r, _: [_topic(r.topic, PUB, SUB, GET)],
        # What every client reads to find the brokers (a name server serves every cluster).
        "GetClusterInfo": ANYONE,
        "GetBrokerMemberGroup": ANYONE,
        "GetTopicList": ANYONE,
        "DeleteTopic": lambda r, _: [_topic(r.topic, DELETE)],
    },
    "Controller": {
        **{name: MEMBER for name in ("GetNextBrokerId", "ApplyBrokerId", "RegisterBroker", "AlterSyncStateSet",
                                     "Heartbeats")},
        **{name: ANYONE for name in ("GetReplicaInfo", "GetMetaData", "GetControllerConfig")},
        # ElectMaster, CleanBrokerData, UpdateControllerConfig: SUPER, as every method not named.
    },
}

PERMISSIONS: dict[str, Permission] = {
    **{f"/{v5s.DESCRIPTOR.services_by_name['MessagingService'].full_name}/{name}": permission
       for name, permission in _V5.items()},
    **{f"/{pb.DESCRIPTOR.services_by_name[service].full_name}/{name}": permission
       for service, methods in _CLUSTER.items() for name, permission in methods.items()},
}


def permission(method: str) -> Permission:
    return PERMISSIONS.get(method, SUPER)
