"""The decode guard's shortcuts answer as the plain forms they replace: its test for JSON text
worth parsing, and the guarded handler it keeps per method instead of building one per call."""

from __future__ import annotations

import re
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware._proto.agency.v1 import agency_pb2
from middleware.server.grpc_api.decode import DecodeGuardInterceptor, _suspect, value_problems

#: The one-regex form the guard used before (the reference :func:`_suspect` must agree with).
SUSPECT = re.compile(r"\\u[dD][89abcdefABCDEF]|NaN|Infinity|[eE][+]?0*\d{3}")

_PIECES = st.sampled_from(
    [
        "\\u",
        "\\ud8",
        "\\uDF",
        "\\ue0",
        "d",
        "D",
        "8",
        "NaN",
        "Na",
        "Infinity",
        "Infinit",
        "e",
        "E",
        "+",
        "0",
        "7",
    ]
)
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=12).map("".join)


@given(_TEXT)
def test_suspect_agrees_with_the_one_regex_form(text: str) -> None:
    assert _suspect(text) == (SUSPECT.search(text) is not None)


@pytest.mark.parametrize("text", ['{"a": 1e999}', '{"a": "\\ud800"}', '{"a": NaN}', "[-Infinity]", "1E+0400"])
def test_suspect_finds_each_kind(text: str) -> None:
    assert _suspect(text)


def test_value_problems_names_nested_and_repeated_fields() -> None:
    request = agency_pb2.SubmitRequest(
        text="x",
        input_json='{"a": NaN}',
        steps=[agency_pb2.TaskStep(name="a"), agency_pb2.TaskStep(name="b", input_json='{"b": 1e999}')],
    )
    assert [p.field for p in value_problems(request)] == ["input_json", "steps[1].input_json"]


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def _handler() -> grpc.RpcMethodHandler:
    async def behaviour(request: Any, context: Any) -> Any:
        return request

    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=agency_pb2.SubmitRequest.FromString,
        response_serializer=agency_pb2.Outcome.SerializeToString,
    )


async def test_the_guarded_handler_is_built_once_per_method_and_server_handler() -> None:
    guard = DecodeGuardInterceptor()
    served = {"/a": _handler(), "/b": _handler()}

    async def continuation(details: Any) -> grpc.RpcMethodHandler:
        return served[details.method]

    first = await guard.intercept_service(continuation, _Details("/a"))
    assert first is not served["/a"]  # guarded
    assert await guard.intercept_service(continuation, _Details("/a")) is first
    other = await guard.intercept_service(continuation, _Details("/b"))
    assert other is not first
    served["/a"] = _handler()  # the server answers the method with another handler now
    again = await guard.intercept_service(continuation, _Details("/a"))
    assert again is not first
    malformed = again.request_deserializer(b"\xff\xff")
    assert type(malformed).__name__ == "_Malformed"  # still guarded
