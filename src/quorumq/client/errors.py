"""Errors a quorumq client raises, named by the server's catalogue name when it sent one."""

import re

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5

# Server messages start with a catalogue or RocketMQ status name, e.g. "TOPIC_NOT_FOUND: no topic x",
# or are only the name, e.g. "SEND_OK".
_NAMED = re.compile(r"([A-Z][A-Z0-9_]*)(?:: ?(.*))?", re.DOTALL)

# Transport failures after which the client asks for a fresh route and tries again.
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def split_name(message: str, fallback: str) -> tuple[str, str]:
    """(name, detail) of a server message, with `fallback` as the name when it carries none."""
    match = _NAMED.fullmatch(message)
    return (match.group(1), match.group(2) or "") if match else (fallback, message)


def code_name(code: int) -> str:
    try:
        return v5.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


class ClientError(Exception):
    """A request that failed; `name` is the catalogue name (or the v5 / gRPC code name)."""

    def __init__(self, name: str, detail: str, code: int = 0,
                 grpc_status: grpc.StatusCode | None = None) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail
        self.code = code  # the v5 Code, 0 when the failure was not a v5 status
        self.grpc_status = grpc_status

    @property
    def unreachable(self) -> bool:
        return self.grpc_status in _UNREACHABLE

    @classmethod
    def from_status(cls, status: v5.Status) -> "ClientError":
        name, detail = split_name(status.message, code_name(status.code))
        return cls(name, detail, code=status.code)

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> "ClientError":
        status = error.code()
        name, detail = split_name(error.details() or "", status.name)
        return cls(name, detail, grpc_status=status)


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
                         grpc_status=first.grpc_status)
        self.outcomes = outcomes
