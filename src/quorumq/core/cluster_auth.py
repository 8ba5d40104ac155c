"""Authentication on quorumq's cluster protocol (cluster.proto), whose clients are quorumq's own:
a scheme beyond RocketMQ's, from spec/reliability.md's security checks.

A signed call carries four metadata entries: the access key, the time in milliseconds since the
epoch (UTC), a nonce (128 random bits in hex) and the signature, HMAC-SHA256 keyed with the secret
key over the canonical string: the scheme's name, the full method name, the access key, the time,
the nonce and the BLAKE3 digest (256 bits) of the request's serialized bytes, one per line. The
server hashes the exact bytes it received (before they are parsed), so no second serialization has
to agree with the client's; the client hashes what its channel sends (client/signing.py). The
request is hashed with BLAKE3 rather than SHA-256 because a batch request is large: BLAKE3 hashes
256 KiB about 5x faster (bench/bench_security.py), at the same 128-bit collision resistance. Any tampering with the
method, the access key, the time, the nonce or a byte of the request fails the signature. A stream
of requests (the brokers' Heartbeats) is signed once, as it opens, over empty bytes.

The time must lie within WINDOW_MS of the server's clock, and a nonce is accepted once: `Nonces`
keeps each accepted one until its signed time is out of the window, when the time check refuses
its replay anyway. Every field is taken only in the one form the client writes (lowercase hex,
decimal digits): a base64 or uppercase signature, a padded time, is refused, not normalised.

Pure: the time is passed in, nothing is read or logged, and no secret reaches an error's text.
"""

import hmac
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from blake3 import blake3

from quorumq.core.auth import UNKNOWN_OR_WRONG, Credentials, User, UserStatus, refused
from quorumq.errors import Error, QuorumqError

SCHEME = "QMQ2-HMAC-SHA256"  # QMQ1 hashed the request with SHA-256
METHOD_PREFIX = "/quorumq.cluster."  # the full name of every method of cluster.proto starts so
ACCESS_KEY_HEADER = "x-quorumq-access-key"
TIME_HEADER = "x-quorumq-time-ms"
NONCE_HEADER = "x-quorumq-nonce"
SIGNATURE_HEADER = "x-quorumq-signature"
HEADERS = (ACCESS_KEY_HEADER, TIME_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
NONCE_BYTES = 16

_TIME = re.compile(r"[1-9][0-9]{0,15}")  # milliseconds since the epoch, no sign, padding or spaces
_NONCE = re.compile(rf"[0-9a-f]{{{2 * NONCE_BYTES}}}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")  # HMAC-SHA256 in lowercase hex, as the client writes it


@dataclass(frozen=True)
class Signed:
    """A call's signing metadata, parsed."""

    access_key: str
    time_ms: int
    nonce: str
    signature: bytes


def canonical(method: str, access_key: str, time_ms: int, nonce: str, body: bytes) -> bytes:
    return "\n".join((SCHEME, method, access_key, str(time_ms), nonce, blake3(body).hexdigest())).encode()


def _digest(secret_key: str, method: str, access_key: str, time_ms: int, nonce: str, body: bytes) -> bytes:
    return hmac.digest(secret_key.encode(), canonical(method, access_key, time_ms, nonce, body), "sha256")


def sign(credentials: Credentials, method: str, body: bytes, time_ms: int, nonce: str) -> tuple[tuple[str, str], ...]:
    """The metadata that signs a call of `method` whose request serializes to `body`."""
    signature = _digest(credentials.secret_key, method, credentials.access_key, time_ms, nonce, body)
    return ((ACCESS_KEY_HEADER, credentials.access_key), (TIME_HEADER, str(time_ms)), (NONCE_HEADER, nonce),
            (SIGNATURE_HEADER, signature.hex()))


def parse(metadata: Mapping[str, str]) -> Signed:
    """The signing metadata of a call; raises UNAUTHENTICATED when one is missing or malformed."""
    missing = [key for key in HEADERS if key not in metadata]
    if missing:
        raise refused(f"the call is not signed: no {', '.join(missing)}")
    access_key, time_ms, nonce, signature = (metadata[key] for key in HEADERS)
    if not access_key:
        raise refused(f"empty {ACCESS_KEY_HEADER}")
    if not _TIME.fullmatch(time_ms):
        raise refused(f"{TIME_HEADER} must be milliseconds since the epoch in decimal digits")
    if not _NONCE.fullmatch(nonce):
        raise refused(f"{NONCE_HEADER} must be {NONCE_BYTES} bytes in lowercase hex")
    if not _SIGNATURE.fullmatch(signature):
        raise refused(f"{SIGNATURE_HEADER} must be the HMAC-SHA256 in lowercase hex")
    return Signed(access_key, int(time_ms), nonce, bytes.fromhex(signature))


class Nonces:
    """The nonces of the calls accepted within the window, each kept until its signed time is out of
    the window. At `nonces_max` a new call is refused (TOO_MANY_REQUESTS, to be retried) rather than
    an unexpired nonce forgotten, which would let its call be replayed. Only correctly signed calls
    get here, so only a holder of a secret can fill it."""

    def __init__(self, window_ms: int, nonces_max: int) -> None:
        self._window_ms = window_ms
        self._nonces_max = nonces_max
        self._expiries: OrderedDict[str, int] = OrderedDict()  # nonce -> when it may go, in arrival order

    def __len__(self) -> int:
        return len(self._expiries)

    def accept(self, nonce: str, time_ms: int, now_ms: int) -> None:
        """Remember `nonce`, signed at `time_ms`; raises if it was seen or there is no room."""
        # Expiries are in arrival order only roughly (clients' clocks differ): the oldest arrivals go
        # while expired, a later expired one waits behind an unexpired one, kept longer, never shorter.
        while self._expiries and next(iter(self._expiries.values())) < now_ms:
            self._expiries.popitem(last=False)
        if nonce in self._expiries:
            raise refused(f"nonce {nonce} was already used: a replayed call")
        if len(self._expiries) >= self._nonces_max:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"{self._nonces_max} signed calls within the "
                                                        f"{self._window_ms} ms window: try again later")
        self._expiries[nonce] = time_ms + self._window_ms


def authenticate(metadata: Mapping[str, str], method: str, body: bytes, users: dict[str, User], now_ms: int,
                 window_ms: int, nonces: Nonces) -> User:
    """The enabled user who signed this call of `method` with request bytes `body`; raises
    UNAUTHENTICATED otherwise. The nonce is remembered only for a call that passes every check."""
    signed = parse(metadata)
    user = users.get(signed.access_key)
    if user is None:
        raise refused(UNKNOWN_OR_WRONG)
    skew_ms = now_ms - signed.time_ms
    if abs(skew_ms) > window_ms:
        raise refused(f"{TIME_HEADER} {signed.time_ms} is {abs(skew_ms)} ms {'behind' if skew_ms > 0 else 'ahead of'} "
                      f"the server's time, more than the {window_ms} ms allowed")
    expected = _digest(user.password, method, signed.access_key, signed.time_ms, signed.nonce, body)
    if not hmac.compare_digest(expected, signed.signature):
        raise refused(UNKNOWN_OR_WRONG)
    if user.user_status is not UserStatus.ENABLE:
        raise refused(f"user {signed.access_key!r} is disabled")
    nonces.accept(signed.nonce, signed.time_ms, now_ms)
    return user
