"""The v5 route the official clients get: every Endpoints holds one address, which every official
client can dial (the Node.js client joins several into a target its gRPC library cannot resolve)."""

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.cluster import cluster_pb2 as pb
from quorumq.protocol.v5 import route_response

TOPIC = v5.Resource(name="T")


def route(replicas_forward: bool) -> pb.TopicRoute:
    return pb.TopicRoute(
        topic="T", queues=[pb.QueueData(broker_name="a", read_queue_nums=2, write_queue_nums=2, perm=6)],
        brokers=[pb.BrokerData(cluster="c", broker_name="a", replicas_forward=replicas_forward,
                               addresses={0: "127.0.0.1:1000", 2: "127.0.0.1:1002", 1: "127.0.0.1:1001"})])


def entries(response) -> list[tuple[int, list[str]]]:
    return [(queue.id, [f"{a.host}:{a.port}" for a in queue.broker.endpoints.addresses])
            for queue in response.message_queues]


def test_a_group_without_forwarding_replicas_is_reached_at_its_master_only():
    assert entries(route_response(route(replicas_forward=False), TOPIC)) == [
        (0, ["127.0.0.1:1000"]), (1, ["127.0.0.1:1000"])]


def test_a_controller_mode_group_lists_each_queue_once_per_replica_master_first():
    response = route_response(route(replicas_forward=True), TOPIC)
    assert entries(response) == [
        (0, ["127.0.0.1:1000"]), (0, ["127.0.0.1:1001"]), (0, ["127.0.0.1:1002"]),
        (1, ["127.0.0.1:1000"]), (1, ["127.0.0.1:1001"]), (1, ["127.0.0.1:1002"])]
    assert {(q.broker.name, q.broker.id, q.permission) for q in response.message_queues} == {
        ("a", 0, v5.Permission.READ_WRITE)}
    assert all(q.broker.endpoints.scheme == v5.AddressScheme.IPv4 for q in response.message_queues)


def test_queues_announce_the_message_types_their_topic_takes():
    expected = {pb.NORMAL: [v5.MessageType.NORMAL], pb.FIFO: [v5.MessageType.FIFO], pb.DELAY: [v5.MessageType.DELAY],
                pb.TRANSACTION: [v5.MessageType.TRANSACTION],
                pb.MIXED: [v5.MessageType.NORMAL, v5.MessageType.FIFO, v5.MessageType.DELAY,
                           v5.MessageType.TRANSACTION],
                pb.MESSAGE_TYPE_UNSET: [v5.MessageType.NORMAL]}  # a broker before message types
    for message_type, accepted in expected.items():
        topic_route = route(replicas_forward=False)
        topic_route.queues[0].message_type = message_type
        assert [list(q.accept_message_types) for q in route_response(topic_route, TOPIC).message_queues] == [
            accepted, accepted]
