"""What gRPC logs about an answer its client did not wait for: one line, not an error."""

import logging
import sys

from quorumq.listen import GRPC_CORE_LOGGER, UndeliveredResponse

METHOD = "/apache.rocketmq.v2.MessagingService/UpdateOffset"


def grpc_record(error: str) -> logging.LogRecord:
    """As grpcio's aio server logs a failed batch: the message formatted already, and the error."""
    try:
        raise RuntimeError(error)
    except RuntimeError:
        exc_info = sys.exc_info()
    return logging.LogRecord(GRPC_CORE_LOGGER, logging.ERROR, "server.pyx.pxi", 710,
                             f"ExecuteBatchError raised in core by servicer method [{METHOD}]", (), exc_info)


def test_an_undelivered_answer_is_one_line_at_info():
    undelivered = grpc_record('Failed "execute_batch": (<SendInitialMetadataOperation>, <SendMessageOperation>)')
    assert UndeliveredResponse().filter(undelivered)
    assert undelivered.levelno == logging.INFO and undelivered.exc_info is None
    assert logging.Formatter("%(levelname)s %(message)s").format(undelivered) == (
        f"INFO {METHOD}: the call ended on the client's side (cancelled, past its deadline or its "
        "connection lost) before the answer was sent")


def test_a_batch_grpc_refused_and_other_errors_keep_their_level_and_traceback():
    for record in (grpc_record("Failed grpc_call_start_batch: 8"),
                   logging.LogRecord(GRPC_CORE_LOGGER, logging.ERROR, "server.pyx.pxi", 700,
                                     "Unexpected [ValueError] raised by servicer method [/x/Y]", (),
                                     grpc_record("boom").exc_info)):
        assert UndeliveredResponse().filter(record)
        assert record.levelno == logging.ERROR and record.exc_info is not None
        assert "Traceback" in logging.Formatter().format(record)
