"""How errors travel on the v5 service: each catalogue entry's RocketMQ v5 `Code`, which the
official clients understand (the one its entry in errors.py names), and the v5 code of each put
status. How a failed call carries an entry (its gRPC status and code) is grpc_errors.py, on every
port."""

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.core.put_status import PutStatus
from quorumq.errors import Error

Code = v5.Code

# Each entry's v5 code, as the catalogue names it.
V5_CODES: dict[Error, int] = {error: Code.Value(error.value.v5_code) for error in Error}

PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: Code.HA_NOT_AVAILABLE,
}


def v5_code(error: Error) -> int:
    return V5_CODES[error]
