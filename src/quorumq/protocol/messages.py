"""A v5 send's messages on the way in and the status of each on the way out, for both servers that
take them: a broker's v5 endpoint (endpoint/messaging.py) and a proxy that writes them to the
broker as records (proxy/records.py). What a client sends is validated here against `limits`; a
message that breaks a rule gets the catalogue error naming the rule. The rules on a message's own
fields live in core/message_rules.py, which quorumq's producer applies too.
"""

import functools

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.core import properties
from quorumq.core.codec import MessageIn
from quorumq.core.message_rules import check_body, stored_properties
from quorumq.core.put_status import PutStatus
from quorumq.core.timers import delivery_ms
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.v5 import topic_name
from quorumq.protocol.wire_errors import PUT_STATUS_CODES

__all__ = ["incoming", "stored_status"]

# Enum values read once: look-ups through the generated wrappers are slow on the hot path.
_NORMAL = v5.MessageType.NORMAL
_GZIP = v5.Encoding.GZIP
_TRANSACTION = v5.MessageType.TRANSACTION
_UNSUPPORTED_TYPES = {v5.MessageType.LITE: "LITE", v5.MessageType.PRIORITY: "PRIORITY"}


def incoming(message: v5.Message, max_body_bytes: int, explicit_queue: bool) -> MessageIn:
    """An incoming message as the store takes it, after every check on it (each field read once:
    this runs for every message sent). Its type is its properties' (a message group makes it
    FIFO, a delivery timestamp DELAY), as RocketMQ decides it: the type the client names is read
    only for a transaction, which has no property of its own on the wire, and to refuse the types
    not built."""
    system = message.system_properties
    kind = system.message_type
    if kind != _NORMAL and kind in _UNSUPPORTED_TYPES:
        raise QuorumqError(Error.MESSAGE_TYPE_UNSUPPORTED,
                           f"{_UNSUPPORTED_TYPES[kind]} messages are not supported; send NORMAL, FIFO, DELAY or "
                           "TRANSACTION messages")
    body = message.body
    check_body(body, max_body_bytes)
    stored = stored_properties(system.message_id, message.user_properties,
                               system.tag if system.HasField("tag") else None, system.keys,
                               system.body_encoding == _GZIP,
                               system.message_group if system.HasField("message_group") else None)
    if kind == _TRANSACTION:
        stored[properties.TRANSACTION] = "true"
    if system.HasField("delivery_timestamp"):
        if kind == _TRANSACTION:
            raise QuorumqError(Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                               "a transactional message takes no delivery timestamp")
        stamp = system.delivery_timestamp
        stored[properties.TIMER_DELIVER_MS] = str(delivery_ms(stamp.seconds, stamp.nanos))
    born = system.born_timestamp
    return MessageIn(topic=topic_name(message.topic), queue_id=system.queue_id if explicit_queue else -1,
                     body=body, properties=stored, born_timestamp_ms=born.seconds * 1000 + born.nanos // 1_000_000,
                     born_host=system.born_host[:limits.HOST_LENGTH_MAX])


def _put_status_message(put_status: PutStatus) -> str:
    if put_status is PutStatus.PUT_OK:
        return put_status.send_status
    if put_status.stored:
        return f"{put_status.send_status}: the message is stored on the master but not acknowledged as asked"
    return f"{put_status.send_status}: fewer replicas are in sync than the write needs; nothing was stored"


@functools.lru_cache(maxsize=len(PutStatus) * 8)
def stored_status(put_status: PutStatus, master_epoch: int) -> v5.Status:
    """In controller mode the message names the master epoch that answered (the v5 result has no
    field for it); a deposed master answers nothing, so that is the epoch that acknowledged."""
    message = _put_status_message(put_status)
    return v5.Status(code=PUT_STATUS_CODES[put_status],
                     message=f"{message} (master epoch {master_epoch})" if master_epoch else message)
