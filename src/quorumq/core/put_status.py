"""The outcome of appending a message, RocketMQ's PutMessageStatus, and how producers see it.

One table maps each status to the name RocketMQ's producers print (SendStatus) and to the v5 code
the official client understands; quorumq's client reads the name back from the status message.
"""

from enum import Enum

from rocketmq.grpc_protocol import definition_pb2 as v5


class PutStatus(Enum):
    #                             (name shown to producers, v5 code)
    PUT_OK = ("SEND_OK", v5.Code.OK)
    FLUSH_DISK_TIMEOUT = ("FLUSH_DISK_TIMEOUT", v5.Code.MASTER_PERSISTENCE_TIMEOUT)
    FLUSH_SLAVE_TIMEOUT = ("FLUSH_SLAVE_TIMEOUT", v5.Code.SLAVE_PERSISTENCE_TIMEOUT)
    SLAVE_NOT_AVAILABLE = ("SLAVE_NOT_AVAILABLE", v5.Code.HA_NOT_AVAILABLE)
    IN_SYNC_REPLICAS_NOT_ENOUGH = ("IN_SYNC_REPLICAS_NOT_ENOUGH", v5.Code.HA_NOT_AVAILABLE)

    @property
    def send_status(self) -> str:
        return self.value[0]

    @property
    def code(self) -> int:
        return self.value[1]

    @property
    def stored(self) -> bool:
        """Whether the master holds the message: every status but the pre-check's refusal."""
        return self is not PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
