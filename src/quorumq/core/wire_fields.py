"""Counting the fields of a protobuf message in its wire bytes, without parsing the message.

protobuf builds an object for every entry of a repeated field, about 75 bytes of memory from 2
bytes on the wire, so a request is counted before it is parsed (listen.py, RequestBound). The walk
reads only tags and lengths and stops past given counts, so its cost is bounded by those counts,
not by the size of the request.
"""

from collections.abc import Mapping

VARINT, I64, LEN, SGROUP, EGROUP, I32 = range(6)  # protobuf's wire types; 6 and 7 are none
FIELD_NUMBER_MAX = (1 << 29) - 1
VARINT_BYTES_MAX = 10
FIXED_BYTES = {I64: 8, I32: 4}

# The submessages a walk enters: field number -> the submessages it enters within that one.
Shape = Mapping[int, "Shape"]


class WireError(ValueError):
    """The bytes are not a protobuf message: the parser would refuse them too."""


def _varint(data: bytes, position: int, end: int) -> tuple[int, int]:
    """The varint at `position`, which must end before `end`, and the position after it."""
    value = 0
    for index in range(VARINT_BYTES_MAX):
        if position + index >= end:
            raise WireError(f"a varint at byte {position} is cut short")
        byte = data[position + index]
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value, position + index + 1
    raise WireError(f"a varint at byte {position} is longer than {VARINT_BYTES_MAX} bytes")


def count_field(data: bytes, number: int, count_max: int, fields_max: int, enter: Shape | None = None,
                entry_fields_max: int = 0) -> int | None:
    """How many length-delimited fields numbered `number` the message in `data` holds at its top
    level (a repeated message or string field's entries), counting no further than count_max + 1.

    None as soon as the walk passes `fields_max` fields at the top level (of any number, a group's
    included), or `entry_fields_max` fields within one top-level field it enters: the walk enters
    the submessages `enter` names, and within them those it names in turn (each occurrence: the
    parser merges repeated occurrences of a singular message). So the walk reads at most
    fields_max x (1 + entry_fields_max) fields, whatever the size of `data`.

    Raises WireError where the bytes are not a message: a varint or value cut short (a
    submessage's end cuts too), field number 0 or above 2**29 - 1, wire type 6 or 7, a group's end
    without its start or its start without its end. A field of that number with another wire type
    is not counted nor entered: protobuf's parser keeps it as an unknown field, as it keeps groups
    (proto3 has none, but the parser accepts them)."""
    position = count = top_fields = entry_fields = 0
    end, shape = len(data), enter or {}
    groups: list[int] = []  # the numbers of the groups open in the current message, innermost last
    outer: list[tuple[int, Shape, list[int]]] = []  # the messages the walk is within: end, shape, groups
    while True:
        if position == end:
            if groups:
                raise WireError(f"group {groups[-1]} has no end")
            if not outer:
                return count
            end, shape, groups = outer.pop()
            continue
        if outer:
            entry_fields += 1
            if entry_fields > entry_fields_max:
                return None
        else:
            top_fields += 1
            if top_fields > fields_max:
                return None
        start = position
        tag, position = _varint(data, position, end)
        field, wire_type = tag >> 3, tag & 7
        if not 0 < field <= FIELD_NUMBER_MAX:
            raise WireError(f"field number {field} at byte {start}")
        if wire_type == VARINT:
            _, position = _varint(data, position, end)
        elif wire_type in FIXED_BYTES:
            position += FIXED_BYTES[wire_type]
        elif wire_type == LEN:
            length, position = _varint(data, position, end)
            if position + length > end:
                raise WireError(f"field {field} at byte {start} runs past the end")
            if field == number and not outer and not groups:
                count += 1
                if count > count_max:
                    return count
            if field in shape and not groups:
                if not outer:
                    entry_fields = 0
                outer.append((end, shape, groups))
                end, shape, groups = position + length, shape[field], []
            else:
                position += length
        elif wire_type == SGROUP:
            groups.append(field)
        elif wire_type == EGROUP:
            if not groups or groups.pop() != field:
                raise WireError(f"the end of group {field} at byte {start} ends no group")
        else:
            raise WireError(f"wire type {wire_type} at byte {start}")
        if position > end:
            raise WireError(f"field {field} at byte {start} runs past the end")
