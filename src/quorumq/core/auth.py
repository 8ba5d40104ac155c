"""Authentication of RocketMQ v5 clients (ACL 2.0, as RocketMQ 5.3's auth module has it): who
signed a request, decided from its headers alone.

A v5 client sends `authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex>` with every unary call and once when it opens its
Telemetry stream; the signature is HMAC-SHA1, keyed with the secret key, over the exact
`x-mq-date-time` value (spec grpc-client.md section 2). A user is found by its name (the access key)
and the signature recomputed with its password (the secret key). The date-time is only signed, not
checked against the clock, unless a freshness window is set: the official Python client formats
its local time with a `Z` suffix, so a window refuses every client not running in UTC.

Pure: the time is passed in, nothing is read or logged here, and no secret reaches an error's text.
"""

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum

from quorumq.errors import Error, QuorumqError

ALGORITHM = "MQv2-HMAC-SHA1"
SIGNED_HEADER = "x-mq-date-time"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"  # what the clients put in x-mq-date-time
_SIGNATURE = re.compile(r"[0-9A-Fa-f]{40}")
UNKNOWN_OR_WRONG = "unknown access key or wrong signature"  # an HMAC-SHA1 in hex, in either case


class UserType(Enum):
    SUPER = "Super"  # may do everything, whatever the rules say
    NORMAL = "Normal"


class UserStatus(Enum):
    ENABLE = "enable"
    DISABLE = "disable"


@dataclass(frozen=True)
class User:
    username: str  # the access key a client presents
    password: str = field(repr=False)  # the secret key it signs with: never in a repr, hence a log
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE

    @property
    def credentials(self) -> "Credentials":
        """What a client signs with as this user."""
        return Credentials(self.username, self.password)


@dataclass(frozen=True)
class Credentials:
    """What a client signs its requests with."""

    access_key: str
    secret_key: str = field(repr=False)


def credentials_of(access_key: str, secret_key: str, where: str) -> Credentials | None:
    """The credentials an access key and a secret key make, given together; None when neither is
    given. `where` names where they come from, for the error."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise QuorumqError(Error.BAD_REQUEST, f"an access key needs its secret key and the other way round: {where}")
    return Credentials(access_key, secret_key)


@dataclass(frozen=True)
class Authorization:
    """An `authorization` header, parsed."""

    access_key: str
    signature: bytes


def refused(detail: str) -> QuorumqError:
    return QuorumqError(Error.UNAUTHENTICATED, detail)


def parse_authorization(header: str) -> Authorization:
    """The access key (cut at its first `/`, which other SDKs append a scope after) and the
    signature of a header; raises UNAUTHENTICATED for anything else."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise refused(f"the authorization header must start with {ALGORITHM}")
    pairs: dict[str, str] = {}
    for part in rest.split(","):
        key, equals, value = part.partition("=")
        key = key.strip()
        if not equals or not key or key in pairs:
            raise refused("the authorization header must be comma-separated Credential=, SignedHeaders=, "
                          "Signature= pairs, each once")
        pairs[key] = value.strip()
    signed = pairs.get("SignedHeaders", SIGNED_HEADER)
    if signed.lower() != SIGNED_HEADER:
        raise refused(f"only {SIGNED_HEADER} can be signed, not {signed!r}")
    if "Credential" not in pairs or "Signature" not in pairs:
        raise refused("the authorization header needs Credential= and Signature=")
    access_key = pairs["Credential"].partition("/")[0]
    if not access_key:
        raise refused("no access key: the client has no credentials")
    if not _SIGNATURE.fullmatch(pairs["Signature"]):
        raise refused("the signature must be the HMAC-SHA1 in hex")
    return Authorization(access_key, bytes.fromhex(pairs["Signature"]))


def _digest(secret_key: str, date_time: str) -> bytes:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).digest()


def authorization(credentials: Credentials, date_time: str) -> str:
    """The authorization header for a request whose x-mq-date-time is `date_time`, as the official
    clients write it (lowercase hex)."""
    return (f"{ALGORITHM} Credential={credentials.access_key}, SignedHeaders={SIGNED_HEADER}, "
            f"Signature={_digest(credentials.secret_key, date_time).hex()}")


def date_time_ms(date_time: str) -> int:
    """x-mq-date-time as milliseconds since the epoch, read as UTC; ValueError if it is no such time."""
    parsed = datetime.strptime(date_time, DATE_TIME_FORMAT).replace(tzinfo=timezone.utc)
    return int(parsed.timestamp()) * 1000


def authenticate(header: str | None, date_time: str | None, users: dict[str, User], now_ms: int,
                 window_ms: int = 0) -> User:
    """The enabled user who signed this request; raises UNAUTHENTICATED otherwise. `window_ms`
    above 0: the signed date-time must also lie within it of `now_ms` (wall time)."""
    if not header:
        raise refused("no authorization header")
    claimed = parse_authorization(header)
    if date_time is None:
        raise refused(f"no {SIGNED_HEADER} header, the signed content")
    user = users.get(claimed.access_key)
    # One answer for both, so that a caller cannot learn which access keys exist.
    if user is None or not hmac.compare_digest(_digest(user.password, date_time), claimed.signature):
        raise refused(UNKNOWN_OR_WRONG)
    if user.user_status is not UserStatus.ENABLE:
        raise refused(f"user {claimed.access_key!r} is disabled")
    if window_ms > 0:
        try:
            skew_ms = abs(now_ms - date_time_ms(date_time))
        except ValueError:
            raise refused(f"{SIGNED_HEADER} must be {DATE_TIME_FORMAT} in UTC") from None
        if skew_ms > window_ms:
            raise refused(f"{SIGNED_HEADER} {date_time} is {skew_ms} ms from the server's time, more than "
                          f"the {window_ms} ms allowed")
    return user


def init_user(text: str) -> User | None:
    """initAuthenticationUser, `{"username": .., "password": ..}`: the first Super user; None when empty."""
    return _super_user(text, "username", "password")


def inner_credentials(text: str) -> User | None:
    """innerClientAuthenticationCredentials, `{"accessKey": .., "secretKey": ..}`: the Super user
    cluster members are; None when empty."""
    return _super_user(text, "accessKey", "secretKey")


def _super_user(text: str, name_field: str, password_field: str) -> User | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    shape = f'a JSON object {{"{name_field}": "..", "{password_field}": ".."}} of non-empty strings'
    if not isinstance(value, dict) or set(value) != {name_field, password_field}:
        raise ValueError(f"expected {shape}")
    name, password = value[name_field], value[password_field]
    if not (isinstance(name, str) and isinstance(password, str) and name and password) or "/" in name:
        raise ValueError(f"expected {shape}, the {name_field} without '/'")
    return User(name, password, UserType.SUPER)


def known_users(*users: User | None) -> dict[str, User]:
    """The users by name; ValueError when two of the same name differ."""
    known: dict[str, User] = {}
    for user in users:
        if user is None:
            continue
        if known.setdefault(user.username, user) != user:
            raise ValueError(f"two users named {user.username!r} with different secrets")
    return known
