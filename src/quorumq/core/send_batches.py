"""How a proxy merges the sends of concurrent client calls into one call to a broker.

Calls to one broker group, for one topic and signed by one user, wait in a line while that line's
calls to the broker are in flight; as one returns, the next call carries the oldest waiting sends
that fit the broker's bounds on one request (limits.BATCH_MESSAGES_MAX messages and
BATCH_BYTES_MAX bytes of bodies). Under light load a send leaves at once; under concurrent load
each broker call carries whatever arrived while the previous one was out, and under heavy load it
also waits up to batchMaxDelayMs for more (`linger_s`), since a broker's cost of a call outweighs
its cost of a message.
"""

from collections.abc import Sequence


def take(waiting: Sequence[tuple[int, int]], count_max: int, bytes_max: int) -> int:
    """How many of the `waiting` sends, (messages, body bytes) each, oldest first, the next broker
    call carries: as many as fit both bounds, and at least one (a send above them alone, for the
    broker to refuse as it would refuse it direct)."""
    assert waiting and count_max > 0 and bytes_max > 0
    count = size = 0
    for taken, (messages, body_bytes) in enumerate(waiting):
        count += messages
        size += body_bytes
        if taken and (count > count_max or size > bytes_max):
            return taken
    return len(waiting)


def split(counts: Sequence[int]) -> list[slice]:
    """Each merged send's entries of the broker's answer, which has one entry per message in order."""
    slices, start = [], 0
    for count in counts:
        slices.append(slice(start, start + count))
        start += count
    return slices


def linger_s(previous_calls: int, waiting_messages: int, count_max: int, delay_s: float,
             merged_calls_min: int) -> float:
    """How long the next broker call of a line waits for more sends: `delay_s` while the line is
    under heavy concurrent load (its previous broker call carried `previous_calls` >=
    `merged_calls_min` client calls) and the `waiting_messages` do not fill a call yet; else not
    at all."""
    return delay_s if previous_calls >= merged_calls_min and waiting_messages < count_max else 0.0
