"""Translation between quorumq's types and the RocketMQ v5 protocol messages, and the base of
every v5 servicer."""

import functools
import ipaddress
import logging

from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.dead_letters import DLQ_PREFIX
from quorumq.core.message_rules import check_group_name, check_name
from quorumq.core.message_types import ACCEPTED, TopicMessageType
from quorumq.core.subscription import EXPONENTIAL, SubscriptionGroup
from quorumq.errors import Error, QuorumqError
from quorumq.listen import RequestBound
from quorumq.protocol.constants import MASTER_ID, PERM_READ, PERM_WRITE
from quorumq.protocol.wire_errors import v5_code

log = logging.getLogger("quorumq.v5")

OK = v5.Status(code=v5.Code.OK, message="OK")
NO_NEW_MESSAGE = v5.Status(code=v5.Code.MESSAGE_NOT_FOUND, message="no new message")


def status(error: Error, detail: str) -> v5.Status:
    return v5.Status(code=v5_code(error), message=f"{error.name}: {detail}")


def error_status(exc: QuorumqError) -> v5.Status:
    return v5.Status(code=v5_code(exc.error), message=str(exc))


def failure_status(exc: Exception, handler_name: str, serving: str) -> v5.Status:
    """The status for a failed request: its catalogue entry, or INTERNAL_ERROR for a bug (logged)."""
    if isinstance(exc, QuorumqError):
        return error_status(exc)
    log.error("%s failed", handler_name, exc_info=exc)
    return status(Error.INTERNAL_ERROR, f"{serving} failed; see its log")


def send_answer(entries) -> v5s.SendMessageResponse:
    """A SendMessage answer of `entries`, its status the first failed entry's, as a broker answers
    a call (OK when every message was stored)."""
    answer = v5s.SendMessageResponse(entries=entries)
    failed = next((entry.status for entry in answer.entries if entry.status.code != v5.Code.OK), None)
    answer.status.CopyFrom(failed or OK)
    return answer


def answers(response_type):
    """Turn a failure in a unary handler into a response with a status; the server keeps serving."""

    def wrap(handler):
        @functools.wraps(handler)
        async def guarded(self, request, context):
            try:
                return await handler(self, request, context)
            except Exception as exc:
                return response_type(status=failure_status(exc, handler.__name__, self.serving))

        return guarded

    return wrap


def resource_name(resource: v5.Resource) -> str:
    """RocketMQ keeps a namespaced resource as `namespace%name`, a DLQ topic as `%DLQ%namespace%name`."""
    if resource.resource_namespace:
        prefix = DLQ_PREFIX if resource.name.startswith(DLQ_PREFIX) else ""
        return f"{prefix}{resource.resource_namespace}%{resource.name[len(prefix):]}"
    return resource.name


def topic_name(topic: v5.Resource) -> str:
    return check_name(resource_name(topic), Error.ILLEGAL_TOPIC, "topic")


def group_name(group: v5.Resource) -> str:
    return check_group_name(resource_name(group))


def resource(name: str) -> v5.Resource:
    """A stored name as a v5 resource (see resource_name); a DLQ topic's prefix belongs to its
    name, as RocketMQ's NamespaceUtil reads it, so a client names the topic back whole."""
    prefix = DLQ_PREFIX if name.startswith(DLQ_PREFIX) else ""
    namespace, _, short = name[len(prefix):].rpartition("%")
    return v5.Resource(resource_namespace=namespace, name=prefix + short)


def endpoints(address: str) -> v5.Endpoints:
    host, _, port = address.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        scheme = v5.AddressScheme.IPv4
    except ValueError:
        scheme = v5.AddressScheme.DOMAIN_NAME
    return v5.Endpoints(scheme=scheme, addresses=[v5.Address(host=host, port=int(port))])


def group_endpoints(data: pb.BrokerData) -> list[v5.Endpoints]:
    """Where clients reach a broker group, one address per Endpoints: its master, and in controller
    mode each other replica after it, since each forwards to the current master
    (endpoint/forwarding.py). Several addresses in one Endpoints would be one gRPC channel to most
    official clients, but the Node.js client takes them for one DNS name and the C# client dials
    only the first (docs/client-protocol.md#routes)."""
    addresses = [data.addresses[MASTER_ID]]
    if data.replicas_forward:
        addresses += [address for broker_id, address in sorted(data.addresses.items()) if broker_id != MASTER_ID]
    return [endpoints(address) for address in addresses]


def _permission(readable: bool, writable: bool) -> int:
    if readable and writable:
        return v5.Permission.READ_WRITE
    if readable:
        return v5.Permission.READ
    if writable:
        return v5.Permission.WRITE
    return v5.Permission.NONE


# The v5 message types a queue of each topic type announces (RocketMQ's RouteActivity).
ACCEPT_MESSAGE_TYPES = {
    pb.TopicMessageType.Value(kind.value): [v5.MessageType.Value(accepted.value) for accepted in ACCEPTED[kind]]
    for kind in TopicMessageType if kind is not TopicMessageType.UNSPECIFIED}


def message_queues(route: pb.TopicRoute, topic: v5.Resource) -> list[v5.MessageQueue]:
    """One v5 queue per queue id of each broker name on its id-0 address, as RocketMQ's proxy
    builds them; the route is the client's view (registry.client_route), where a slave acting for
    a lost master stands under id 0. In controller mode each queue is listed once per replica, so a
    client whose send or receive fails at one address takes another entry next (its retry, or the
    Java-style clients' isolation of the failed address), and reaches the master through it."""
    serving = {data.broker_name: data for data in route.brokers if MASTER_ID in data.addresses}
    queues = []
    for data in route.queues:
        group = serving.get(data.broker_name)
        if group is None:
            continue
        brokers = [v5.Broker(name=data.broker_name, id=MASTER_ID, endpoints=where) for where in group_endpoints(group)]
        # Unset: a broker before message types, whose topics are NORMAL.
        accepted = ACCEPT_MESSAGE_TYPES.get(data.message_type, ACCEPT_MESSAGE_TYPES[pb.NORMAL])
        for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)):
            readable = queue_id < data.read_queue_nums and data.perm & PERM_READ
            writable = queue_id < data.write_queue_nums and data.perm & PERM_WRITE
            queues += [v5.MessageQueue(topic=topic, id=queue_id, permission=_permission(readable, writable),
                                       broker=broker, accept_message_types=accepted)
                       for broker in brokers]
    return queues


def route_response(route: pb.TopicRoute | None, topic: v5.Resource) -> v5s.QueryRouteResponse:
    queues = message_queues(route, topic) if route is not None else []
    if not queues:
        return v5s.QueryRouteResponse(status=status(Error.TOPIC_NOT_FOUND, f"no route for topic {topic.name}"))
    return v5s.QueryRouteResponse(status=OK, message_queues=queues)


def proxied_route(response: v5s.QueryRouteResponse, topic: v5.Resource,
                  address: str) -> v5s.QueryRouteResponse:
    """A route as a proxy answers it (proxy/service.py): each queue once, on the proxy's own
    address, so the client talks to proxies alone. A controller-mode group lists each queue once
    per replica (message_queues); behind a proxy the proxy moves between them."""
    if response.status.code != v5.Code.OK:
        return response
    answer = v5s.QueryRouteResponse(status=response.status)
    seen = set()
    where = endpoints(address)
    for queue in response.message_queues:
        if (queue.broker.name, queue.id) in seen:
            continue
        seen.add((queue.broker.name, queue.id))
        added = answer.message_queues.add()
        added.CopyFrom(queue)
        added.topic.CopyFrom(topic)
        added.broker.endpoints.CopyFrom(where)
    return answer


def assignments(route: v5s.QueryRouteResponse) -> v5s.QueryAssignmentResponse:
    """One assignment per broker group, queue id -1: the broker pops from all its queues, as
    RocketMQ's proxy does."""
    if route.status.code != v5.Code.OK:
        return v5s.QueryAssignmentResponse(status=route.status)
    by_broker: dict[str, v5.MessageQueue] = {}
    for queue in route.message_queues:
        by_broker.setdefault(queue.broker.name, queue)
    answer = v5s.QueryAssignmentResponse(status=OK)
    for queue in by_broker.values():
        assigned = answer.assignments.add().message_queue
        assigned.CopyFrom(queue)
        assigned.id = -1
        assigned.permission = v5.Permission.READ_WRITE
    return answer


def settings_reply(settings: v5.Settings, max_body_bytes: int, group: SubscriptionGroup) -> v5.Settings:
    """A Telemetry settings command answered: the client's settings with the server's values laid
    over (grpc-client.md section 4); `group` is the subscription config of a consumer's group."""
    reply = v5.Settings()
    reply.CopyFrom(settings)
    reply.metric.on = False
    if settings.HasField("publishing"):
        reply.publishing.max_body_size = max_body_bytes
        reply.publishing.validate_message_type = True
        if not settings.HasField("backoff_policy"):
            reply.backoff_policy.max_attempts = 3
            reply.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
            reply.backoff_policy.exponential_backoff.max.FromSeconds(1)
            reply.backoff_policy.exponential_backoff.multiplier = 2.0
    elif settings.HasField("subscription"):
        subscription = reply.subscription
        subscription.fifo = group.consume_message_orderly
        subscription.receive_batch_size = limits.CONSUMER_RECEIVE_BATCH_SIZE
        if not subscription.HasField("long_polling_timeout"):
            subscription.long_polling_timeout.FromSeconds(limits.LONG_POLL_SECONDS_DEFAULT)
        reply.backoff_policy.CopyFrom(backoff_policy(group))
    return reply


def backoff_policy(group: SubscriptionGroup) -> v5.RetryPolicy:
    """The Telemetry back-off policy of a group's consumers (RocketMQ's GrpcClientSettingsManager):
    max_attempts = retryMaxTimes + 1, and its retry policy's back-offs."""
    policy = group.retry_policy
    reply = v5.RetryPolicy(max_attempts=group.max_attempts)
    if policy.kind == EXPONENTIAL:
        reply.exponential_backoff.initial.FromMilliseconds(policy.initial_ms)
        reply.exponential_backoff.max.FromMilliseconds(policy.max_ms)
        reply.exponential_backoff.multiplier = policy.multiplier
    else:
        for backoff_ms in policy.next_ms:
            reply.customized_backoff.next.add().FromMilliseconds(backoff_ms)
    return reply


def forwarded_metadata(context) -> tuple[tuple[str, str], ...]:
    """The client's own headers (client id, language, namespace, ...), without gRPC's: what a
    request passed on to another server carries."""
    return tuple((key, value) for key, value in context.invocation_metadata() or ()
                 if not key.startswith((":", "grpc-")) and key not in ("user-agent", "te", "content-type"))


# RPCs no quorumq process serves yet, and why.
NOT_BUILT = {
    "SyncLiteSubscription": "lite topics are not supported yet",
}


class UnservedMessagingService(v5_grpc.MessagingServiceServicer):
    """MessagingService with every RPC refused NOT_IMPLEMENTED in a v5 status and one log line;
    each process that can be a client's access point extends it and overrides what it serves, so
    a client reads a v5 status for every RPC (grpcio's own base answers gRPC UNIMPLEMENTED, which
    the official clients do not read as a refusal, and logs a traceback)."""

    serving = "this process"  # named in the refusal

    def refusal(self, rpc: str, context) -> v5.Status:
        log.info("%s from %s refused: not served by %s", rpc, context.peer(), self.serving)
        return status(Error.NOT_IMPLEMENTED, NOT_BUILT.get(rpc) or f"{rpc} is not served by {self.serving}")


def _refuse(method):
    response_type = getattr(v5s, method.output_type.name)
    if method.server_streaming:
        async def refuse(self, request, context):
            yield response_type(status=self.refusal(method.name, context))
    else:
        async def refuse(self, request, context):
            return response_type(status=self.refusal(method.name, context))
    refuse.__name__ = method.name
    return refuse


for _method in v5s.DESCRIPTOR.services_by_name["MessagingService"].methods:
    setattr(UnservedMessagingService, _method.name, _refuse(_method))


def _bound(method) -> RequestBound:
    """What a v5 request may hold before it is parsed (listen.py); a refusal is the method's answer
    with its status, as a rule the handler checks would be. SendMessage is bounded by gRPC's
    receive limit (maxMessageSize and the batch limit), its message count and, when large, the
    fields of its messages; AckMessage by its entries and size, every other request by its size."""
    response_type = getattr(v5s, method.output_type.name)

    def answer(error: QuorumqError) -> object:
        return response_type(status=error_status(error))

    if method.name == "SendMessage":
        messages = v5s.SendMessageRequest.MESSAGES_FIELD_NUMBER
        return RequestBound(None, messages, limits.BATCH_MESSAGES_MAX, "messages",  # in a large one, the
                            enter={messages: {v5.Message.SYSTEM_PROPERTIES_FIELD_NUMBER: {}}},  # properties and keys
                            entry_fields_max=limits.MESSAGE_FIELDS_MAX, answer=answer)
    if method.name == "AckMessage":
        return RequestBound(limits.REQUEST_BYTES_MAX, v5s.AckMessageRequest.ENTRIES_FIELD_NUMBER,
                            limits.ACK_ENTRIES_MAX, "entries", answer=answer)
    return RequestBound(limits.REQUEST_BYTES_MAX, answer=answer)


_SERVICE = v5s.DESCRIPTOR.services_by_name["MessagingService"]
# Full method name -> its bound, for every process that serves the v5 service (grpc_server's bounds).
REQUEST_BOUNDS = {f"/{_SERVICE.full_name}/{method.name}": _bound(method) for method in _SERVICE.methods}
