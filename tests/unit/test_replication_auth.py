"""The HA port's challenge-response (core/replication_auth.py): what a holder of the inner
credentials answers is accepted, and a wrong secret, another nonce, a replayed answer, another
handshake, another access key and damaged frames are refused."""

import pytest

from quorumq.core.auth import Credentials, User, UserType
from quorumq.core.replication_auth import (
    CHALLENGE_BYTES,
    NONCE_BYTES,
    decode_answer,
    decode_challenge,
    encode_answer,
    encode_challenge,
    refusal,
)
from quorumq.core.replication_frames import Handshake, LocalProtocolError, RemoteProtocolError

INNER = User("cluster", "cluster-secret", UserType.SUPER)
HANDSHAKE = Handshake(1, "DefaultCluster", "broker-a", 4096, 2, False)
NONCE = bytes(range(NONCE_BYTES))
OTHER_NONCE = bytes(reversed(range(NONCE_BYTES)))


def answered(credentials: Credentials, nonce: bytes = NONCE, handshake: Handshake = HANDSHAKE) -> tuple[str, bytes]:
    """What the master decodes from a slave's answer to `nonce`."""
    frame = encode_answer(credentials, nonce, handshake)
    access_key, proof, used = decode_answer(frame + b"handshake follows")
    assert used == len(frame)
    return access_key, proof


def test_the_inner_credentials_answer_the_challenge():
    assert decode_challenge(encode_challenge(NONCE)) == NONCE
    assert refusal(INNER, NONCE, *answered(Credentials("cluster", "cluster-secret")), HANDSHAKE) is None


@pytest.mark.parametrize("credentials, nonce, handshake, reason", [
    (Credentials("cluster", "guessed"), NONCE, HANDSHAKE, "wrong proof for access key 'cluster'"),
    (Credentials("app", "cluster-secret"), NONCE, HANDSHAKE, "access key 'app' is not the cluster's inner"),
    # An answer recorded on another connection (another nonce), replayed on this one.
    (Credentials("cluster", "cluster-secret"), OTHER_NONCE, HANDSHAKE, "wrong proof"),
    # A good answer moved to another handshake: another broker id, offset or flag.
    (Credentials("cluster", "cluster-secret"), NONCE, Handshake(2, "DefaultCluster", "broker-a", 4096, 2, False),
     "wrong proof"),
    (Credentials("cluster", "cluster-secret"), NONCE, Handshake(1, "DefaultCluster", "broker-a", 0, 2, False),
     "wrong proof"),
    (Credentials("cluster", "cluster-secret"), NONCE, Handshake(1, "DefaultCluster", "broker-a", 4096, 2, True),
     "wrong proof"),
], ids=["wrong-secret", "wrong-access-key", "replayed-answer", "other-broker-id", "other-offset", "other-flags"])
def test_what_does_not_prove_the_inner_credentials_is_refused(credentials, nonce, handshake, reason):
    why = refusal(INNER, NONCE, *answered(credentials, nonce, handshake), HANDSHAKE)
    assert why is not None and reason in why
    assert INNER.password not in why and "guessed" not in why


def test_a_master_without_inner_credentials_refuses_every_slave():
    why = refusal(None, NONCE, *answered(Credentials("cluster", "cluster-secret")), HANDSHAKE)
    assert why is not None and "innerClientAuthenticationCredentials" in why


def test_frames_arrive_in_pieces_and_damage_is_refused():
    challenge = encode_challenge(NONCE)
    assert len(challenge) == CHALLENGE_BYTES
    for cut in range(CHALLENGE_BYTES):
        assert decode_challenge(challenge[:cut]) is None
    answer = encode_answer(Credentials("cluster", "cluster-secret"), NONCE, HANDSHAKE)
    for cut in range(len(answer)):  # a truncated answer is waited for, never decoded short
        assert decode_answer(answer[:cut]) is None
    with pytest.raises(RemoteProtocolError, match="no challenge"):
        decode_challenge(b"QQR1" + bytes(40))  # a frame of the stream where the challenge belongs
    with pytest.raises(RemoteProtocolError, match="no answer"):
        decode_answer(bytes(40))  # a handshake sent without an answer starts with its own magic
    with pytest.raises(RemoteProtocolError, match="empty access key"):
        decode_answer(answer[:4] + b"\x00" + answer[5:])
    with pytest.raises(RemoteProtocolError, match="UTF-8"):
        decode_answer(answer[:5] + b"\xff" + answer[6:])
    # A proof cut short takes the next bytes (the handshake's) as its end, and fails.
    access_key, proof, _ = decode_answer(answer[:-1] + b"Q")
    assert refusal(INNER, NONCE, access_key, proof, HANDSHAKE) is not None


def test_this_side_cannot_send_what_the_peer_would_refuse():
    with pytest.raises(LocalProtocolError):
        encode_challenge(NONCE[:-1])
    with pytest.raises(LocalProtocolError):
        encode_answer(Credentials("k" * 256, "s"), NONCE, HANDSHAKE)
