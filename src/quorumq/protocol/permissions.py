"""What each call of every port needs (ACL 2.0's authorization), as RocketMQ 5.3's proxy and broker
map their requests to resources and actions: a send Pub on its topic; a receive, an ack, a pull or
an offset commit Sub on its topic and its group; a route query Pub or Sub on its topic; an admin
call the action it makes on its topic, group or cluster.

Three kinds of call need more than a rule can give: what only cluster members do (a broker's
registration with the name server and the controllers, its heartbeats and role changes) needs the
inner credentials (MEMBER), and what reads or changes users and rules (the metadata a slave copies
holds passwords) a Super user (USERS), both checked whenever authentication is on; what changes
the cluster itself (live configs, elections) needs a Super user with authorization on (SUPER). A
method this table does not name needs a Super user too."""

from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.acl import Action, Need, Resource, ResourceType
from quorumq.protocol.v5 import resource_name

MEMBER = "member"
# What reads or changes users and rules (their passwords, a new Super user): a Super user's even
# with authorization off, or a Normal user would make itself Super.
USERS = "users"
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


# v5 resources by the name the handlers store them under (a namespace prefixed: protocol/v5.py).

def _v5_topic(topic, *actions: Action) -> Need:
    return _topic(resource_name(topic), *actions)


def _v5_consume(topic, group) -> list[Need]:
    return _consume(resource_name(topic), resource_name(group))


def _v5_group(group) -> list[Need]:
    return [_group(resource_name(group), SUB)] if group.name else []


def settings_needs(settings) -> list[Need]:
    """A Telemetry stream's settings, checked as each comes: a producer's Pub on the topics it
    publishes (the broker sends it their transaction checks, which hold the messages), a consumer's
    Sub on its group and the topics it subscribes."""
    needs = [_v5_topic(topic, PUB) for topic in settings.publishing.topics]
    subscription = settings.subscription
    if subscription.group.name:
        needs += _v5_group(subscription.group)
    needs += [_v5_topic(entry.topic, SUB) for entry in subscription.subscriptions]
    return needs


_V5: dict[str, Permission] = {
    "QueryRoute": lambda r, _: [_v5_topic(r.topic, PUB, SUB)],
    "Heartbeat": lambda r, _: _v5_group(r.group),
    "SendMessage": lambda r, _: list({resource_name(m.topic): _v5_topic(m.topic, PUB) for m in r.messages}.values()),
    "QueryAssignment": lambda r, _: _v5_consume(r.topic, r.group),
    "ReceiveMessage": lambda r, _: _v5_consume(r.message_queue.topic, r.group),
    "AckMessage": lambda r, _: _v5_consume(r.topic, r.group),
    "ForwardMessageToDeadLetterQueue": lambda r, _: _v5_consume(r.topic, r.group),
    "ChangeInvisibleDuration": lambda r, _: _v5_consume(r.topic, r.group),
    "PullMessage": lambda r, _: _v5_consume(r.message_queue.topic, r.group),
    "UpdateOffset": lambda r, _: _v5_consume(r.message_queue.topic, r.group),
    "GetOffset": lambda r, _: _v5_consume(r.message_queue.topic, r.group),
    "QueryOffset": lambda r, _: [_v5_topic(r.message_queue.topic, SUB)],
    "SyncLiteSubscription": lambda r, _: _v5_consume(r.topic, r.group),
    "EndTransaction": lambda r, _: [_v5_topic(r.topic, PUB)],
    "NotifyClientTermination": lambda r, _: _v5_group(r.group),
    "RecallMessage": lambda r, _: [_v5_topic(r.topic, PUB)],
    # Authenticated as it opens; each settings command it carries is checked (settings_needs).
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
        "GetMetadata": USERS,  # holds the users' passwords
        "GetBrokerEpochs": lambda r, cluster: [_cluster(cluster, GET)],
        "AddConsumerGroups": SUPER,  # the replicator's
        "UpdateSubscriptionGroup": lambda r, _: [_group(r.group_name, CREATE, UPDATE)],
        "DeleteSubscriptionGroup": lambda r, _: [_group(r.group, DELETE)],
        "GetSubscriptionGroup": lambda r, _: [_group(r.group, GET)],
        **{name: USERS for name in ("CreateUser", "UpdateUser", "DeleteUser", "CreateAcl", "UpdateAcl",
                                    "DeleteAcl", "GetAccess")},
    },
    "NameServer": {
        "RegisterBroker": MEMBER,
        "UnregisterBroker": MEMBER,
        "GetRoute": lambda r, _: [_topic(r.topic, PUB, SUB, GET)],
        # What every client reads to find the brokers (a name server serves every cluster).
        "GetClusterInfo": ANYONE,
        "GetBrokerMemberGroup": ANYONE,
        "GetTopicList": ANYONE,
        # A topic's route, for every cluster the name server serves: the config's users alone.
        "DeleteTopic": SUPER,
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
