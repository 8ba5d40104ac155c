"""The HA port's challenge-response (issue 22), sans I/O: a slave proves it holds the cluster's
inner credentials (innerClientAuthenticationCredentials) before the master sends a byte of its log.

With authenticationEnabled, the master speaks first, on every accepted connection:

    CHALLENGE   magic u32 "QQC1" | nonce (32 random bytes, new for each connection)

and the slave answers with an ANSWER, then its HANDSHAKE (core/replication_frames.py):

    ANSWER      magic u32 "QQA1" | access_key_length u8 | access key (UTF-8) | proof (32 bytes)

    proof = HMAC-SHA256(secret key, DOMAIN | nonce | the HANDSHAKE frame's bytes)

The proof binds the nonce (an answer recorded from an earlier connection fails on a new one) and
every handshake field (who the slave says it is, its offset, epoch and flags: an answer cannot be
moved to another handshake). The master takes only the inner credentials' access key, recomputes
the proof with their secret and compares in constant time. Secrets are never in an error's text.
"""

import hashlib
import hmac
import struct

from quorumq.core.auth import Credentials, User
from quorumq.core.replication_frames import Handshake, LocalProtocolError, RemoteProtocolError, encode_frame

CHALLENGE_MAGIC = 0x51514331  # "QQC1"
ANSWER_MAGIC = 0x51514131  # "QQA1"
NONCE_BYTES = 32
PROOF_BYTES = 32  # SHA-256
DOMAIN = b"quorumq-ha-handshake-1"  # a proof made here is good for nothing else
_CHALLENGE = struct.Struct(f">I{NONCE_BYTES}s")
_ANSWER_HEAD = struct.Struct(">IB")  # magic, access key length
_ACCESS_KEY_BYTES_MAX = 255  # what access_key_length holds
CHALLENGE_BYTES = _CHALLENGE.size


def encode_challenge(nonce: bytes) -> bytes:
    if type(nonce) is not bytes or len(nonce) != NONCE_BYTES:
        raise LocalProtocolError(f"a nonce has {NONCE_BYTES} bytes")
    return _CHALLENGE.pack(CHALLENGE_MAGIC, nonce)


def decode_challenge(buffer: bytes) -> bytes | None:
    """The nonce of the CHALLENGE at the start of `buffer`; None until all of it is there."""
    if len(buffer) >= 4 and int.from_bytes(buffer[:4], "big") != CHALLENGE_MAGIC:
        raise RemoteProtocolError("the master sent no challenge (is authenticationEnabled on for this slave "
                                  "but off for the master?)")
    if len(buffer) < _CHALLENGE.size:
        return None
    return _CHALLENGE.unpack_from(buffer)[1]


def proof(secret_key: str, nonce: bytes, handshake: Handshake) -> bytes:
    return hmac.new(secret_key.encode(), DOMAIN + nonce + encode_frame(handshake), hashlib.sha256).digest()


def encode_answer(credentials: Credentials, nonce: bytes, handshake: Handshake) -> bytes:
    access_key = credentials.access_key.encode()
    if not 0 < len(access_key) <= _ACCESS_KEY_BYTES_MAX:
        raise LocalProtocolError(f"an access key has 1..{_ACCESS_KEY_BYTES_MAX} bytes")
    return (_ANSWER_HEAD.pack(ANSWER_MAGIC, len(access_key)) + access_key
            + proof(credentials.secret_key, nonce, handshake))


def decode_answer(buffer: bytes) -> tuple[str, bytes, int] | None:
    """(access key, proof, bytes used) of the ANSWER at the start of `buffer`; None until all of
    it is there. Raises RemoteProtocolError for what no slave sends."""
    if len(buffer) < _ANSWER_HEAD.size:
        return None
    magic, key_length = _ANSWER_HEAD.unpack_from(buffer)
    if magic != ANSWER_MAGIC:
        raise RemoteProtocolError(f"no answer to the challenge (magic {magic:#010x})")
    end = _ANSWER_HEAD.size + key_length + PROOF_BYTES
    if key_length == 0:
        raise RemoteProtocolError("an answer with an empty access key")
    if len(buffer) < end:
        return None
    try:
        access_key = bytes(buffer[_ANSWER_HEAD.size:_ANSWER_HEAD.size + key_length]).decode()
    except UnicodeDecodeError:
        raise RemoteProtocolError("the answer's access key is not UTF-8") from None
    return access_key, bytes(buffer[end - PROOF_BYTES:end]), end


def refusal(inner: User | None, nonce: bytes, access_key: str, slave_proof: bytes,
            handshake: Handshake) -> str | None:
    """Why the master refuses this answer to its `nonce`, or None when the slave holds `inner`."""
    if inner is None:
        return "this master has no innerClientAuthenticationCredentials to check a slave against"
    if access_key != inner.username:
        return f"access key {access_key!r} is not the cluster's inner credentials"
    if not hmac.compare_digest(slave_proof, proof(inner.password, nonce, handshake)):
        return f"wrong proof for access key {access_key!r} (a wrong secret, or an answer to another challenge)"
    return None
