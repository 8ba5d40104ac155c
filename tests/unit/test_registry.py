"""The name server's route table: routes per topic, auto-create routes, member groups, expiry."""

from quorumq.cluster import cluster_pb2 as pb
from quorumq.protocol.routes import RouteRegistry


def registration(name, broker_id=0, topics=(), auto_create=True, address=None):
    return pb.BrokerRegistration(
        cluster="c", broker_name=name, broker_id=broker_id, address=address or f"127.0.0.1:{1000 + broker_id}",
        role="ASYNC_MASTER" if broker_id == 0 else "SLAVE", auto_create_topic=auto_create, default_queue_nums=4,
        perm=6, topics=[pb.TopicConfig(name=t, read_queue_nums=2, write_queue_nums=2, perm=6) for t in topics])


def test_route_lists_masters_holding_the_topic_with_all_member_addresses():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a", topics=["T"]), now_ms=0)
    registry.register(registration("a", broker_id=1, topics=["T"]), now_ms=0)
    registry.register(registration("b", topics=["U"], auto_create=False), now_ms=0)
    route = registry.route("T")
    assert [q.broker_name for q in route.queues] == ["a"]
    assert route.queues[0].write_queue_nums == 2
    assert dict(route.brokers[0].addresses) == {0: "127.0.0.1:1000", 1: "127.0.0.1:1001"}


def test_unknown_topic_routes_to_auto_creating_masters_only():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a"), now_ms=0)
    registry.register(registration("b", auto_create=False), now_ms=0)
    route = registry.route("NEW")
    assert [(q.broker_name, q.write_queue_nums) for q in route.queues] == [("a", 4)]
    registry.unregister("c", "a", 0)
    assert registry.route("NEW") is None


def test_silent_broker_is_dropped_after_timeout():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a", topics=["T"]), now_ms=0)
    registry.register(registration("b", topics=["T"]), now_ms=600)
    assert registry.expire(now_ms=1000) == []
    dropped = registry.expire(now_ms=1001)
    assert [entry.registration.broker_name for entry in dropped] == ["a"]
    assert [q.broker_name for q in registry.route("T").queues] == ["b"]


def test_member_group_and_master_address_reply():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a"), now_ms=0)
    reply = registry.register(registration("a", broker_id=1), now_ms=0)
    assert reply.master_address == "127.0.0.1:1000"
    assert dict(registry.member_group("c", "a").addresses) == {0: "127.0.0.1:1000", 1: "127.0.0.1:1001"}


def test_delete_topic_removes_it_from_routes_and_lists():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a", topics=["T", "U"], auto_create=False), now_ms=0)
    registry.delete_topic("T")
    assert registry.topic_list() == ["U"]
    assert registry.route("T") is None


def test_a_slave_acting_for_a_lost_master_serves_its_topics_read_only():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a", topics=["T"]), now_ms=0)
    for broker_id in (2, 1):
        slave = registration("a", broker_id=broker_id, topics=["T"])
        slave.acting_master = True
        registry.register(slave, now_ms=500)
    route = registry.route("T")
    assert route.brokers[0].serving_id == 0 and route.queues[0].perm == 6
    assert registry.expire(now_ms=1001)[0].registration.broker_id == 0
    route = registry.route("T")
    assert route.brokers[0].serving_id == 1  # the lowest id acts
    assert route.queues[0].perm == 4  # read only: writes wait for a master
    assert registry.route("NEW") is None  # nobody auto-creates topics for a lost master


def test_a_slave_without_acting_master_serves_nothing():
    registry = RouteRegistry(not_active_timeout_ms=1000)
    registry.register(registration("a", broker_id=1, topics=["T"]), now_ms=0)
    assert registry.route("T") is None
