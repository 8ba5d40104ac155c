"""Routes by the name server's rules: its route table (pure state, fed registrations and the time,
no I/O), also used by a broker to answer for its own topics, and the route as clients get it.

A broker re-registers every `registerNameServerPeriod` with all its topics; one not heard from for
`brokerNotActiveTimeoutMillis` is dropped with its routes. Times are the name server's monotonic
clock in ms, so a jump of the wall clock neither drops every broker nor keeps dead ones.
"""

from dataclasses import dataclass, field

from quorumq.cluster import cluster_pb2 as pb
from quorumq.protocol.constants import MASTER_ID, PERM_READ


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
    registration: pb.BrokerRegistration
    heard_ms: int  # when it last registered (monotonic)

    @property
    def key(self) -> tuple[str, str, int]:
        reg = self.registration
        return reg.cluster, reg.broker_name, reg.broker_id


@dataclass
class RouteRegistry:
    not_active_timeout_ms: int
    brokers: dict[tuple[str, str, int], BrokerEntry] = field(default_factory=dict)

    def register(self, registration: pb.BrokerRegistration, now_ms: int) -> pb.RegisterReply:
        entry = BrokerEntry(pb.BrokerRegistration(), now_ms)
        entry.registration.CopyFrom(registration)
        master = self._member(registration.cluster, registration.broker_name, MASTER_ID)
        if (registration.broker_id == MASTER_ID and master is not None
                and master.registration.address != registration.address
                and master.registration.master_epoch > registration.master_epoch):
            # Controller mode: a deposed master that has not heard of the newer epoch yet stays
            # out of the routes (RocketMQ #6316: the larger state version wins).
            return pb.RegisterReply(master_address=master.registration.address,
                                    master_ha_address=master.registration.ha_address)
        for key in [key for key, other in self.brokers.items() if key[:2] == entry.key[:2] and key != entry.key
                    and other.registration.address == registration.address]:
            del self.brokers[key]  # a controller-mode broker whose role, and so its id, changed
        self.brokers[entry.key] = entry
        master = self._member(registration.cluster, registration.broker_name, MASTER_ID)
        if master is None:
            return pb.RegisterReply()
        return pb.RegisterReply(master_address=master.registration.address,
                                master_ha_address=master.registration.ha_address)

    def unregister(self, cluster: str, broker_name: str, broker_id: int) -> None:
        self.brokers.pop((cluster, broker_name, broker_id), None)

    def expire(self, now_ms: int) -> list[BrokerEntry]:
        """Drop brokers silent for longer than the timeout; return them for the log."""
        dead = [entry for entry in self.brokers.values()
                if now_ms - entry.heard_ms > self.not_active_timeout_ms]
        for entry in dead:
            del self.brokers[entry.key]
        return dead

    def route(self, topic: str) -> pb.TopicRoute | None:
        """Queues of every serving broker holding the topic; failing that, of every master that
        would auto-create it on first send; None when no broker serves it. A slave acting for a
        lost master serves its topics read-only."""
        serving = self._serving()
        queues = [pb.QueueData(broker_name=reg.broker_name, read_queue_nums=config.read_queue_nums,
                               write_queue_nums=config.write_queue_nums,
                               perm=config.perm if reg.broker_id == MASTER_ID else config.perm & PERM_READ)
                  for reg in serving.values() for config in reg.topics if config.name == topic]
        if not queues:
            queues = [pb.QueueData(broker_name=reg.broker_name, read_queue_nums=reg.default_queue_nums,
                                   write_queue_nums=reg.default_queue_nums, perm=reg.perm)
                      for reg in serving.values() if reg.broker_id == MASTER_ID and reg.auto_create_topic]
        if not queues:
            return None
        names = {queue.broker_name for queue in queues}
        brokers = {}
        for entry in self.brokers.values():
            reg = entry.registration
            if reg.broker_name in names:
                data = brokers.setdefault(reg.broker_name, pb.BrokerData(
                    cluster=reg.cluster, broker_name=reg.broker_name,
                    serving_id=serving[reg.cluster, reg.broker_name].broker_id))
                data.addresses[reg.broker_id] = reg.address
                data.replicas_forward |= reg.master_epoch > 0  # only controller-mode brokers have epochs
        return pb.TopicRoute(topic=topic, queues=sorted(queues, key=lambda q: q.broker_name),
                             brokers=[brokers[name] for name in sorted(brokers)])

    def _serving(self) -> dict[tuple[str, str], pb.BrokerRegistration]:
        """Per broker name: its master, or with the master gone the lowest-id slave registered
        with enableSlaveActingMaster (RIP-32's acting master, for reads)."""
        serving: dict[tuple[str, str], pb.BrokerRegistration] = {}
        for key in sorted(self.brokers):  # a master (id 0) comes before its slaves
            reg = self.brokers[key].registration
            if key[:2] not in serving and (reg.broker_id == MASTER_ID or reg.acting_master):
                serving[key[:2]] = reg
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
        topics = {config.name for entry in self.brokers.values() for config in entry.registration.topics}
        return sorted(topics)

    def delete_topic(self, topic: str) -> None:
        """Forget a topic the admin deleted on its brokers (they stop listing it themselves)."""
        for entry in self.brokers.values():
            kept = [config for config in entry.registration.topics if config.name != topic]
            del entry.registration.topics[:]
            entry.registration.topics.extend(kept)

    def _member(self, cluster: str, broker_name: str, broker_id: int) -> BrokerEntry | None:
        return self.brokers.get((cluster, broker_name, broker_id))
