"""The replicator's decisions, free of I/O: source offsets as JSON, how much each queue may read in
one micro-batch, which destination queue a source queue writes to, the loop check, the replay
de-duplication cut, the translation of consumer-group offsets through offset syncs, which groups the
checkpoint job may move, and what the config job changes on the target (topics, consumer groups,
their subscription configs, ACL 2.0 users and rules).

A queue is named by a `QueueKey` (topic, broker name, queue id); it never travels as a joined string,
since broker names may contain any character a joiner would use.
"""

import re
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, NamedTuple, Sequence, TypeVar
from urllib.parse import unquote

from quorumq import limits
from quorumq.core import acl
from quorumq.core.acl import PolicyEntry, ResourcePattern
from quorumq.core.auth import User
from quorumq.core.message_types import TopicMessageType
from quorumq.errors import Error, QuorumqError

OFFSETS_VERSION = 1

# Properties every replicated message carries.
SOURCE_CLUSTER = "ROCKETMQ_REPLICATOR_SOURCE"  # the birth cluster, set once and kept on every later hop
SOURCE_QUEUE = "REPLICATOR_SRC_QUEUE"  # JSON [cluster, topic, broker, queue id] of the copy's source
SOURCE_OFFSET = "REPLICATOR_SRC_OFFSET"  # the queue offset it had there
SOURCE_MESSAGE_ID = "REPLICATOR_SRC_MSG_ID"  # its message id there (the destination assigns a new one)
SOURCE_STORE_TIMESTAMP = "REPLICATOR_SRC_STORE_TIMESTAMP"  # ms: when the source stored it
REPLICATOR_PROPERTIES = frozenset({SOURCE_QUEUE, SOURCE_OFFSET, SOURCE_MESSAGE_ID, SOURCE_STORE_TIMESTAMP})


class QueueKey(NamedTuple):
    topic: str
    broker: str
    queue_id: int


def encode_offsets(offsets: Mapping[QueueKey, int]) -> dict:
    """Spark's offset for the source: {"v": 1, "topics": {topic: {broker: {queue id: next offset}}}}.

    Queue ids become strings only because JSON object keys are strings."""
    topics: dict[str, dict[str, dict[str, int]]] = {}
    for key in sorted(offsets):
        topics.setdefault(key.topic, {}).setdefault(key.broker, {})[str(key.queue_id)] = offsets[key]
    return {"v": OFFSETS_VERSION, "topics": topics}


def decode_offsets(offset: Mapping) -> dict[QueueKey, int]:
    if offset.get("v") != OFFSETS_VERSION or not isinstance(offset.get("topics"), dict):
        raise QuorumqError(Error.CONFIG_INVALID, f"source offset {offset!r} is not a version "
                                                 f"{OFFSETS_VERSION} quorumq offset")
    return {QueueKey(topic, broker, int(queue_id)): next_offset
            for topic, brokers in offset["topics"].items()
            for broker, queues in brokers.items()
            for queue_id, next_offset in queues.items()}


def admit(start: Mapping[QueueKey, int], available: Mapping[QueueKey, int], max_rows: int | None,
          max_rows_per_queue: int | None = None) -> dict[QueueKey, int]:
    """The end offsets of the next micro-batch: every queue of `available` (its end offset now),
    reading from `start` (a queue not in `start` is new and starts at its first available offset,
    which the caller puts in `start`). The rows are shared fairly: each round gives every queue with
    a backlog an equal part of what is left, so a busy queue cannot starve the others."""
    end = {key: start.get(key, offset) for key, offset in available.items()}
    backlog = {key: available[key] - end[key] for key in available if available[key] > end[key]}
    if max_rows_per_queue is not None:
        backlog = {key: min(rows, max_rows_per_queue) for key, rows in backlog.items()}
    budget = sum(backlog.values()) if max_rows is None else max_rows
    while budget > 0 and backlog:
        share = max(1, budget // len(backlog))
        for key in sorted(backlog):
            taken = min(share, backlog[key], budget)
            end[key] += taken
            backlog[key] -= taken
            budget -= taken
        backlog = {key: rows for key, rows in backlog.items() if rows > 0}
    return end


def pack(rows: Mapping[QueueKey, int], parts: int | None) -> list[list[QueueKey]]:
    """The queues of a micro-batch with `rows` to read each, in at most `parts` partitions (None:
    one a queue): the fullest queue first to the partition with the fewest rows so far, each
    partition's queues in order. A task reads its queues one after another, so fewer tasks than
    queues save Spark the start of a task (two process hops) per queue, and each queue keeps its
    order within its one task."""
    queues = sorted(rows)
    if parts is None or parts >= len(queues):
        return [[queue] for queue in queues]
    packed: list[list[QueueKey]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for queue in sorted(queues, key=lambda key: (-rows[key], key)):
        lightest = loads.index(min(loads))
        packed[lightest].append(queue)
        loads[lightest] += rows[queue]
    return [sorted(part) for part in packed if part]


def destination_queue(source: QueueKey, source_index: int,
                      destination_queues: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """Where a source queue's messages go on the destination: the queue of the same broker name and
    id when it exists there, else the one at the source queue's index in the route (both routes are
    ordered by broker name and queue id), modulo the destination's queue count."""
    if not destination_queues:
        raise QuorumqError(Error.TOPIC_NOT_FOUND, f"topic {source.topic} has no queue on the destination")
    if (source.broker, source.queue_id) in destination_queues:
        return source.broker, source.queue_id
    return destination_queues[source_index % len(destination_queues)]


def birth_cluster(properties: Mapping[str, str], source_cluster: str) -> str:
    """A message's birth cluster: the one an earlier hop stamped, else the cluster it is read from."""
    return properties.get(SOURCE_CLUSTER) or source_cluster


def loops_back(properties: Mapping[str, str], source_cluster: str, destination_cluster: str) -> bool:
    """Whether copying the message would bring it back to the cluster it was born in."""
    return birth_cluster(properties, source_cluster) == destination_cluster


def first_unwritten(offsets: Sequence[int], last_written: int | None) -> int:
    """De-duplication of a replayed batch: the index of the first row (source offsets ascending) that
    the destination queue's tail does not hold yet, given the largest source offset found there."""
    if last_written is None:
        return 0
    for index, offset in enumerate(offsets):
        if offset > last_written:
            return index
    return len(offsets)


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """One replicated message's source offset and the offset its copy got on the destination."""
    source_offset: int
    destination_offset: int


def sync_points(pairs: Sequence[tuple[int, int]], spacing: int = limits.REPLICATOR_SYNC_SPACING) -> list[OffsetSync]:
    """The offset syncs worth keeping from one batch of one queue, (source, destination) in write
    order: the first, the last, every `spacing`-th, and each one after a gap in the source offsets
    (filtered or dismissed messages), where interpolating would be wrong."""
    points = []
    for index, (source, destination) in enumerate(pairs):
        after_gap = index > 0 and source != pairs[index - 1][0] + 1
        if index == 0 or index == len(pairs) - 1 or index % spacing == 0 or after_gap:
            points.append(OffsetSync(source, destination))
    return points


class OffsetSyncStore:
    """The offset syncs of each source queue, bounded: the newest half is kept whole and older
    ones are thinned by halving each time the store fills, so spacing grows roughly exponentially
    with age and old group offsets can still be translated (the way MirrorMaker 2 keeps 64)."""

    def __init__(self, per_queue_max: int = limits.REPLICATOR_SYNCS_PER_QUEUE_MAX) -> None:
        assert per_queue_max >= 4
        self._per_queue_max = per_queue_max
        self._syncs: dict[QueueKey, list[OffsetSync]] = {}

    def add(self, queue: QueueKey, syncs: Iterable[OffsetSync]) -> None:
        kept = self._syncs.setdefault(queue, [])
        for sync in syncs:
            # A replay writes the same source offsets again: the newest copy replaces the history after it.
            while kept and kept[-1].source_offset >= sync.source_offset:
                kept.pop()
            kept.append(sync)
            if len(kept) > self._per_queue_max:
                newest = self._per_queue_max // 2
                kept[:] = kept[:-newest][::2] + kept[-newest:]

    def syncs(self, queue: QueueKey) -> list[OffsetSync]:
        return list(self._syncs.get(queue, ()))

    def translate(self, queue: QueueKey, group_offset: int) -> int | None:
        """The destination offset a group may resume from without skipping a message it has not
        consumed at `group_offset` (its next offset on the source), None when no sync lies at or
        below it. At a sync the copy's own offset; past one, the offset after the copy, never more:
        the group may see some messages again, never miss one."""
        best = None
        for sync in self._syncs.get(queue, ()):
            if sync.source_offset > group_offset:
                break
            best = sync
        if best is None:
            return None
        return best.destination_offset + (0 if best.source_offset == group_offset else 1)


def resume_offsets(start: Mapping[QueueKey, int],
                   min_offsets: Mapping[QueueKey, int]) -> tuple[dict[QueueKey, int], dict[QueueKey, tuple[int, int]]]:
    """Where the next batch reads each queue the source has now (queue -> its min offset): a known
    queue from its start offset, moved up to the min offset when retention deleted messages before
    they were read, so that no batch is planned over offsets that are gone; a new queue from its min
    offset. Also the offsets lost, [first, end) by queue."""
    offsets, lost = {}, {}
    for queue, min_offset in min_offsets.items():
        offsets[queue] = max(start.get(queue, min_offset), min_offset)
        if start.get(queue, min_offset) < min_offset:
            lost[queue] = (start[queue], min_offset)
    return offsets, lost


def parse_failure_policy(text: str) -> str:
    """`fail`, `dismiss`, or a `module:function` to hand failed records to."""
    module, _, function = text.partition(":")
    if text in ("fail", "dismiss") or (module and function.isidentifier()):
        return text
    raise QuorumqError(Error.CONFIG_INVALID, f"failure policy {text!r} is not fail, dismiss or module:function")


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)")


def parse_checkpoint(text: str) -> str:
    """The checkpoint directory as a local path: a path as it is, a file:// URL as its path. The
    replicator writes status files (replicate-metrics.json, heartbeat.json) beside the jobs'
    checkpoints with local file I/O, so a URL of another file system (hdfs://, s3a://) is refused
    rather than turned into a relative directory named after the URL."""
    match = _URL.fullmatch(text)
    if match is None:
        return text
    scheme, host, path = match.groups()
    if scheme.lower() == "file" and host in ("", "localhost") and path:
        return unquote(path)
    raise QuorumqError(Error.CONFIG_INVALID, f"checkpoint {text!r} is not a local directory: the replicator writes its "
                                             "status files beside the checkpoint with local file I/O; give a path "
                                             "(or file:// URL) on a mount every machine the driver may run on sees")


@dataclass(frozen=True, slots=True)
class TopicShape:
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: TopicMessageType = TopicMessageType.NORMAL


def topic_changes(source: Mapping[str, TopicShape], target: Mapping[str, TopicShape | None]) -> dict[str, TopicShape]:
    """What the config job sets on each target master (broker name -> its topic now, None when the
    topic is missing there) for a topic shaped per broker as `source` says: the shape of the source
    broker of the same name, else the largest source shape; created when missing, expanded when
    smaller, never shrunk. Permissions and the message type (a FIFO topic stays FIFO) follow the
    source. Brokers left as they are do not appear."""
    if not source:
        return {}
    first = next(iter(source.values()))
    largest = TopicShape(max(s.read_queue_nums for s in source.values()),
                         max(s.write_queue_nums for s in source.values()), first.perm, first.message_type)
    changes = {}
    for broker, current in target.items():
        wanted = source.get(broker, largest)
        if current is not None:
            wanted = TopicShape(max(wanted.read_queue_nums, current.read_queue_nums),
                                max(wanted.write_queue_nums, current.write_queue_nums), wanted.perm,
                                wanted.message_type)
        if wanted != current:
            changes[broker] = wanted
    return changes


def group_changes(source: Mapping[str, Mapping[str, int]],
                  target: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """What the config job adds to each target master (broker name -> group -> first contact, ms)
    for the consumer groups the source's masters know: every group a target master lacks, with its
    earliest first contact on the source. A group reads a queue it has no offset for from offset 0
    while the queue's first message is in memory, else from the first message stored at or after its
    first contact (core/group_start.py); a copy is stored after its original, so from that contact
    the group misses no copy of a message it would have read on the source. A group the target
    knows keeps its own first contact (a consumer there may be reading from it). Brokers with
    nothing to add do not appear."""
    earliest: dict[str, int] = {}
    for groups in source.values():
        for group, first_contact_ms in groups.items():
            earliest[group] = min(first_contact_ms, earliest.get(group, first_contact_ms))
    changes = {}
    for broker, known in target.items():
        missing = {group: ms for group, ms in sorted(earliest.items()) if group not in known}
        if missing:
            changes[broker] = missing
    return changes


Config = TypeVar("Config")


def _as_source_has_it(source: Mapping[str, Mapping[str, Config]], broker: str) -> dict[str, Config]:
    """What a target broker is to hold of items by name: each as the source broker of the same
    name has it, else as the first source broker by name that has it."""
    first: dict[str, Config] = {}
    for name in sorted(source, reverse=True):  # the first broker by name wins
        first.update(source[name])
    return {**first, **source.get(broker, {})}


def subscription_changes(source: Mapping[str, Mapping[str, Config]],
                         target: Mapping[str, Mapping[str, Config]]) -> dict[str, dict[str, Config]]:
    """What the config job sets on each target master (broker name -> group -> its subscription
    config) for the groups the source's masters configured: each as the source broker of the same
    name has it, else as the first source broker by name that has it, as topics go. A group the
    target holds alike is left as it is; one the source does not configure (deleted there, or the
    target's own) stays as the target has it. Brokers with nothing to set do not appear."""
    changes = {}
    for broker, held in target.items():
        wanted = _as_source_has_it(source, broker)
        differing = {group: config for group, config in sorted(wanted.items()) if held.get(group) != config}
        if differing:
            changes[broker] = differing
    return changes


class Access(NamedTuple):
    """One broker's ACL 2.0 users by name and rules by subject (`User:name`)."""

    users: Mapping[str, User]
    rules: Mapping[str, tuple[PolicyEntry, ...]]


@dataclass(frozen=True)
class AccessChanges:
    """What the config job changes of one target broker's users and rules, made in this order:
    users created and updated (a rule needs its user), the entries of resources deleted, rules
    set, then subjects' rules and users deleted (a user's deletion takes its rules)."""

    create_users: tuple[User, ...] = ()
    update_users: tuple[User, ...] = ()
    delete_entries: dict[str, tuple[ResourcePattern, ...]] = field(default_factory=dict)  # subject -> resources
    set_rules: dict[str, tuple[PolicyEntry, ...]] = field(default_factory=dict)  # subject -> the source's entries
    delete_rules: tuple[str, ...] = ()  # subjects
    delete_users: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self != AccessChanges()


def access_changes(source: Mapping[str, Access], target: Mapping[str, Access], deletes: bool,
                   kept: Collection[str] = ()) -> dict[str, AccessChanges]:
    """What the config job changes of each target broker's users and rules (broker name -> its
    Access) so that it holds the source's, each user and each subject's rules as the source broker
    of the same name has them, else as the first source broker by name, as subscription configs go.
    A missing user is created, one whose password, type or status differs updated; a subject whose
    entries differ gets the source's (each replaces the target's entry of its resource, others stay).
    Without `deletes` nothing is deleted; with it, the users the source lacks go (with their rules),
    and the rules of the subjects and the entries of the resources the source's rules lack. The
    users named in `kept` (the one the replicator signs as on the target) and their rules are left
    as they are. Brokers with nothing to change do not appear."""
    kept_subjects = {acl.subject(name) for name in kept}
    changes = {}
    for broker, held in target.items():
        users = {name: user for name, user in _as_source_has_it({b: a.users for b, a in source.items()}, broker).items()
                 if name not in kept}
        rules = {subject: entries for subject, entries
                 in _as_source_has_it({b: a.rules for b, a in source.items()}, broker).items()
                 if subject not in kept_subjects}
        delete_users = tuple(sorted(name for name in held.users if name not in users and name not in kept)) \
            if deletes else ()
        delete_entries, set_rules = {}, {}
        for subject, entries in sorted(rules.items()):
            wanted = {entry.resource: entry for entry in entries}
            current = {entry.resource: entry for entry in held.rules.get(subject, ())}
            extra = tuple(resource for resource in current if resource not in wanted)
            if deletes and extra:
                delete_entries[subject] = extra
            if any(current.get(resource) != entry for resource, entry in wanted.items()):
                set_rules[subject] = entries
        gone = kept_subjects | {acl.subject(name) for name in delete_users}
        change = AccessChanges(
            tuple(user for name, user in sorted(users.items()) if name not in held.users),
            tuple(user for name, user in sorted(users.items()) if name in held.users and held.users[name] != user),
            delete_entries, set_rules,
            tuple(sorted(s for s in held.rules if s not in rules and s not in gone)) if deletes else (), delete_users)
        if change:
            changes[broker] = change
    return changes


def groups_to_checkpoint(groups: Sequence[str],
                         live_consumers: Mapping[str, Mapping[str, int]]) -> tuple[list[str], dict[str, int]]:
    """Which groups the checkpoint job may move on the target (as MirrorMaker 2 writes only to
    groups empty on the target): those no target broker reports a live consumer of (group ->
    broker name -> live consumers); the others are skipped this round, with their live consumers
    summed over the brokers. A consumer's offsets must not move under it; once its consumers have
    left, a later round moves the group."""
    write, skipped = [], {}
    for group in groups:
        live = sum(live_consumers.get(group, {}).values())
        if live:
            skipped[group] = live
        else:
            write.append(group)
    return write, skipped
