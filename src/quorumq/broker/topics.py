"""A broker's topics and its consumer groups' positions and subscription configs: configs,
auto-creation, the queues a send or a read may use (and the messages a topic's type takes), and the
changes slaves copy (broker/metadata.py carries them)."""

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from quorumq import limits
from quorumq.core import codec, properties
from quorumq.core.dead_letters import DLQ_QUEUES
from quorumq.core.fifo import LEASE_TOPIC
from quorumq.core.message_types import RecordRules, TopicMessageType, check_type_and_group, fifo_queue
from quorumq.core.quorum import BrokerRole
from quorumq.core.subscription import SubscriptionGroup
from quorumq.core.timers import TIMER_TOPIC
from quorumq.core.transactions import HALF_TOPIC, OP_TOPIC
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.constants import PERM_READ, PERM_WRITE
from quorumq.store import TopicConfig, TopicConfigs

log = logging.getLogger("quorumq.broker")


class Topics:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self.config = broker.config
        self.configs = TopicConfigs(Path(self.config["storePathRootDir"]))
        self._round_robin: dict[str, int] = {}
        self._queues = 0  # the queue total of every topic (limits.QUEUES_PER_BROKER_MAX), kept as they change
        # Topics created or changed since the name servers last heard (take_changes); None: since a
        # change only every topic tells (a deletion, a slave adopting its master's), or the start.
        self._changed: set[str] | None = None
        # Topics auto-created here that the members may not hold yet -> the metadata version that made them.
        self._unconfirmed: dict[str, int] = {}

    def load(self) -> None:
        self.configs.load()
        self._queues = sum(map(queue_count, self.configs.all()))

    def all(self) -> list[TopicConfig]:
        return self.configs.all()

    def topic_config(self, topic: str, create: bool) -> TopicConfig:
        config = self.configs.get(topic)
        if config is not None:
            return config
        if not (create and self.config["autoCreateTopicEnable"]):
            raise QuorumqError(Error.TOPIC_NOT_FOUND, f"topic {topic} does not exist on {self.config['brokerName']} "
                                                      "and autoCreateTopicEnable is false")
        return self._make(topic, self.config["defaultTopicQueueNums"])

    def _make(self, topic: str, queues: int) -> TopicConfig:
        """A topic made by the send that needs it (its members must hold it before the answer: `held`)."""
        config = self.update_topic(TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues))
        self._unconfirmed[topic] = self._broker.metadata_sync.version
        return config

    async def held(self, topics: Iterable[str], deadline: float) -> None:
        """A send to a topic auto-created here is acknowledged only once the members hold the topic,
        as an operator's topic update is answered (change_topic): a failover right after must not
        lose it. Raises as that update does, at `deadline` (the clock's monotonic time) at the latest."""
        if not self._unconfirmed:  # every send asks: the common answer without a look at its topics
            return
        waited = sorted(topic for topic in topics if topic in self._unconfirmed)
        if not waited:
            return
        version = max(self._unconfirmed[topic] for topic in waited)
        await self._broker.metadata_sync.replicated(version, f"creation of topic {', '.join(waited)}", deadline)
        self._unconfirmed = {topic: made for topic, made in self._unconfirmed.items() if made > version}

    def update_topic(self, config: TopicConfig) -> TopicConfig:
        _check_not_system_topic(config.name)
        old = self.configs.get(config.name)
        queues = self._queues + queue_count(config) - (queue_count(old) if old is not None else 0)
        if queues > limits.QUEUES_PER_BROKER_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"topic {config.name} refused: this broker's topics "
                                                        f"would have {queues} queues, more than "
                                                        f"{limits.QUEUES_PER_BROKER_MAX}")
        self.configs.put(config)
        self._queues = queues
        if self._changed is not None:
            self._changed.add(config.name)
        self._broker.topics_changed.set()
        self._broker.metadata_sync.new_version()
        log.info("topic %s: read %d write %d perm %d type %s", config.name, config.read_queue_nums,
                 config.write_queue_nums, config.perm, config.message_type.value)
        return config

    async def change_topic(self, config: TopicConfig) -> None:
        """An operator's topic update. On a controller-mode master with allAckInSyncStateSet it is
        answered once every SyncStateSet member has applied it, like a commit: a failover right
        after the answer must not lose the topic (slaves used to copy topics every 3 s)."""
        self.update_topic(config)
        if self._broker.role is not BrokerRole.SLAVE:
            await self._broker.metadata_sync.replicated(self._broker.metadata_sync.version, "topic update")

    async def change_subscription(self, group: SubscriptionGroup) -> None:
        """An operator's subscription group update (updateSubGroup, the whole config), answered as
        a topic update is (change_topic)."""
        self._broker.consumers.set_subscription(group)
        await self._broker.metadata_sync.changed(f"subscription group {group.name} update")

    async def delete_subscription(self, group: str) -> None:
        """An operator's deletion of a group's config (deleteSubGroup): the group has the defaults
        again; its positions stay."""
        self._broker.consumers.delete_subscription(group)
        await self._broker.metadata_sync.changed(f"subscription group {group} deletion")

    async def delete_topic(self, topic: str) -> None:
        """An operator's deletion. A master writes it in the log and answers once its members hold
        it, as a send (SendPath.delete_topic); a slave forgets the config at once, and drops the
        queues when its master's deletion record comes."""
        if self._broker.role is BrokerRole.SLAVE:
            self.forget(topic)
        else:
            await self._broker.sends.delete_topic(topic)

    def forget(self, topic: str) -> None:
        """Drop the topic's config and its groups' offsets; a topic made again starts afresh."""
        old = self.configs.get(topic)
        if old is not None:
            self.configs.delete(topic)
            self._queues -= queue_count(old)
        self._changed = None
        self._unconfirmed.pop(topic, None)
        self._broker.consumers.delete_topic(topic)
        self._broker.topics_changed.set()

    def adopt(self, topics: list[TopicConfig]) -> None:
        """A slave takes its master's topic configs. A topic the master lacks goes only once this
        broker holds no queues of it, as after its master's deletion record (store/append.py):
        the config follows the log, whichever of the two copies comes first, and a master whose
        config was lost cannot take its slaves' messages' topics."""
        kept = {config.name for config in topics} | set(self._broker.store.topics())
        for config in self.configs.all():
            if config.name not in kept:
                self.forget(config.name)
        if self.configs.adopt(topics):
            self._queues = sum(map(queue_count, self.configs.all()))
            self._changed = None
            self._broker.topics_changed.set()

    def take_changes(self) -> list[TopicConfig] | None:
        """The topics created or changed since the last call, for an increment registration; None
        when only every topic will do. From now on, changes are counted afresh."""
        changed, self._changed = self._changed, set()
        if changed is None:
            return None
        return [config for name in sorted(changed) if (config := self.configs.get(name)) is not None]

    def readable_queue_ids(self, topic: str) -> list[int]:
        config = self.topic_config(topic, create=False)
        if not config.perm & PERM_READ or not self.config["brokerPermission"] & PERM_READ:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not readable on this broker")
        return list(range(config.read_queue_nums))

    def check_queue(self, topic: str, queue_id: int) -> None:
        if queue_id not in self.readable_queue_ids(topic):
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no readable queue {queue_id}")

    def writable_queue(self, topic: str, queue_id: int, message: Mapping[str, str], dead_letter: bool) -> int:
        """The queue a send of a message (its properties) goes to: a FIFO message's group's queue
        (core/message_types.py fifo_queue, whatever queue the client chose), else `queue_id`, or
        when it is negative the topic's next queue round robin. Called after admission
        (broker/send_path.py): a send refused must not create its topic. A `dead_letter`'s copy
        goes to its group's DLQ topic, made for it if need be (`_config_to_send`)."""
        config = self._config_to_send(topic, lambda: (message,), dead_letter)
        group = message.get(properties.MESSAGE_GROUP)
        if group is not None:
            return fifo_queue(group, config.write_queue_nums)
        if queue_id < 0:
            turn = self._round_robin.get(topic, 0)
            self._round_robin[topic] = turn + 1
            return turn % config.write_queue_nums
        if queue_id >= config.write_queue_nums:
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no writable queue {queue_id}")
        return queue_id

    def writable_records_queue(self, topic: str, queue_id: int, records: bytes, count: int) -> RecordRules:
        """writable_queue for the records a producer encoded for one queue (SendBatch): the queue
        they name must be writable. The rules each record keeps (a type the topic takes, a FIFO
        record its group's queue) are checked by the store as it walks the records (the answer,
        for append_encoded), where it reads their properties anyway; a send that makes its topic
        has them checked here first, as a topic is made only for messages it takes: decoded only
        then."""
        made = self.configs.get(topic) is None
        config = self._config_to_send(topic, lambda: _records_properties(records, count) if made else (),
                                      dead_letter=False)
        if queue_id >= config.write_queue_nums:
            raise QuorumqError(Error.BAD_REQUEST, f"topic {topic} has no writable queue {queue_id}")
        return RecordRules(topic, config.message_type, queue_id, config.write_queue_nums)

    def _config_to_send(self, topic: str, messages: Callable[[], Iterable[Mapping[str, str]]],
                        dead_letter: bool) -> TopicConfig:
        """The config of a topic a send goes to, which takes each of `messages()` (their
        properties, asked for only when the topic exists or may be made): its group keeps the
        group rules and the topic takes its type. Created when the config allows it (NORMAL, and
        only for messages it takes), and writable here. A dead letter's copy
        (broker/dead_letters.py) makes its DLQ topic whatever autoCreateTopicEnable says, as
        RocketMQ does, and goes there whatever its type (a FIFO message's keeps its group); a
        client's send to a DLQ topic keeps every rule."""
        _check_not_system_topic(topic)
        config = self.configs.get(topic)
        if dead_letter:
            config = config or self._make(topic, DLQ_QUEUES)
        else:
            if config is not None or self.config["autoCreateTopicEnable"]:
                kind = config.message_type if config is not None else TopicMessageType.NORMAL  # what auto-create makes
                for message in messages():
                    check_type_and_group(topic, kind, message)
            config = self.topic_config(topic, create=True)
        if not config.perm & PERM_WRITE or not self.config["brokerPermission"] & PERM_WRITE:
            raise QuorumqError(Error.NO_PERMISSION, f"topic {topic} is not writable on this broker")
        return config

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's position. With SYNC_FLUSH it is on disk before the answer, as a send is;
        in controller mode with allAckInSyncStateSet the answer also waits until every member of
        the SyncStateSet has applied it (slaves long-poll for it), so no failover takes an
        acknowledged commit back. Otherwise slaves copy it on their next poll."""
        broker = self._broker
        if broker.metadata_sync.all_ack_in_sync_state_set and broker.sync_state is None:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "this broker is not the master: commit to the master")
        broker.consumers.touch(group)  # a new group, within GROUPS_MAX
        broker.consumers.commit(group, topic, queue_id, offset)
        if self.config["flushDiskType"] == "SYNC_FLUSH":
            broker.consumers.persist_offsets()
        await broker.metadata_sync.replicated(broker.metadata_sync.new_version(), "commit")


def _records_properties(records: bytes, count: int) -> list[dict[str, str]]:
    """The properties of a producer's records, decoded."""
    try:
        return codec.records_properties(records, count)
    except ValueError as exc:
        raise QuorumqError(Error.RECORD_CORRUPTED, f"the records do not parse: {exc}") from None


# The topics the broker writes its own records to (broker/lease_log.py, timers.py, transactions.py).
_SYSTEM_TOPICS = {LEASE_TOPIC: "FIFO lease records", TIMER_TOPIC: "pending delay messages",
                  HALF_TOPIC: "undecided transactional messages", OP_TOPIC: "transaction decisions"}


def _check_not_system_topic(topic: str) -> None:
    if topic in _SYSTEM_TOPICS:
        raise QuorumqError(Error.ILLEGAL_TOPIC, f"{topic} holds the brokers' {_SYSTEM_TOPICS[topic]}: it takes no "
                                                "sends and is not a topic to make")


def queue_count(config: TopicConfig) -> int:
    """The queues a topic has on disk and in routes: the larger of its read and write counts."""
    return max(config.read_queue_nums, config.write_queue_nums)
