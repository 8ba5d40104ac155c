"""The official Python PushConsumer (rocketmq-python-client 5.1.2) with its group's retry policy: a
normal group and a FIFO group, listeners that succeed, fail and raise, and dead letters.

Goal: what an application using the PushConsumer sees once an operator configured its group with
`quorumq admin updateSubGroup -r RETRY_MAX_TIMES -p CUSTOMIZED_POLICY`. A normal group's failed
message comes back after the policy's back-off (the client asks for it with ChangeInvisibleDuration)
and, once its last allowed delivery failed, is in %DLQ%<group> with its origin and is not delivered
again. A FIFO group's listener sees each message group in order while some messages fail a few
times (the client retries them locally, with the same back-offs); a message that always fails is
forwarded to the DLQ after its last attempt and the messages behind it then follow in order.

Method: one broker; the groups and topics are made with the CLI as a user would; each listener
call is recorded with its time, and the broker's view (consumerProgress: every message acked,
nothing in flight, the DLQ count) says when nothing more will come. The back-offs are 1 s and 2 s,
the shortest a policy may have (an invisible time is at least 1 s).
"""

import json
import threading
import time
import uuid
from collections import Counter

from rocketmq import ConsumeResult, FilterExpression, Message, MessageListener, PushConsumer

from harness import check_for, cli, configuration, read_dead_letters, started_producer

CLUSTER = "DefaultCluster"
BACKOFFS_S = (1, 2)  # the group's customized policy: the back-off before retry 1, then 2 and after
POLICY = json.dumps({"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [s * 1000 for s in BACKOFFS_S]}})
RETRY_MAX_TIMES = 2  # deliveries (FIFO: listener calls) at most 3
EARLY_S = 0.2  # a retry may come this much before its back-off ends (the clocks of two processes)
LATE_S = 2.5  # ... and at most this much after it (a long poll looks for expired leases once a second)


def admin(cluster: dict, *args: object) -> str:
    done = cli("admin", *map(str, args), "-n", cluster["access_point"])
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_topic(cluster: dict, message_type: str, queues: int) -> str:
    topic = f"T{uuid.uuid4().hex[:8]}"
    admin(cluster, "updateTopic", "-c", CLUSTER, "-t", topic, "-r", queues, "-w", queues,
          "-a", f"+message.type={message_type}")
    return topic


def new_group(cluster: dict, orderly: bool) -> str:
    group = f"G{uuid.uuid4().hex[:8]}"
    admin(cluster, "updateSubGroup", "-c", CLUSTER, "-g", group, "-o", str(orderly).lower(),
          "-r", RETRY_MAX_TIMES, "-p", POLICY)
    return group


def backoff_s(retry: int) -> int:
    """The back-off before retry `retry` (1-based), the last one repeating."""
    return BACKOFFS_S[min(retry, len(BACKOFFS_S)) - 1]


class Scripted(MessageListener):
    """Answers each body as `script` says: an int n fails its first n calls, "raise" raises on its
    first call, "always" always fails, anything else succeeds. Records every call with its time."""

    def __init__(self, script: dict[str, object]) -> None:
        self.script = script
        self.calls: list[tuple[str, int, float]] = []  # (body, delivery attempt, monotonic time)
        self.lock = threading.Lock()

    def consume(self, message):
        body = message.body.decode()
        with self.lock:
            self.calls.append((body, message.delivery_attempt, time.monotonic()))
            made = sum(1 for called, _, _ in self.calls if called == body)
        action = self.script.get(body)
        if action == "raise" and made == 1:
            raise RuntimeError("the listener raised")
        if action == "always" or (isinstance(action, int) and made <= action):
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def times(self, body: str) -> list[float]:
        with self.lock:
            return [at for called, _, at in self.calls if called == body]

    def counts(self) -> Counter:
        with self.lock:
            return Counter(body for body, _, _ in self.calls)


def progress(cluster: dict, group: str) -> dict:
    return json.loads(admin(cluster, "consumerProgress", "-g", group, "--json"))


def settled(cluster: dict, group: str, topic: str, dead_letters: int) -> bool:
    """The broker's view: every message of `topic` acked, nothing in flight, the DLQ count reached."""
    shown = progress(cluster, group)
    queues = [q for q in shown["queues"] if q["topic"] == topic]
    return shown["dead_letters"] == dead_letters and bool(queues) and all(
        q["consumer_offset"] == q["broker_offset"] and q["inflight"] == 0 for q in queues)


def message(topic: str, body: str, message_group: str | None = None) -> Message:
    built = Message()
    built.topic, built.body = topic, body.encode()
    if message_group:
        built.message_group = message_group
    return built


def test_a_normal_groups_failures_come_back_after_its_back_off_and_end_in_its_dlq(shared_cluster):
    topic, group = new_topic(shared_cluster, "NORMAL", queues=2), new_group(shared_cluster, orderly=False)
    config = configuration(shared_cluster)
    listener = Scripted({"fail": 1, "raise": "raise", "poison": "always"})
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    producer = started_producer(config)
    try:
        ids = {body: producer.send(message(topic, body)).message_id for body in ("ok", "fail", "raise", "poison")}
        # The poison's third delivery failed: the next receive puts it in the DLQ instead of delivering it.
        check_for(40, 0.2, lambda: settled(shared_cluster, group, topic, dead_letters=1),
                  "every message acked or dead-lettered")
        assert listener.counts() == {"ok": 1, "fail": 2, "raise": 2, "poison": RETRY_MAX_TIMES + 1}
        with listener.lock:
            attempts = {body: [a for called, a, _ in listener.calls if called == body] for body in ids}
        assert attempts == {"ok": [1], "fail": [1, 2], "raise": [1, 2], "poison": [1, 2, 3]}
        for body in ("fail", "raise", "poison"):
            times = listener.times(body)
            for retry, (before, after) in enumerate(zip(times, times[1:]), start=1):
                gap = after - before
                assert backoff_s(retry) - EARLY_S <= gap <= backoff_s(retry) + LATE_S, (body, retry, gap)
        [letter] = read_dead_letters(config, group, 1)
        assert (letter.message_id, letter.body) == (ids["poison"], b"poison")
        assert letter.properties == {"DLQ_ORIGIN_TOPIC": topic, "DLQ_ORIGIN_MESSAGE_ID": ids["poison"],
                                     "RECONSUME_TIME": str(RETRY_MAX_TIMES + 1)}
        assert listener.counts()["poison"] == RETRY_MAX_TIMES + 1, "not delivered again"
    finally:
        producer.shutdown()
        consumer.shutdown()


def test_a_fifo_groups_order_holds_through_retries_and_a_dead_letter(shared_cluster):
    topic, group = new_topic(shared_cluster, "FIFO", queues=2), new_group(shared_cluster, orderly=True)
    config = configuration(shared_cluster)
    sent = {f"g{key}": [f"g{key}-{seq}" for seq in range(5)] for key in range(4)}
    poison = "g2-1"
    listener = Scripted({"g0-1": 2, "g1-2": "raise", "g3-0": 1, poison: "always"})
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    producer = started_producer(config)
    try:
        ids = {}
        for seq in range(5):  # sent while the consumer runs: the broker's queue blocking keeps the order
            for key, bodies in sent.items():
                ids[bodies[seq]] = producer.send(message(topic, bodies[seq], key)).message_id
        check_for(40, 0.2, lambda: settled(shared_cluster, group, topic, dead_letters=1),
                  "every message acked or dead-lettered")
        with listener.lock:
            calls = [body for body, _, _ in listener.calls]
        for key, bodies in sent.items():
            in_group = [body for body in calls if body.startswith(f"{key}-")]
            runs = [body for index, body in enumerate(in_group) if index == 0 or in_group[index - 1] != body]
            assert runs == bodies, f"{key}: each message's calls together, in the order sent"
        expected = Counter({body: 1 for body in ids}) + Counter({"g0-1": 2, "g1-2": 1, "g3-0": 1, poison: 2})
        assert listener.counts() == expected
        for body in ("g0-1", "g3-0", poison):  # the client's local retries wait the policy's back-offs
            times = listener.times(body)
            for retry, (before, after) in enumerate(zip(times, times[1:]), start=1):
                assert backoff_s(retry) - EARLY_S <= after - before <= backoff_s(retry) + LATE_S, (body, retry)
        [letter] = read_dead_letters(config, group, 1)
        assert (letter.message_id, letter.body, letter.message_group) == (ids[poison], poison.encode(), "g2")
        # The broker delivered it once; the client made its three attempts locally, then forwarded it.
        assert letter.properties == {"DLQ_ORIGIN_TOPIC": topic, "DLQ_ORIGIN_MESSAGE_ID": ids[poison],
                                     "RECONSUME_TIME": "1"}
        assert listener.counts() == expected, "nothing delivered again"
    finally:
        producer.shutdown()
        consumer.shutdown()
