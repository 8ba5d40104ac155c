"""Dead letters: where a message goes once its group's last allowed delivery failed, and what its
copy there carries, under RocketMQ's names (AbstractSendMessageProcessor's send-back to the DLQ).

The copy keeps the message's body and properties, its message id (UNIQ_KEY) among them, and adds
where it came from: RETRY_TOPIC and ORIGIN_MESSAGE_ID as RocketMQ writes them, DLQ_ORIGIN_TOPIC and
DLQ_ORIGIN_MESSAGE_ID (which RocketMQ's proxy turns into the v5 `dead_letter_queue` field of a
delivered message) and RECONSUME_TIME, the deliveries it had. A copy dead-lettered again keeps the
first origin.
"""

from collections.abc import Mapping

from quorumq import limits
from quorumq.core import properties

DLQ_PREFIX = "%DLQ%"
DLQ_QUEUES = 1  # RocketMQ's DLQ_NUMS_PER_GROUP
assert len(DLQ_PREFIX) + limits.GROUP_NAME_LENGTH_MAX == limits.NAME_LENGTH_MAX  # every group's DLQ topic is a name


def dead_letter_topic(group: str) -> str:
    return DLQ_PREFIX + group


def is_dead_letter_topic(topic: str) -> bool:
    return topic.startswith(DLQ_PREFIX)


def dead_letter_properties(props: Mapping[str, str], topic: str, attempts: int) -> dict[str, str]:
    """The properties of the DLQ copy of a message of `topic` (its `props`) delivered `attempts` times."""
    copied = dict(props)
    message_id = props.get(properties.MESSAGE_ID, "")
    for name, value in ((properties.RETRY_TOPIC, topic), (properties.ORIGIN_MESSAGE_ID, message_id),
                        (properties.DLQ_ORIGIN_TOPIC, topic), (properties.DLQ_ORIGIN_MESSAGE_ID, message_id)):
        copied.setdefault(name, value)
    copied[properties.RECONSUME_TIME] = str(attempts)
    return copied
