"""Delay (timer) messages, the pure part: a delivery time as the clients send it, the system topic's
records, the recall handle, and the set of timer records already delivered or recalled (no I/O).

A delay message is stored as a timer record in the system topic TIMER_TOPIC (one queue), its real
topic and queue in its properties; when it is due the master copies it to its real topic and, in
the same write, appends a done record naming the timer records it delivered (or the one a recall
cancelled). The topic is the whole state: any replica rebuilds its timers from it (broker/timers.py).
"""

import base64
import binascii

from quorumq.core import properties
from quorumq.errors import Error, QuorumqError

TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ's name for its timer messages' topic
DONE = "QUORUMQ_TIMER_DONE"  # a done record's property: why its timer records are done
DELIVERED, RECALLED = "delivered", "recalled"
# Above this a Timestamp's `seconds` can only be milliseconds: the official Python client stores the
# user's millisecond value there (grpc-client.md section 5); 1e11 s is the year 5138.
_SECONDS_MAX = 100_000_000_000
_HANDLE_VERSION = "v1"


def delivery_ms(seconds: int, nanos: int) -> int:
    """A v5 delivery timestamp in milliseconds, the official Python client's unit slip undone."""
    if seconds > _SECONDS_MAX:
        return seconds
    return seconds * 1000 + nanos // 1_000_000


def check_delivery(deliver_ms: int, now_ms: int, max_delay_s: int) -> None:
    """Refuse a delivery time more than `max_delay_s` ahead (timerMaxDelaySec); one in the past is
    delivered at once."""
    if deliver_ms - now_ms > max_delay_s * 1000:
        raise QuorumqError(Error.ILLEGAL_DELIVERY_TIME, f"delivery time {deliver_ms} ms is more than "
                                                        f"timerMaxDelaySec={max_delay_s} s ahead")


def deliver_ms_of(props: dict[str, str]) -> int:
    """A timer record's delivery time (its TIMER_DELIVER_MS property)."""
    return int(props[properties.TIMER_DELIVER_MS])


def encode_done(offsets: list[int]) -> bytes:
    return " ".join(map(str, offsets)).encode()


def decode_done(body: bytes) -> list[int]:
    """The timer records a done record names; ValueError when it does not parse."""
    return [int(part) for part in body.split()]


def encode_recall_handle(topic: str, broker_name: str, offset: int, message_id: str) -> str:
    """What a delay message's sender recalls it by: the broker group and timer record that hold it."""
    text = " ".join((_HANDLE_VERSION, topic, broker_name, str(offset), message_id))
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode_recall_handle(handle: str) -> tuple[str, str, int, str]:
    """(topic, broker name, timer record offset, message id) of a recall handle; INVALID_RECALL_HANDLE
    when it does not parse."""
    try:
        version, topic, broker_name, offset, message_id = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
        if version != _HANDLE_VERSION or int(offset) < 0:
            raise ValueError(version)
        return topic, broker_name, int(offset), message_id
    except (ValueError, UnicodeError, binascii.Error):
        raise QuorumqError(Error.INVALID_RECALL_HANDLE, f"recall handle {handle[:64]!r} does not parse") from None


class DoneSet:
    """Which records of the timer topic, by queue offset, are done: a timer record delivered or
    recalled, and every done record itself. One bit a record from the oldest record not done on;
    what lies below `base` is done."""

    _DROP_BYTES = 4096  # leading bytes all done are dropped this many at a time

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self._bits = bytearray()
        self._full = 0  # the leading bytes of _bits that are all done

    def __contains__(self, offset: int) -> bool:
        index = offset - self.base
        if index < 0:
            return True
        byte = index >> 3
        return byte < len(self._bits) and bool(self._bits[byte] >> (index & 7) & 1)

    def mark(self, offset: int) -> bool:
        """Mark `offset` done; whether it was not done before."""
        index = offset - self.base
        if index < 0:
            return False
        byte, bit = index >> 3, 1 << (index & 7)
        bits = self._bits
        if byte >= len(bits):
            bits.extend(bytes(byte + 1 - len(bits)))
        if bits[byte] & bit:
            return False
        bits[byte] |= bit
        if byte == self._full and bits[byte] == 0xFF:
            while self._full < len(bits) and bits[self._full] == 0xFF:
                self._full += 1
            if self._full >= self._DROP_BYTES or self._full == len(bits):
                del bits[:self._full]
                self.base += self._full * 8
                self._full = 0
        return True
