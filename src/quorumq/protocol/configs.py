"""The cluster protocol's form (cluster.proto) of subscription groups and of topic message types."""

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.message_types import TopicMessageType
from quorumq.core.subscription import RetryPolicy, SubscriptionGroup
from quorumq.errors import Error, QuorumqError


def message_type_to_pb(kind: TopicMessageType) -> int:
    return pb.TopicMessageType.Value(kind.value)


def message_type_from_pb(value: int) -> TopicMessageType | None:
    """The type a TopicConfig names; None for MESSAGE_TYPE_UNSET."""
    if value == pb.MESSAGE_TYPE_UNSET:
        return None
    try:
        return TopicMessageType(pb.TopicMessageType.Name(value))
    except ValueError:
        raise QuorumqError(Error.ILLEGAL_TOPIC_ATTRIBUTE, f"message type {value} is unknown") from None


def group_to_pb(group: SubscriptionGroup, configured: bool = True) -> pb.SubscriptionGroupConfig:
    policy = group.retry_policy
    return pb.SubscriptionGroupConfig(
        group_name=group.name, consume_enable=group.consume_enable,
        consume_message_orderly=group.consume_message_orderly, retry_max_times=group.retry_max_times,
        retry_policy=pb.RetryPolicy(type=policy.kind, next_ms=policy.next_ms, initial_ms=policy.initial_ms,
                                    max_ms=policy.max_ms, multiplier=policy.multiplier),
        configured=configured)


def group_from_pb(config: pb.SubscriptionGroupConfig) -> SubscriptionGroup:
    """The group a message carries, after every rule on it (its catalogue error otherwise)."""
    policy = config.retry_policy
    return SubscriptionGroup(config.group_name, config.consume_enable, config.consume_message_orderly,
                             config.retry_max_times,
                             RetryPolicy(policy.type, tuple(policy.next_ms), policy.initial_ms, policy.max_ms,
                                         policy.multiplier))
