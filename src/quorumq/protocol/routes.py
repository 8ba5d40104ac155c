"""Routes by the name server's rules: its route table (pure state, fed registrations and the time,
no I/O), also used by a broker to answer for its own topics, and the route as clients get it.

A broker re-registers every `registerNameServerPeriod` with all its topics, and in between with the
topics it changed (an increment); one not heard from for `brokerNotActiveTimeoutMillis` is dropped
with its routes. Times are the name server's monotonic
clock in ms, so a jump of the wall clock neither drops every broker nor keeps dead ones.
"""

from dataclasses import dataclass, field

from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.constants import MASTER_ID, PERM_READ

# A topic's queues in a registration: read and write queue counts, permission, message type (cluster.proto).
Queues = tuple[int, int, int, int]


def client_route(route: pb.TopicRoute | None) -> pb.TopicRoute | None:
    """The route as clients get it: a slave acting for a lost master is published under the
    master's id, as RocketMQ's name server does (RouteInfoManager.pickupTopicRouteData with
    supportActingMaster), because RocketMQ 5 clients read only from queues on broker id 0. Its
    queues stay read-only, so no client sends to it."""
    if route is None:
        return None
    view = pb.TopicRoute()
    view.CopyFrom(route)
    for data in view.brokers:
        if data.serving_id != MASTER_ID and data.serving_id in data.addresses:
            address = data.addresses[data.serving_id]
            del data.addresses[data.serving_id]
            data.addresses[MASTER_ID] = address
            data.serving_id = MASTER_ID
    return view


@dataclass
class BrokerEntry:
    registration: pb.BrokerRegistration  # without its topics, which `topics` holds by name
    heard_ms: int  # when it last registered (monotonic)
    topics: dict[str, Queues] = field(default_factory=dict)
    queues: int = 0  # of its topics, summed (limits.REGISTRATION_QUEUES_MAX)

    @property
    def key(self) -> tuple[str, str, int]:
        reg = self.registration
        return reg.cluster, reg.broker_name, reg.broker_id


@dataclass
class RouteRegistry:
    not_active_timeout_ms: int
    brokers: dict[tuple[str, str, int], BrokerEntry] = field(default_factory=dict)
    changes: int = 0  # counts the registrations taken and the brokers dropped

    def register(self, registration: pb.BrokerRegistration, now_ms: int) -> pb.RegisterReply:
        """Take a broker's registration: with every topic, replacing its last one, or with
        `topics_increment` only the topics changed since, added to its last one from the same
        address (else the reply asks for every topic). One past the totals (limits.py) is refused
        with TOO_MANY_REQUESTS and changes nothing."""
        base = self._member(registration.cluster, registration.broker_name, registration.broker_id)
        if registration.topics_increment and (base is None or base.registration.address != registration.address):
            return pb.RegisterReply(needs_all_topics=True)
        if not registration.topics_increment:
            base = None
        topics, queues = _topics(registration, base)
        entry = BrokerEntry(pb.BrokerRegistration(), now_ms, topics, queues)
        entry.registration.CopyFrom(registration)
        entry.registration.ClearField("topics")
        entry.registration.topics_increment = False
        master = self._member(registration.cluster, registration.broker_name, MASTER_ID)
        if (registration.broker_id == MASTER_ID and master is not None
                and master.registration.address != registration.address
                and master.registration.master_epoch > registration.master_epoch):
            # Controller mode: a deposed master that has not heard of the newer epoch yet stays
            # out of the routes (RocketMQ #6316: the larger state version wins).
            return pb.RegisterReply(master_address=master.registration.address,
                                    master_ha_address=master.registration.ha_address)
        replaced = [key for key, other in self.brokers.items() if key[:2] == entry.key[:2] and key != entry.key
                    and other.registration.address == registration.address]
        if entry.key not in self.brokers and len(self.brokers) - len(replaced) >= limits.NAMESRV_REGISTRATIONS_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"broker {'/'.join(map(str, entry.key))} refused: the "
                                                        f"name server routes {limits.NAMESRV_REGISTRATIONS_MAX} "
                                                        "brokers already")
        for key in replaced:
            del self.brokers[key]  # a controller-mode broker whose role, and so its id, changed
        if base is not None:  # an increment: the topics held stay, updated
            base.topics.update(entry.topics)
            entry.topics = base.topics
        self.brokers[entry.key] = entry
        self.changes += 1
        master = self._member(registration.cluster, registration.broker_name, MASTER_ID)
        if master is None:
            return pb.RegisterReply()
        return pb.RegisterReply(master_address=master.registration.address,
                                master_ha_address=master.registration.ha_address)

    def unregister(self, cluster: str, broker_name: str, broker_id: int) -> None:
        self.brokers.pop((cluster, broker_name, broker_id), None)
        self.changes += 1

    def expire(self, now_ms: int) -> list[BrokerEntry]:
        """Drop brokers silent for longer than the timeout; return them for the log."""
        dead = [entry for entry in self.brokers.values()
                if now_ms - entry.heard_ms > self.not_active_timeout_ms]
        for entry in dead:
            del self.brokers[entry.key]
        self.changes += len(dead)
        return dead

    def route(self, topic: str) -> pb.TopicRoute | None:
        """Queues of every serving broker holding the topic; failing that, of every master that
        would auto-create it on first send; None when no broker serves it. A slave acting for a
        lost master serves its topics read-only."""
        serving = self._serving()
        queues = []
        for entry in serving.values():
            if (found := entry.topics.get(topic)) is not None:
                read, write, perm, message_type = found
                queues.append(pb.QueueData(broker_name=entry.registration.broker_name, read_queue_nums=read,
                                           write_queue_nums=write,
                                           perm=perm if entry.key[2] == MASTER_ID else perm & PERM_READ,
                                           message_type=message_type or pb.NORMAL))
        if not queues:  # auto-created topics are NORMAL
            queues = [pb.QueueData(broker_name=reg.broker_name, read_queue_nums=reg.default_queue_nums,
                                   write_queue_nums=reg.default_queue_nums, perm=reg.perm, message_type=pb.NORMAL)
                      for entry in serving.values() for reg in [entry.registration]
                      if reg.broker_id == MASTER_ID and reg.auto_create_topic]
        if not queues:
            return None
        names = {queue.broker_name for queue in queues}
        brokers = {}
        for entry in self.brokers.values():
            reg = entry.registration
            if reg.broker_name in names:
                data = brokers.setdefault(reg.broker_name, pb.BrokerData(
                    cluster=reg.cluster, broker_name=reg.broker_name,
                    serving_id=serving[reg.cluster, reg.broker_name].registration.broker_id))
                data.addresses[reg.broker_id] = reg.address
                data.replicas_forward |= reg.master_epoch > 0  # only controller-mode brokers have epochs
        return pb.TopicRoute(topic=topic, queues=sorted(queues, key=lambda q: q.broker_name),
                             brokers=[brokers[name] for name in sorted(brokers)])

    def _serving(self) -> dict[tuple[str, str], BrokerEntry]:
        """Per broker name: its master, or with the master gone the lowest-id slave registered
        with enableSlaveActingMaster (RIP-32's acting master, for reads)."""
        serving: dict[tuple[str, str], BrokerEntry] = {}
        for key in sorted(self.brokers):  # a master (id 0) comes before its slaves
            entry = self.brokers[key]
            if key[:2] not in serving and (key[2] == MASTER_ID or entry.registration.acting_master):
                serving[key[:2]] = entry
        return serving

    def cluster_info(self, now_ms: int) -> pb.ClusterInfo:
        infos = [pb.BrokerInfo(cluster=reg.cluster, broker_name=reg.broker_name, broker_id=reg.broker_id,
                               address=reg.address, role=reg.role, since_heard_ms=now_ms - entry.heard_ms,
                               max_offset=reg.max_offset)
                 for entry in self.brokers.values() for reg in [entry.registration]]
        return pb.ClusterInfo(brokers=sorted(infos, key=lambda b: (b.cluster, b.broker_name, b.broker_id)))

    def member_group(self, cluster: str, broker_name: str) -> pb.MemberGroup:
        group = pb.MemberGroup(cluster=cluster, broker_name=broker_name)
        for (entry_cluster, name, broker_id), entry in self.brokers.items():
            if entry_cluster == cluster and name == broker_name:
                group.addresses[broker_id] = entry.registration.address
        return group

    def topic_list(self) -> list[str]:
        return sorted(set().union(*(entry.topics for entry in self.brokers.values())))

    def topic_types(self) -> list[tuple[str, int]]:
        """Every topic with its message type (cluster.proto TopicMessageType), by name: a master's
        where the brokers holding it differ."""
        types: dict[str, int] = {}
        for key in sorted(self.brokers, reverse=True):  # each broker name's master (id 0) last: it wins
            types.update((topic, shape[3]) for topic, shape in self.brokers[key].topics.items())
        return sorted(types.items())

    def delete_topic(self, topic: str) -> None:
        """Forget a topic the admin deleted on its brokers (they stop listing it themselves)."""
        for entry in self.brokers.values():
            if (shape := entry.topics.pop(topic, None)) is not None:
                entry.queues -= _queues(shape)

    def _member(self, cluster: str, broker_name: str, broker_id: int) -> BrokerEntry | None:
        return self.brokers.get((cluster, broker_name, broker_id))


def _topics(registration: pb.BrokerRegistration, base: BrokerEntry | None) -> tuple[dict[str, Queues], int]:
    """A registration's topics by name, so that a route costs one look-up per broker whatever the
    number of topics, and the broker's queue total with them (added to `base`'s for an increment);
    TOO_MANY_REQUESTS when the broker would pass the totals of one registration (limits.py)."""
    name = f"{registration.cluster}/{registration.broker_name}/{registration.broker_id}"
    if len(registration.topics) > limits.REGISTRATION_TOPICS_MAX:  # refused before the loop below
        raise QuorumqError(Error.TOO_MANY_REQUESTS, f"broker {name} refused: it registers {len(registration.topics)} "
                                                    f"topics, more than {limits.REGISTRATION_TOPICS_MAX}")
    held = base.topics if base is not None else {}
    index: dict[str, Queues] = {}
    shared: dict[Queues, Queues] = {}  # one tuple per distinct shape: most topics share theirs
    for config in registration.topics:
        shape = (config.read_queue_nums, config.write_queue_nums, config.perm, config.message_type)
        index[config.name] = shared.setdefault(shape, shape)
    count = len(held) + sum(topic not in held for topic in index)
    if count > limits.REGISTRATION_TOPICS_MAX:
        raise QuorumqError(Error.TOO_MANY_REQUESTS, f"broker {name} refused: it would have {count} topics, "
                                                    f"more than {limits.REGISTRATION_TOPICS_MAX}")
    queues = (base.queues if base is not None else 0) + sum(
        _queues(shape) - (_queues(held[topic]) if topic in held else 0) for topic, shape in index.items())
    if queues > limits.REGISTRATION_QUEUES_MAX:
        raise QuorumqError(Error.TOO_MANY_REQUESTS, f"broker {name} refused: its topics would have {queues} "
                                                    f"queues, more than {limits.REGISTRATION_QUEUES_MAX}")
    return index, queues


def _queues(shape: Queues) -> int:
    return max(shape[0], shape[1], 0)
