"""The v5 authentication decision (core/auth.py) over headers as the official clients and other
SDKs write them, and as an attacker would: every refusal is UNAUTHENTICATED with no secret in its
text; and the config keys that name the users."""

import pytest
from rocketmq.v5.util.signature import Signature

from quorumq.config import Config, Kind
from quorumq.core.auth import (
    Credentials,
    User,
    UserStatus,
    UserType,
    authenticate,
    authorization,
    date_time_ms,
    init_user,
    inner_credentials,
    known_users,
)
from quorumq.errors import Error, QuorumqError

AK, SK = "alice", "alice-secret-1"
DATE = "20261128T010203Z"
NOW_MS = date_time_ms(DATE)
GOOD = Signature.sign(SK, DATE)  # what the official Python client sends
USERS = {AK: User(AK, SK, UserType.SUPER), "bob": User("bob", "bob-secret", user_status=UserStatus.DISABLE)}


def header(credential: str = AK, signature: str = GOOD, algorithm: str = "MQv2-HMAC-SHA1") -> str:
    return f"{algorithm} Credential={credential}, SignedHeaders=x-mq-date-time, Signature={signature}"


REFUSED = {
    "no header": (None, DATE, 0),
    "an empty header": ("", DATE, 0),
    "the official client without credentials": (header("", Signature.sign("", DATE)), DATE, 0),
    "another algorithm": (header(algorithm="MQv2-HMAC-SHA256"), DATE, 0),
    "the algorithm in lowercase": (header(algorithm="mqv2-hmac-sha1"), DATE, 0),
    "the algorithm word alone": ("MQv2-HMAC-SHA1", DATE, 0),
    "no Credential": (f"MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature={GOOD}", DATE, 0),
    "no Signature": (f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-date-time", DATE, 0),
    "an empty Signature": (header(signature=""), DATE, 0),
    "a pair without =": (f"MQv2-HMAC-SHA1 Credential={AK}, x-mq-date-time, Signature={GOOD}", DATE, 0),
    "Credential twice": (f"MQv2-HMAC-SHA1 Credential=bob, Credential={AK}, Signature={GOOD}", DATE, 0),
    "another signed header": (f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-request-id, "
                              f"Signature={GOOD}", DATE, 0),
    "an unknown access key": (header("mallory", Signature.sign(SK, DATE)), DATE, 0),
    "an access key differing in case": (header("Alice"), DATE, 0),
    "a disabled user with the right secret": (header("bob", Signature.sign("bob-secret", DATE)), DATE, 0),
    "the wrong secret": (header(signature=Signature.sign("guess", DATE)), DATE, 0),
    "the secret of another user": (header(signature=Signature.sign("bob-secret", DATE)), DATE, 0),
    "the signature of another date-time": (header(), "20261128T010204Z", 0),
    "no x-mq-date-time": (header(), None, 0),
    "a truncated signature": (header(signature=GOOD[:-2]), DATE, 0),
    "a signature one byte longer": (header(signature=GOOD + "00"), DATE, 0),
    "the signature in base64": (header(signature="q83vEjRWeJq83vEjRWeJq83vEjQ="), DATE, 0),
    "non-hex characters": (header(signature="z" * 40), DATE, 0),
    "an access key that is only a suffix": (header(f"/{AK}"), DATE, 0),
    "a date-time an hour ahead, window on": (header(), DATE, -3_600_000),
    "a date-time an hour old, window on": (header(), DATE, 3_600_000),
    "a date-time 61 s old, a 60 s window": (header(), DATE, 61_000),
    "an unreadable date-time, window on": (header(signature=Signature.sign(SK, "yesterday")), "yesterday", 0),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused(case):
    authorization, date_time, skew_ms = REFUSED[case]
    window_ms = 60_000 if "window" in case else 0
    with pytest.raises(QuorumqError) as caught:
        authenticate(authorization, date_time, USERS, NOW_MS + skew_ms, window_ms)
    assert caught.value.error is Error.UNAUTHENTICATED
    assert SK not in str(caught.value) and "bob-secret" not in str(caught.value)


ACCEPTED = {
    "as the official Python client signs": header(),
    "uppercase hex, as other SDKs send": header(signature=GOOD.upper()),
    "an access key with a /suffix": header(f"{AK}/20261128/cn-hangzhou/rocketmq"),
    "extra spaces everywhere": f"  MQv2-HMAC-SHA1   Credential = {AK} ,SignedHeaders= x-mq-date-time ,  "
                               f"Signature =  {GOOD}  ",
    "no spaces after the commas": f"MQv2-HMAC-SHA1 Credential={AK},SignedHeaders=x-mq-date-time,Signature={GOOD}",
    "no SignedHeaders": f"MQv2-HMAC-SHA1 Credential={AK}, Signature={GOOD}",
    "the pairs in another order": f"MQv2-HMAC-SHA1 Signature={GOOD}, Credential={AK}",
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted(case):
    assert authenticate(ACCEPTED[case], DATE, USERS, NOW_MS) is USERS[AK]


@pytest.mark.parametrize("skew_ms", [-3_600_000, -60_000, 0, 60_000, 8 * 3_600_000, 10**12])
def test_without_a_window_the_date_time_is_only_signed(skew_ms):
    """The official Python client writes its local time with a Z: any skew passes with the window off."""
    assert authenticate(header(), DATE, USERS, NOW_MS + skew_ms) is USERS[AK]
    odd = "local time, whatever the client writes"
    assert authenticate(header(signature=Signature.sign(SK, odd)), odd, USERS, NOW_MS) is USERS[AK]


@pytest.mark.parametrize("skew_ms", [-60_000, -1, 0, 999, 60_000])
def test_within_the_window(skew_ms):
    assert authenticate(header(), DATE, USERS, NOW_MS + skew_ms, 60_000) is USERS[AK]


def test_quorumqs_client_signs_as_the_official_one():
    credentials = Credentials(AK, SK)
    assert authorization(credentials, DATE) == header()
    assert authenticate(authorization(credentials, DATE), DATE, USERS, NOW_MS) is USERS[AK]
    assert SK not in repr(credentials)


def test_date_time_is_read_as_utc():
    assert date_time_ms("19700101T000001Z") == 1000
    with pytest.raises(ValueError):
        date_time_ms("2026-11-28T01:02:03Z")


def test_the_users_the_config_names():
    assert init_user('{"username": "root", "password": "p"}') == User("root", "p", UserType.SUPER)
    assert inner_credentials('{"accessKey": "inner", "secretKey": "s"}') == User("inner", "s", UserType.SUPER)
    assert init_user("") is None and inner_credentials("  ") is None
    assert "s3cr3t" not in repr(init_user('{"username": "root", "password": "s3cr3t"}'))


@pytest.mark.parametrize("text", ['{"username": "root"}', '{"username": "root", "password": ""}',
                                  '{"username": "", "password": "p"}', '{"username": 1, "password": "p"}',
                                  '{"accessKey": "root", "secretKey": "p"}', '["root", "p"]', "root:p",
                                  '{"username": "a/b", "password": "p"}',
                                  '{"username": "root", "password": "p", "userType": "Normal"}'])
def test_a_bad_init_user_is_refused(text):
    with pytest.raises(ValueError):
        init_user(text)


def test_two_users_of_one_name_must_agree():
    assert known_users(User("a", "x"), None, User("a", "x")) == {"a": User("a", "x")}
    with pytest.raises(ValueError):
        known_users(User("a", "x"), User("a", "y"))


INIT = '{"username": "root", "password": "root-secret"}'
INNER = '{"accessKey": "inner", "secretKey": "inner-secret"}'


@pytest.mark.parametrize("kind", [kind for kind in Kind if kind is not Kind.PROXY])
def test_every_kind_knows_the_keys(kind):
    values = {"authenticationEnabled": "true", "initAuthenticationUser": INIT,
              "innerClientAuthenticationCredentials": INNER, "authenticationDateTimeWindowMillis": "60000"}
    config = Config(kind, values)
    assert set(config.users()) == {"root", "inner"}
    shown = config.as_strings()
    assert shown["initAuthenticationUser"] == shown["innerClientAuthenticationCredentials"] == "******"
    assert "root-secret" not in str(shown) and "inner-secret" not in str(shown)
    assert Config(kind, {}).as_strings()["authenticationEnabled"] == "false"


def test_a_proxy_checks_no_signature_and_signs_with_the_inner_credentials(caplog):
    config = Config(Kind.PROXY, {"namesrvAddr": "127.0.0.1:9876", "authenticationEnabled": "true",
                                 "innerClientAuthenticationCredentials": INNER})
    assert config.inner_credentials().access_key == "inner"
    assert "authenticationEnabled" not in config.as_strings()
    assert "does not use: authenticationEnabled" in caplog.text


@pytest.mark.parametrize("values, named", [
    ({"authenticationEnabled": "true"}, "authenticationEnabled"),
    ({"authenticationEnabled": "true", "initAuthenticationUser": INIT}, "innerClientAuthenticationCredentials"),
    ({"initAuthenticationUser": "{username: root}"}, "initAuthenticationUser"),
    ({"innerClientAuthenticationCredentials": INIT}, "innerClientAuthenticationCredentials"),
    ({"initAuthenticationUser": INIT,
      "innerClientAuthenticationCredentials": '{"accessKey": "root", "secretKey": "other"}'}, "initAuthenticationUser"),
    ({"authenticationDateTimeWindowMillis": "-1"}, "authenticationDateTimeWindowMillis"),
    ({"aclEnable": "true"}, "authenticationEnabled"),
    ({"aclEnable": "false"}, "ACL 1.0"),
])
def test_config_errors_name_the_key(values, named):
    for kind in (Kind.NAMESRV, Kind.BROKER, Kind.CONTROLLER):  # a proxy checks no signature
        with pytest.raises(QuorumqError) as caught:
            Config(kind, values)
        assert caught.value.error is Error.CONFIG_INVALID
        assert named in str(caught.value)
        assert "root-secret" not in str(caught.value)
