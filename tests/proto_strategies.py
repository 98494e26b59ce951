"""Hypothesis strategies for any protobuf request type, and what bad input may answer.

Shared by the fuzz tests of the gateway's RPCs and of the remote worker's.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: What bad input may legitimately produce. Never INTERNAL, UNKNOWN, UNAVAILABLE.
CLIENT_ERRORS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.DATA_LOSS,  # only if a log does not verify: the gateway fuzz asserts it never does
}
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


#: A long value (echoed whole into a status it would overflow gRPC's metadata limits).
HUGE_TEXT = "t" * 2**17

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_STRING: st.text(max_size=30)
    | st.sampled_from(["", "warranty_agent", "GOAL_WARRANTY_001", "fuzzer", "{}", "[", "a" * 300, HUGE_TEXT]),
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=40),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32, allow_nan=True, allow_infinity=True),
}
_INTS = st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, -1, 2**31 - 1])
_UINTS = st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 2**32 - 1])
_INT64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, 2**63 - 1])
_UINT64 = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**64 - 1])
for t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
    _SCALARS[t] = _INTS
for t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
    _SCALARS[t] = _UINTS
for t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
    _SCALARS[t] = _INT64
for t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
    _SCALARS[t] = _UINT64


#: What JSON has not, or what a parser lets through (lone surrogates, NaN, overflow, depth).
HOSTILE_JSON = [
    '{"a": "\\ud800"}',
    '{"\\udfff": 1}',
    '["x\\udc00y"]',
    '{"a": NaN}',
    '{"a": [Infinity, -Infinity]}',
    '{"a": 1e999}',
    "[" * 100 + "]" * 100,
    '{"a": "' + HUGE_TEXT + '"}',
    '{"user_id": "u", "n": 1e308}',
]
#: The first this many of :data:`HOSTILE_JSON` are not JSON (or nested too deep): refused.
REFUSED_JSON = 7

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    # surrogates included: json.dumps escapes them (\ud800), as a careless client would send them
    | st.text(st.characters(min_codepoint=0xD000, max_codepoint=0xE100) | st.characters(), max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
#: Text for ``*_json`` fields: JSON objects with hostile values, and hostile samples.
JSON_TEXT = st.dictionaries(st.text(max_size=5), _JSON_VALUES, max_size=4).map(
    lambda v: json.dumps(v, ensure_ascii=True, allow_nan=True)
) | st.sampled_from(HOSTILE_JSON)


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            return st.dictionaries(_field(key, depth), _field(value, depth), max_size=3)
        one = messages_of(field.message_type, depth + 1)
    elif field.type == FieldDescriptor.TYPE_ENUM:
        one = st.sampled_from([v.number for v in field.enum_type.values] + [99])
    elif field.type == FieldDescriptor.TYPE_STRING and field.name.endswith("_json"):
        one = JSON_TEXT
    else:
        one = _SCALARS[field.type]
    return st.lists(one, max_size=3) if field.is_repeated else one


def messages_of(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Random messages of ``descriptor``: every field maybe set, nesting bounded."""
    cls = GetMessageClass(descriptor)
    fields = [] if depth > 2 else list(descriptor.fields)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        msg = cls()
        for f in fields:
            if f.containing_oneof is None and not draw(st.booleans()):
                continue
            if f.containing_oneof is not None and draw(st.integers(0, 3)):
                continue
            value = draw(_field(f, depth))
            if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
                getattr(msg, f.name).update(value)
            elif f.is_repeated:
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    getattr(msg, f.name).extend(value)
                else:
                    getattr(msg, f.name)[:] = value
            elif f.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(msg, f.name).CopyFrom(value)
            else:
                setattr(msg, f.name, value)
        return msg

    return build()
