"""The cluster protocol's signature (core/cluster_auth.py): a signed call is accepted once; every
tampered, stale, replayed or malformed one is refused with UNAUTHENTICATED and no secret in its
text, and refused calls use no room among the nonces."""

import base64
import hashlib
import hmac

import pytest
from blake3 import blake3

from quorumq import limits
from quorumq.core.auth import Credentials, User, UserStatus, UserType
from quorumq.core.cluster_auth import (
    ACCESS_KEY_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIME_HEADER,
    Nonces,
    authenticate,
    canonical,
    sign,
)
from quorumq.errors import Error, QuorumqError

AK, SK = "cluster", "cluster-secret-1"
METHOD = "/quorumq.cluster.NameServer/RegisterBroker"
BODY = b"\n\x08broker-a\x10\x00"
NOW_MS = 1_795_000_000_000
NONCE = "0123456789abcdef0123456789abcdef"
WINDOW_MS = limits.CLUSTER_SIGNATURE_WINDOW_MS
CREDENTIALS = Credentials(AK, SK)
USERS = {AK: User(AK, SK, UserType.SUPER), "bob": User("bob", "bob-secret", user_status=UserStatus.DISABLE)}


def signed(credentials: Credentials = CREDENTIALS, method: str = METHOD, body: bytes = BODY,
           time_ms: int = NOW_MS, nonce: str = NONCE, **changes: str | None) -> dict[str, str]:
    """The metadata of a call signed with these values, then with `changes` applied (None: removed)."""
    metadata = dict(sign(credentials, method, body, time_ms, nonce))
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            del metadata[key]
        else:
            metadata[key] = value
    return metadata


GOOD = signed()
SIGNATURE = GOOD[SIGNATURE_HEADER]
RAW = hmac.new(SK.encode(), canonical(METHOD, AK, NOW_MS, NONCE, BODY), hashlib.sha256).digest()

# name -> (metadata, the method and the body the server sees)
REFUSED = {
    "no metadata": ({}, METHOD, BODY),
    "no access key": (signed(x_quorumq_access_key=None), METHOD, BODY),
    "no time": (signed(x_quorumq_time_ms=None), METHOD, BODY),
    "no nonce": (signed(x_quorumq_nonce=None), METHOD, BODY),
    "no signature": (signed(x_quorumq_signature=None), METHOD, BODY),
    "an empty access key": (signed(Credentials("", SK)), METHOD, BODY),
    "the body tampered": (GOOD, METHOD, BODY + b"\x18\x01"),
    "an empty body for a signed one": (GOOD, METHOD, b""),
    "another method": (GOOD, "/quorumq.cluster.NameServer/UnregisterBroker", BODY),
    "the method in lowercase": (GOOD, METHOD.lower(), BODY),
    "the method without its package": (GOOD, "/NameServer/RegisterBroker", BODY),
    "another access key, same signature": ({**GOOD, ACCESS_KEY_HEADER: "bob"}, METHOD, BODY),
    "the access key in another case": (signed(Credentials("Cluster", SK)), METHOD, BODY),
    "an unknown access key": (signed(Credentials("mallory", SK)), METHOD, BODY),
    "the wrong secret": (signed(Credentials(AK, "guess")), METHOD, BODY),
    "the secret of another user": (signed(Credentials(AK, "bob-secret")), METHOD, BODY),
    "a disabled user with its secret": (signed(Credentials("bob", "bob-secret")), METHOD, BODY),
    "the time changed after signing": ({**GOOD, TIME_HEADER: str(NOW_MS + 1)}, METHOD, BODY),
    "the nonce changed after signing": ({**GOOD, NONCE_HEADER: "f" * 32}, METHOD, BODY),
    "a time past the window": (signed(time_ms=NOW_MS - WINDOW_MS - 1), METHOD, BODY),
    "a time ahead past the window": (signed(time_ms=NOW_MS + WINDOW_MS + 1), METHOD, BODY),
    "a time in seconds": (signed(time_ms=NOW_MS // 1000), METHOD, BODY),
    "a time with a sign": (signed(x_quorumq_time_ms=f"+{NOW_MS}"), METHOD, BODY),
    "a time padded with a zero": (signed(x_quorumq_time_ms=f"0{NOW_MS}"), METHOD, BODY),
    "a time with a space": (signed(x_quorumq_time_ms=f" {NOW_MS}"), METHOD, BODY),
    "a time as a date": (signed(x_quorumq_time_ms="20261128T010203Z"), METHOD, BODY),
    "a short nonce": (signed(nonce=NONCE[:-2]), METHOD, BODY),
    "a nonce in uppercase": (signed(nonce=NONCE.upper()), METHOD, BODY),
    "a nonce that is not hex": (signed(nonce="g" * 32), METHOD, BODY),
    "the signature in base64": (signed(x_quorumq_signature=base64.b64encode(RAW).decode()), METHOD, BODY),
    "the signature in uppercase hex": (signed(x_quorumq_signature=SIGNATURE.upper()), METHOD, BODY),
    "the signature truncated": (signed(x_quorumq_signature=SIGNATURE[:-2]), METHOD, BODY),
    "the signature one byte longer": (signed(x_quorumq_signature=SIGNATURE + "00"), METHOD, BODY),
    "the signature with a space": (signed(x_quorumq_signature=f"{SIGNATURE} "), METHOD, BODY),
    "an HMAC-SHA1 (the v5 scheme's)": (signed(x_quorumq_signature=hmac.new(
        SK.encode(), canonical(METHOD, AK, NOW_MS, NONCE, BODY), hashlib.sha1).hexdigest()), METHOD, BODY),
    "a plain SHA-256 of the canonical string": (signed(x_quorumq_signature=hashlib.sha256(
        canonical(METHOD, AK, NOW_MS, NONCE, BODY)).hexdigest()), METHOD, BODY),
    "the v5 authorization header instead": ({"authorization": "MQv2-HMAC-SHA1 Credential=cluster, "
                                             "SignedHeaders=x-mq-date-time, Signature=00"}, METHOD, BODY),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused(name: str) -> None:
    metadata, method, body = REFUSED[name]
    nonces = Nonces(WINDOW_MS, 10)
    with pytest.raises(QuorumqError) as refused:
        authenticate(metadata, method, body, USERS, NOW_MS, WINDOW_MS, nonces)
    assert refused.value.error is Error.UNAUTHENTICATED
    assert SK not in str(refused.value) and "bob-secret" not in str(refused.value)
    assert len(nonces) == 0  # a refused call takes no room


def test_accepted_at_the_edges_of_the_window() -> None:
    for time_ms, nonce in ((NOW_MS, NONCE), (NOW_MS - WINDOW_MS, "a" * 32), (NOW_MS + WINDOW_MS, "b" * 32)):
        user = authenticate(signed(time_ms=time_ms, nonce=nonce), METHOD, BODY, USERS, NOW_MS, WINDOW_MS,
                            Nonces(WINDOW_MS, 10))
        assert user.username == AK


def test_a_replay_is_refused_while_its_time_is_in_the_window() -> None:
    nonces = Nonces(WINDOW_MS, 10)
    authenticate(GOOD, METHOD, BODY, USERS, NOW_MS, WINDOW_MS, nonces)
    for later_ms in (NOW_MS, NOW_MS + 1, NOW_MS + WINDOW_MS):
        with pytest.raises(QuorumqError, match="already used") as replayed:
            authenticate(GOOD, METHOD, BODY, USERS, later_ms, WINDOW_MS, nonces)
        assert replayed.value.error is Error.UNAUTHENTICATED
    with pytest.raises(QuorumqError, match="more than"):  # past the window the time check refuses it
        authenticate(GOOD, METHOD, BODY, USERS, NOW_MS + WINDOW_MS + 1, WINDOW_MS, nonces)
    # the same nonce on another method is a replay too: a nonce is used once
    with pytest.raises(QuorumqError, match="already used"):
        authenticate(signed(method="/x/Y"), "/x/Y", BODY, USERS, NOW_MS, WINDOW_MS, nonces)


def test_nonces_refuse_when_full_and_forget_only_expired_ones() -> None:
    nonces = Nonces(WINDOW_MS, 2)
    nonces.accept("a" * 32, NOW_MS + WINDOW_MS, NOW_MS)  # a client's clock ahead: kept longest
    nonces.accept("b" * 32, NOW_MS, NOW_MS)
    with pytest.raises(QuorumqError) as full:
        nonces.accept("c" * 32, NOW_MS, NOW_MS + WINDOW_MS + 1)  # "b" expired, behind "a"
    assert full.value.error is Error.TOO_MANY_REQUESTS
    nonces.accept("c" * 32, NOW_MS + 2 * WINDOW_MS, NOW_MS + 2 * WINDOW_MS + 1)  # both expired
    assert len(nonces) == 1
    with pytest.raises(QuorumqError, match="already used"):
        nonces.accept("c" * 32, NOW_MS + 2 * WINDOW_MS, NOW_MS + 2 * WINDOW_MS + 1)


def test_the_canonical_string_names_every_signed_part() -> None:
    text = canonical(METHOD, AK, NOW_MS, NONCE, BODY).decode()
    assert text.split("\n") == ["QMQ2-HMAC-SHA256", METHOD, AK, str(NOW_MS), NONCE, blake3(BODY).hexdigest()]
    assert dict(sign(Credentials(AK, SK), METHOD, BODY, NOW_MS, NONCE))[SIGNATURE_HEADER] == RAW.hex()
