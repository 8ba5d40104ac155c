"""Errors a quorumq client raises, named by the server's catalogue entry when it sent one."""

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.errors import Error
from quorumq.grpc_errors import sent_error

# Transport failures after which the client asks for a fresh route and tries again.
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def code_name(code: int) -> str:
    try:
        return v5.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


class ClientError(Exception):
    """A request that failed; `name` is the catalogue name (or the v5 / gRPC code name), `error` the
    catalogue entry when the server sent one on the cluster protocol."""

    def __init__(self, name: str, detail: str, code: int = 0,
                 grpc_status: grpc.StatusCode | None = None, error: Error | None = None) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail
        self.code = code  # the v5 Code, 0 when the failure was not a v5 status
        self.grpc_status = grpc_status
        self.error = error

    @property
    def unreachable(self) -> bool:
        return self.grpc_status in _UNREACHABLE

    @classmethod
    def from_status(cls, status: v5.Status) -> "ClientError":
        """A v5 answer names its error by the v5 code only (several catalogue entries share one);
        the message is text for people, shown without repeating that name."""
        name = code_name(status.code)
        return cls(name, status.message.removeprefix(f"{name}: "), code=status.code)

    @classmethod
    def from_rpc(cls, failure: grpc.RpcError) -> "ClientError":
        """A failed cluster RPC: the catalogue entry by the code of the Error it carries, else the
        gRPC status (a transport failure, or an entry newer than this client)."""
        status = failure.code()
        sent = sent_error(failure.trailing_metadata())
        error = Error.from_code(sent.code) if sent is not None else None
        if error is not None and sent is not None:
            return cls(error.name, sent.detail, grpc_status=status, error=error)
        return cls(status.name, failure.details() or "", grpc_status=status)


def check(status: v5.Status, *accepted: int) -> None:
    """Raise unless the status is OK or one of `accepted`."""
    if status.code != v5.Code.OK and status.code not in accepted:
        raise ClientError.from_status(status)


class FanOutError(ClientError):
    """A change sent to several brokers that not every one applied. Raised only once every broker
    has answered; `outcomes` maps each broker's address to its error, or to None where it applied."""

    def __init__(self, outcomes: "dict[str, ClientError | None]") -> None:
        failed = {address: error for address, error in outcomes.items() if error is not None}
        first = next(iter(failed.values()))
        super().__init__(first.name, f"not applied on {len(failed)} of {len(outcomes)} brokers: "
                         + "; ".join(f"{address}: {error}" for address, error in failed.items()), code=first.code,
                         grpc_status=first.grpc_status, error=first.error)
        self.outcomes = outcomes
