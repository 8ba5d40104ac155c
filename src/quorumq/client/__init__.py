"""quorumq's own client: a batch producer, a pull consumer by offset and an admin client.

All three are asyncio (grpc.aio) clients; `Blocking` runs any of them for synchronous callers.
"""

from quorumq.client.admin import AdminClient
from quorumq.client.blocking import Blocking
from quorumq.client.consumer import FOUND, NO_NEW_MSG, OFFSET_ILLEGAL, PullConsumer, PullResult, ReceivedMessage
from quorumq.client.errors import ClientError
from quorumq.client.producer import SEND_OK, Message, Producer, SendResult
from quorumq.client.routes import RouteQueue
from quorumq.core.auth import Credentials

__all__ = [
    "AdminClient", "Blocking", "ClientError", "Credentials", "FOUND", "Message", "NO_NEW_MSG", "OFFSET_ILLEGAL",
    "Producer", "PullConsumer", "PullResult", "ReceivedMessage", "RouteQueue", "SEND_OK", "SendResult",
]
