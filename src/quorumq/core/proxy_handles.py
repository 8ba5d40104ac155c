"""What a proxy adds to the handles it passes on, so that a later call reaches the right broker.

A receipt handle (and a transaction id) is the broker's own; the client hands it back on an ack,
a change of invisible duration, a dead-lettering or a transaction's end, with no broker name
beside it. The proxy prefixes the name of the broker group that gave it and strips it on the way
back. A recall handle needs nothing: it names its broker group already (core/timers.py). And the
broker group a send goes to is the proxy's choice (send_broker).
"""

import zlib

from quorumq.errors import Error, QuorumqError

# No broker name holds it: names are %|a-zA-Z0-9_- (core/message_rules.py).
SEPARATOR = "~"


def wrap(broker_name: str, handle: str) -> str:
    """`handle` of `broker_name` as the proxy hands it to the client."""
    assert broker_name and SEPARATOR not in broker_name, broker_name
    return f"{broker_name}{SEPARATOR}{handle}"


def unwrap(handle: str, error: Error = Error.INVALID_RECEIPT_HANDLE) -> tuple[str, str]:
    """(broker name, the broker's handle) of a handle `wrap` made; `error` for any other."""
    broker_name, separator, inner = handle.partition(SEPARATOR)
    if not separator or not broker_name or not inner:
        raise QuorumqError(error, f"handle {handle[:64]!r} was not given out by a proxy")
    return broker_name, inner


def send_broker(broker_names: list[str], message_group: str | None, turn: int) -> str:
    """The broker group a proxy sends a message to, of the groups with a writable queue: a FIFO
    message's group always to the same one while the route stays (its order lives in one queue
    there), any other in turn."""
    assert broker_names
    if message_group is not None:
        return broker_names[zlib.crc32(message_group.encode()) % len(broker_names)]
    return broker_names[turn % len(broker_names)]
