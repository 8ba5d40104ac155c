"""Writing dead letters: a message whose group's last allowed delivery failed, one its consumer
forwards (ForwardMessageToDeadLetterQueue) and one no answer can carry to its client is copied to
the group's DLQ topic `%DLQ%<group>` (core/dead_letters.py: one queue, created on demand), through
the send path and waited for as a send is; only then is its lease dropped, so it is delivered
again if the copy fails. The copy is a new message record: slaves copy it, a consumer reads it
like any topic's messages.
"""

import logging

from quorumq.broker.consumers import DeadLetter, Delivery
from quorumq.core import properties
from quorumq.core.dead_letters import DLQ_QUEUES, dead_letter_properties, dead_letter_topic
from quorumq.core.put_status import PutStatus
from quorumq.errors import Error, QuorumqError
from quorumq.store import MessageIn

log = logging.getLogger("quorumq.broker")


class DeadLetters:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker

    async def write(self, group: str, topic: str, letters: list[DeadLetter],
                    answer_by: float | None) -> list[tuple[DeadLetter, QuorumqError]]:
        """Copy `letters` (messages of `topic` leased to `group`) to the group's DLQ topic, then drop
        their leases. Returns the letters whose copy failed, with why (logged): their leases
        stand, to expire and be dead-lettered again."""
        if not letters:
            return []
        broker = self._broker
        dlq = dead_letter_topic(group)
        copies = [MessageIn(topic=dlq, queue_id=DLQ_QUEUES - 1, body=letter.message.body,
                            properties=dead_letter_properties(letter.message.properties, topic, letter.attempts),
                            flag=letter.message.flag, born_timestamp_ms=letter.message.born_timestamp_ms,
                            born_host=letter.message.born_host, reconsume_times=letter.attempts)
                  for letter in letters]
        results = await broker.sends.put(copies, answer_by, dead_letters=True)
        failed = []
        for letter, result in zip(letters, results):
            stored = letter.message
            if result.error is not None or result.status is not PutStatus.PUT_OK:
                error = result.error or QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"the dead letter's copy in "
                                                     f"{dlq} is not held as a send needs: {result.status.value}")
                log.warning("group %s: dead letter %s/%d/%d not written (%s); its lease ends, then it is tried again",
                            group, topic, stored.queue_id, stored.queue_offset, error)
                failed.append((letter, error))
                continue
            log.info("group %s: message %s (%s queue %d offset %d) dead-lettered to %s after %d deliveries", group,
                     stored.properties.get(properties.MESSAGE_ID, ""), topic, stored.queue_id, stored.queue_offset, dlq,
                     letter.attempts)
            try:
                if broker.consumers.ack(group, topic, letter.receipt_handle):
                    broker.arrivals.notify(topic)  # a FIFO queue's batch is done: it hands out again
            except QuorumqError as exc:  # its lease moved on meanwhile, or this broker is no longer the master
                log.warning("group %s: dead letter %s/%d/%d stored in %s, but its lease not dropped: %s",
                            group, topic, stored.queue_id, stored.queue_offset, dlq, exc)
        return failed


def ahead_of(failed: list[DeadLetter], deliveries: list[Delivery]) -> list[Delivery]:
    """The `deliveries` that lie behind no `failed` letter in its queue: a FIFO queue hands out
    nothing behind a message that is neither acked nor in its DLQ topic. Those held back stay
    leased until their invisible time ends, then come back behind it, their attempt counted
    (docs/messaging.md, Retries and dead letters)."""
    first_failed: dict[int, int] = {}
    for letter in failed:
        queue_id, offset = letter.message.queue_id, letter.message.queue_offset
        first_failed[queue_id] = min(first_failed.get(queue_id, offset), offset)
    return [delivery for delivery in deliveries if delivery.message.queue_id not in first_failed
            or delivery.message.queue_offset < first_failed[delivery.message.queue_id]]
