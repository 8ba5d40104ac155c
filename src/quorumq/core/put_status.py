"""The outcome of appending a message, RocketMQ's PutMessageStatus, and the name RocketMQ's producers
print for it (SendStatus). The v5 code each status is answered with is in protocol/wire_errors.py."""

from enum import Enum


class PutStatus(Enum):
    #                             name shown to producers
    PUT_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"

    @property
    def send_status(self) -> str:
        return self.value

    @property
    def stored(self) -> bool:
        """Whether the master holds the message: every status but the pre-check's refusal."""
        return self is not PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
