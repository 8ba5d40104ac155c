"""The rules a message must keep, as pure checks both sides share: a broker and a proxy apply them
to what a v5 client sends (protocol/messages.py), quorumq's producer to what it encodes itself, so
both store the same properties for the same message. A broken rule raises the catalogue error
naming it.
"""

import re
from typing import Mapping, Sequence

from quorumq import limits
from quorumq.core import properties
from quorumq.errors import Error, QuorumqError

PROPERTY_SEPARATORS = ("\x01", "\x02")

_NAME = re.compile(limits.NAME_PATTERN)
_checked_names: set[str] = set()  # names that passed: the rule is the same for topics and groups


def quoted(text: str) -> str:
    """`text` as an error quotes it: escaped, and cut at QUOTED_TEXT_MAX characters with an ellipsis."""
    if len(text) <= limits.QUOTED_TEXT_MAX:
        return repr(text)
    return f"{text[:limits.QUOTED_TEXT_MAX]!r}... ({len(text)} characters)"


def check_name(name: str, error: Error, what: str, length_max: int = limits.NAME_LENGTH_MAX) -> str:
    if len(name) <= length_max and name in _checked_names:
        return name
    if not name or len(name) > length_max or not _NAME.fullmatch(name):  # `$` passes a final newline
        raise QuorumqError(error, f"{what} {quoted(name)} must be 1..{length_max} characters of %|a-zA-Z0-9_-")
    if len(_checked_names) >= limits.TOPICS_MAX:
        _checked_names.clear()
    _checked_names.add(name)
    return name


def check_group_name(name: str) -> str:
    """A consumer group's name: short enough for its DLQ topic's name (limits.GROUP_NAME_LENGTH_MAX)."""
    return check_name(name, Error.ILLEGAL_CONSUMER_GROUP, "consumer group", limits.GROUP_NAME_LENGTH_MAX)


def check_body(body: bytes, max_body_bytes: int) -> None:
    if not body:
        raise QuorumqError(Error.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body_bytes:
        raise QuorumqError(Error.MESSAGE_BODY_TOO_LARGE,
                           f"body of {len(body)} bytes exceeds maxMessageSize={max_body_bytes}")


def stored_properties(message_id: str, user: Mapping[str, str], tag: str | None, keys: Sequence[str],
                      gzip: bool = False, message_group: str | None = None) -> dict[str, str]:
    """The properties stored with a message, in the order the broker stores them, after checking
    every rule on the message id, user properties, tag, keys and message group (a FIFO message)."""
    if not message_id or len(message_id) > limits.KEY_LENGTH_MAX:
        raise QuorumqError(Error.ILLEGAL_MESSAGE_ID, "message id is missing or too long")
    stored = {properties.MESSAGE_ID: message_id}
    if user:
        _add_user_properties(stored, user)
    if tag is not None:
        stored[properties.TAGS] = _checked_tag(tag)
    if keys:
        stored[properties.KEYS] = _checked_keys(keys)
    if gzip:
        stored[properties.BODY_ENCODING] = "GZIP"
    if message_group is not None:
        stored[properties.MESSAGE_GROUP] = check_message_group(message_group)
    return stored


def check_message_group(group: str) -> str:
    """A FIFO message's group: not blank, no control characters (Java's isISOControl, as RocketMQ's
    proxy checks), at most MESSAGE_GROUP_LENGTH_MAX characters."""
    if not group.strip():
        raise QuorumqError(Error.ILLEGAL_MESSAGE_GROUP, "message group is blank")
    if len(group) > limits.MESSAGE_GROUP_LENGTH_MAX:
        raise QuorumqError(Error.ILLEGAL_MESSAGE_GROUP, f"message group of {len(group)} characters exceeds "
                                                        f"{limits.MESSAGE_GROUP_LENGTH_MAX}")
    if any(char < " " or "\x7f" <= char <= "\x9f" for char in group):
        raise QuorumqError(Error.ILLEGAL_MESSAGE_GROUP, f"message group {quoted(group)} contains a control character")
    return group


def _check_text(value: str, limit: int, error: Error, what: str) -> None:
    if len(value) > limit or any(sep in value for sep in PROPERTY_SEPARATORS):
        raise QuorumqError(error, f"{what} must be at most {limit} characters without control separators")


def _add_user_properties(stored: dict[str, str], user: Mapping[str, str]) -> None:
    if len(user) + len(stored) > limits.PROPERTY_COUNT_MAX:
        raise QuorumqError(Error.MESSAGE_PROPERTIES_TOO_LARGE, f"more than {limits.PROPERTY_COUNT_MAX} properties")
    total = 0
    # Sorted: a protobuf map iterates in no fixed order, and equal messages must be equal bytes.
    for key, value in sorted(user.items()):
        if not key or key in properties.RESERVED:
            raise QuorumqError(Error.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {quoted(key)} is reserved or empty")
        _check_text(key, limits.KEY_LENGTH_MAX, Error.ILLEGAL_MESSAGE_PROPERTY_KEY, "a property key")
        _check_text(value, limits.PROPERTIES_BYTES_MAX, Error.ILLEGAL_MESSAGE_PROPERTY_KEY, "a property value")
        total += len(key) + len(value) + 2
        stored[key] = value
    if total > limits.PROPERTIES_BYTES_MAX - limits.RESERVED_PROPERTIES_BYTES_MAX:
        raise QuorumqError(Error.MESSAGE_PROPERTIES_TOO_LARGE,
                           f"user properties exceed "
                           f"{limits.PROPERTIES_BYTES_MAX - limits.RESERVED_PROPERTIES_BYTES_MAX} bytes")


def _checked_tag(tag: str) -> str:
    if not tag.strip() or "|" in tag:
        raise QuorumqError(Error.ILLEGAL_MESSAGE_TAG, f"tag {quoted(tag)} must be non-blank without '|'")
    _check_text(tag, limits.TAG_LENGTH_MAX, Error.ILLEGAL_MESSAGE_TAG, "a tag")
    return tag


def _checked_keys(keys: Sequence[str]) -> str:
    if len(keys) > limits.KEYS_PER_MESSAGE_MAX:
        raise QuorumqError(Error.ILLEGAL_MESSAGE_KEY, f"more than {limits.KEYS_PER_MESSAGE_MAX} keys")
    for key in keys:
        if not key.strip() or " " in key:
            raise QuorumqError(Error.ILLEGAL_MESSAGE_KEY, f"key {quoted(key)} must be non-blank without spaces")
        _check_text(key, limits.KEY_LENGTH_MAX, Error.ILLEGAL_MESSAGE_KEY, "a key")
    return " ".join(keys)
