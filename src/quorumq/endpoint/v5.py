"""Translation between quorumq's types and the RocketMQ v5 protocol messages."""

import ipaddress

from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.cluster import cluster_pb2 as pb
from quorumq.errors import Error, QuorumqError
from quorumq.namesrv.registry import MASTER_ID
from quorumq.store import PERM_READ, PERM_WRITE

OK = v5.Status(code=v5.Code.OK, message="OK")
NO_NEW_MESSAGE = v5.Status(code=v5.Code.MESSAGE_NOT_FOUND, message="no new message")


def status(error: Error, detail: str) -> v5.Status:
    return v5.Status(code=error.code, message=f"{error.name}: {detail}")


def error_status(exc: QuorumqError) -> v5.Status:
    return v5.Status(code=exc.error.code, message=str(exc))


def resource_name(resource: v5.Resource) -> str:
    """RocketMQ keeps a namespaced resource as `namespace%name`."""
    if resource.resource_namespace:
        return f"{resource.resource_namespace}%{resource.name}"
    return resource.name


def resource(name: str) -> v5.Resource:
    namespace, _, short = name.rpartition("%")
    return v5.Resource(resource_namespace=namespace, name=short)


def endpoints(address: str) -> v5.Endpoints:
    host, _, port = address.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        scheme = v5.AddressScheme.IPv4
    except ValueError:
        scheme = v5.AddressScheme.DOMAIN_NAME
    return v5.Endpoints(scheme=scheme, addresses=[v5.Address(host=host, port=int(port))])


def group_endpoints(data: pb.BrokerData) -> v5.Endpoints:
    """Where clients reach a broker group: its master; in controller mode every replica, since each
    forwards to the current master (endpoint/forwarding.py) and the official client's channel moves
    to the next address when one dies (gRPC pick_first), so it follows a failover at once."""
    result = endpoints(data.addresses[MASTER_ID])
    if data.replicas_forward:
        for broker_id, address in sorted(data.addresses.items()):
            if broker_id != MASTER_ID:
                result.addresses.extend(endpoints(address).addresses)
    return result


def _permission(readable: bool, writable: bool) -> int:
    if readable and writable:
        return v5.Permission.READ_WRITE
    if readable:
        return v5.Permission.READ
    if writable:
        return v5.Permission.WRITE
    return v5.Permission.NONE


def message_queues(route: pb.TopicRoute, topic: v5.Resource) -> list[v5.MessageQueue]:
    """One v5 queue per queue id of each broker name on its id-0 address, as RocketMQ's proxy
    builds them; the route is the client's view (registry.client_route), where a slave acting for
    a lost master stands under id 0."""
    serving = {data.broker_name: data for data in route.brokers if MASTER_ID in data.addresses}
    queues = []
    for data in route.queues:
        group = serving.get(data.broker_name)
        if group is None:
            continue
        broker = v5.Broker(name=data.broker_name, id=MASTER_ID, endpoints=group_endpoints(group))
        for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)):
            readable = queue_id < data.read_queue_nums and data.perm & PERM_READ
            writable = queue_id < data.write_queue_nums and data.perm & PERM_WRITE
            queues.append(v5.MessageQueue(topic=topic, id=queue_id, permission=_permission(readable, writable),
                                          broker=broker, accept_message_types=[v5.MessageType.NORMAL]))
    return queues


def route_response(route: pb.TopicRoute | None, topic: v5.Resource) -> v5s.QueryRouteResponse:
    queues = message_queues(route, topic) if route is not None else []
    if not queues:
        return v5s.QueryRouteResponse(status=status(Error.TOPIC_NOT_FOUND, f"no route for topic {topic.name}"))
    return v5s.QueryRouteResponse(status=OK, message_queues=queues)
