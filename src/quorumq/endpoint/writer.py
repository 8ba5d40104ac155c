"""Batch writes for quorumq's own client (cluster.proto MessageWriter): records the producer encoded
itself, checked and appended as they are, where the v5 SendMessage parses and re-encodes every
message. A refused request fails the cluster protocol's way (an Error in the trailing metadata,
grpc_errors.py), a served one answers with its put status; the broker keeps serving."""

import logging

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.message_rules import check_name
from quorumq.endpoint.messaging import answer_by
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort

log = logging.getLogger("quorumq.endpoint")


class MessageWriterService(pb_grpc.MessageWriterServicer):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def SendBatch(self, request, context):
        try:
            topic = check_name(request.topic, Error.ILLEGAL_TOPIC, "topic")
            if not 0 < request.count <= limits.BATCH_MESSAGES_MAX:  # before admission counts them
                raise QuorumqError(Error.BATCH_TOO_LARGE, f"a request carries 1..{limits.BATCH_MESSAGES_MAX} records")
            if len(request.request_id) > limits.KEY_LENGTH_MAX:
                raise QuorumqError(Error.ILLEGAL_MESSAGE_ID, f"request id longer than {limits.KEY_LENGTH_MAX}")
            if request.queue_id < 0:
                # The records name their queue, so the broker cannot pick one for them.
                raise QuorumqError(Error.BAD_REQUEST, f"queue id {request.queue_id}: SendBatch names the queue")
            result = await self.broker.put_encoded(topic, request.queue_id, request.records, request.count,
                                                   request.request_id, answer_by(context, self.broker.clock))
        except QuorumqError as exc:
            await abort(context, exc)
        except Exception:
            log.exception("SendBatch failed")
            await abort(context, QuorumqError(Error.INTERNAL_ERROR, "the broker failed; see its log"))
        if not result.status.stored:  # IN_SYNC_REPLICAS_NOT_ENOUGH: the records were not appended
            return pb.SendBatchResponse(status=result.status.send_status, detail="fewer replicas are in sync than the "
                                                                          "write needs; nothing was stored")
        return pb.SendBatchResponse(status=result.status.send_status, first_queue_offset=result.queue_offset,
                                    count=request.count, master_epoch=result.master_epoch)
