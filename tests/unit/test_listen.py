"""What gRPC logs about an answer its client did not wait for: one line, not an error."""

import logging
import sys

from quorumq.listen import GRPC_CORE_LOGGER, UndeliveredResponse


def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    try:
        raise RuntimeError("Failed \"execute_batch\"")
    except RuntimeError:
        exc_info = sys.exc_info()
    return logging.LogRecord(GRPC_CORE_LOGGER, level, "server.pyx.pxi", 710, message,
                             ("/apache.rocketmq.v2.MessagingService/UpdateOffset",), exc_info)


def test_an_undelivered_answer_is_one_line_at_info():
    undelivered = record("ExecuteBatchError raised in core by servicer method [%s]")
    assert UndeliveredResponse().filter(undelivered)
    assert undelivered.levelno == logging.INFO and undelivered.exc_info is None
    line = logging.Formatter("%(levelname)s %(message)s").format(undelivered)
    assert line == ("INFO /apache.rocketmq.v2.MessagingService/UpdateOffset: the answer was not delivered, "
                    "the client's connection closed first")


def test_other_grpc_errors_keep_their_level_and_traceback():
    other = record("Unexpected [%s] raised by servicer method [%s]")
    other.args = ("ValueError", "/apache.rocketmq.v2.MessagingService/SendMessage")
    assert UndeliveredResponse().filter(other)
    assert other.levelno == logging.ERROR and other.exc_info is not None
    assert "Traceback" in logging.Formatter().format(other)
