"""Batch writes for quorumq's own client (cluster.proto MessageWriter): records the producer encoded
itself, checked and appended as they are, where the v5 SendMessage parses and re-encodes every
message. Refusals travel as the response status, so the producer treats TOO_MANY_REQUESTS here as
it would a v5 answer, and the broker keeps serving."""

import logging

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.endpoint import messages
from quorumq.endpoint.messaging import answer_by
from quorumq.errors import Error, QuorumqError

log = logging.getLogger("quorumq.endpoint")


class MessageWriterService(pb_grpc.MessageWriterServicer):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def SendBatch(self, request, context):
        try:
            topic = messages.check_name(request.topic, Error.ILLEGAL_TOPIC, "topic")
            if not 0 < request.count <= limits.BATCH_MESSAGES_MAX:  # before admission counts them
                raise QuorumqError(Error.BATCH_TOO_LARGE, f"a request carries 1..{limits.BATCH_MESSAGES_MAX} records")
            if len(request.request_id) > limits.KEY_LENGTH_MAX:
                raise QuorumqError(Error.ILLEGAL_MESSAGE_ID, f"request id longer than {limits.KEY_LENGTH_MAX}")
            if request.queue_id < 0:
                # The records name their queue, so the broker cannot pick one for them.
                raise QuorumqError(Error.BAD_REQUEST, f"queue id {request.queue_id}: SendBatch names the queue")
            status, first_queue_offset = await self.broker.put_encoded(topic, request.queue_id, request.records,
                                                                       request.count, request.request_id,
                                                                       answer_by(context))
        except QuorumqError as exc:
            return pb.SendBatchResponse(status=exc.error.name, detail=exc.detail)
        except Exception:
            log.exception("SendBatch failed")
            return pb.SendBatchResponse(status=Error.INTERNAL_ERROR.name, detail="the broker failed; see its log")
        if not status.stored:  # IN_SYNC_REPLICAS_NOT_ENOUGH: the records were not appended
            return pb.SendBatchResponse(status=status.send_status, detail="fewer replicas are in sync than the "
                                                                          "write needs; nothing was stored")
        return pb.SendBatchResponse(status=status.send_status, first_queue_offset=first_queue_offset,
                                    count=request.count, master_epoch=self.broker.master_epoch)
