"""Batch reads for quorumq's own client (cluster.proto MessageReader): many whole records per
answer, where the v5 PullMessage streams one message per response."""

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.message_rules import check_group_name, check_name
from quorumq.endpoint import messages
from quorumq.endpoint.messaging import poll_budget
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort
from quorumq.store import GetStatus


class MessageReaderService(pb_grpc.MessageReaderServicer):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def PullBatch(self, request, context):
        try:
            check_group_name(request.group)
            check_name(request.topic, Error.ILLEGAL_TOPIC, "topic")
            tags = messages.tag_filter(v5.FilterExpression(type=v5.FilterType.TAG, expression=request.tag_expression))
            result = await self.broker.pull(request.topic, request.queue_id, request.offset,
                                            min(max(request.max_count, 1), limits.PULL_BATCH_MAX), tags,
                                            poll_budget(request.long_poll_ms / 1000, context), raw=True,
                                            group=request.group)
        except QuorumqError as exc:
            await abort(context, exc)
        if result.status is GetStatus.OFFSET_OVERFLOW_BADLY:
            status = pb.OFFSET_ILLEGAL
        else:
            status = pb.FOUND if result.messages else pb.NO_NEW_MSG
        return pb.PullBatchResponse(status=status, records=b"".join(result.messages), count=len(result.messages),
                                    next_offset=result.next_offset, min_offset=result.min_offset,
                                    max_offset=result.max_offset)
