"""Bad input never crashes the server: fuzzed, malformed and oversized messages to
every AgencyService / CatalogService / GoalService RPC end in a client error status (never
INTERNAL/UNKNOWN), and the server keeps answering health checks."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from served_in_thread import ServedInThread

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, catalog_pb2, common_pb2, goals_pb2
from middleware.demo import build_demo_agency
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.server import MAX_MESSAGE_BYTES

METHODS = {
    "/agency.v1.AgencyService/Submit": agency_pb2.SubmitRequest,
    "/agency.v1.AgencyService/Route": agency_pb2.RouteRequest,
    "/agency.v1.CatalogService/Register": catalog_pb2.RegisterRequest,
    "/agency.v1.CatalogService/Get": catalog_pb2.GetCapabilityRequest,
    "/agency.v1.CatalogService/Query": catalog_pb2.QueryRequest,
    "/agency.v1.GoalService/RegisterGoal": goals_pb2.RegisterGoalRequest,
    "/agency.v1.GoalService/GetGoal": goals_pb2.GetGoalRequest,
}
#: What bad input may legitimately produce. Never INTERNAL, UNKNOWN, UNAVAILABLE.
CLIENT_ERRORS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Served(ServedInThread):
    """The demo gateway on its own event loop in a thread; tests call it with the sync client."""

    def __init__(self) -> None:
        super().__init__()

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        self.agency = await build_demo_agency(Agency(sleep=no_sleep))
        self.server = build_server(self.agency, "127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:  # type: ignore[override]
        await self.server.stop(0)
        await self.agency.close()


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    with (
        Served() as served,
        grpc.insecure_channel(
            f"127.0.0.1:{served.server.port}", options=[("grpc.max_send_message_length", -1)]
        ) as ch,
    ):
        yield ch
        assert _health(ch) == health_pb2.HealthCheckResponse.SERVING


def _health(ch: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _call(ch: grpc.Channel, method: str, payload: bytes) -> grpc.StatusCode:
    raw = ch.unary_unary(method)  # bytes in, bytes out: no client-side validation
    try:
        raw(payload, timeout=15)
    except grpc.RpcError as err:
        code = err.code()
        assert code in CLIENT_ERRORS, f"{method}: {code} {err.details()}"
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            md = dict(err.trailing_metadata() or ())
            assert md.get("agency-reason") in {"INVALID_INPUT", "SCHEMA_VIOLATION"}, md
        return code
    return grpc.StatusCode.OK


# ------------------------------------------------------------------ strategies
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
json_text = st.one_of(
    st.just(""),
    st.text(max_size=60),  # mostly not JSON
    json_values.map(json.dumps),
    st.sampled_from(["[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000, "1e999999", '"\\ud800"']),
)
names = st.text(max_size=40) | st.sampled_from(["warranty_agent", "ship_replacement", "a" * 300, ""])
steps = st.builds(
    agency_pb2.TaskStep,
    name=names,
    action=names,
    tags=st.lists(names, max_size=3),
    text=names,
    input_json=json_text,
)
submits = st.builds(
    agency_pb2.SubmitRequest,
    task_id=names,
    text=st.text(max_size=200) | st.sampled_from(["replace my shattered screen", "x" * 100_001]),
    goal_json=json_text,
    goal_id=names | st.just("GOAL_WARRANTY_001"),
    input_json=json_text,
    constraints_json=json_text,
    steps=st.lists(steps, max_size=3),
    user_id=names,
    session_id=names,
    trace_id=names,
)
contracts = st.builds(
    common_pb2.CapabilityContract,
    name=names,
    version=st.text(max_size=12) | st.just("1.0.0"),
    description=st.text(max_size=50),
    tags=st.lists(names, max_size=3),
    slo_latency_ms=st.integers(-(2**31), 2**31 - 1),
    can_do=st.lists(names, max_size=3),
    cannot_do=st.lists(names, max_size=3),
    input_schema_json=json_text | st.just('{"type": "nonsense"}') | st.just('{"$ref": "http://x/y"}'),
    output_schema_json=json_text | st.just('{"pattern": "("}'),
    owner=names,
    endpoint=names,
)
messages = {
    "/agency.v1.AgencyService/Submit": submits,
    "/agency.v1.AgencyService/Route": st.builds(
        agency_pb2.RouteRequest, text=names, constraints_json=json_text
    ),
    "/agency.v1.CatalogService/Register": st.builds(
        catalog_pb2.RegisterRequest, contract=contracts, replace=st.booleans()
    ),
    "/agency.v1.CatalogService/Get": st.builds(catalog_pb2.GetCapabilityRequest, key=names),
    "/agency.v1.CatalogService/Query": st.builds(
        catalog_pb2.QueryRequest,
        name=names,
        action=names,
        tags=st.lists(names, max_size=3),
        max_slo_latency_ms=st.integers(-(2**31), 2**31 - 1),
        include_stale=st.booleans(),
    ),
    "/agency.v1.GoalService/RegisterGoal": st.builds(
        goals_pb2.RegisterGoalRequest,
        goal_json=json_text
        | st.builds(
            lambda steps, timeout: json.dumps(
                {
                    "id": "GOAL_FUZZ_1",
                    "description": "d",
                    "verification_steps": steps,
                    "timeout_seconds": timeout,
                }
            ),
            st.lists(st.text(max_size=40) | json_values, max_size=3),
            st.integers(-5, 10**9),
        ),
        replace=st.booleans(),
    ),
    "/agency.v1.GoalService/GetGoal": st.builds(goals_pb2.GetGoalRequest, goal_id=names),
}


# ------------------------------------------------------------------ properties
@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(payload=st.binary(max_size=512))
def test_random_bytes_are_refused_cleanly(channel, method, payload):
    _call(channel, method, payload)


@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(data=st.data())
def test_well_formed_but_hostile_messages_are_refused_cleanly(channel, method, data):
    message = data.draw(messages[method])
    _call(channel, method, message.SerializeToString())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_oversized_and_truncated_messages(channel, method):
    big = b"\x0a" + _varint(MAX_MESSAGE_BYTES) + b"x" * MAX_MESSAGE_BYTES  # field 1, 4 MiB long
    assert _call(channel, method, big) is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _call(channel, method, b"\x0a\xff\xff\xff\xff\x0f") is grpc.StatusCode.INVALID_ARGUMENT
    assert _call(channel, method, b"\x0a\x03\xff\xfe\xfd") is grpc.StatusCode.INVALID_ARGUMENT  # bad UTF-8
    assert _health(channel) == health_pb2.HealthCheckResponse.SERVING


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_deeply_nested_json_is_invalid_argument(channel):
    deep = "[" * 100_000 + "]" * 100_000
    for request in (
        agency_pb2.SubmitRequest(text="replace my shattered screen", input_json=deep),
        agency_pb2.SubmitRequest(text="replace my shattered screen", goal_json=deep),
    ):
        code = _call(channel, "/agency.v1.AgencyService/Submit", request.SerializeToString())
        assert code is grpc.StatusCode.INVALID_ARGUMENT
    contract = common_pb2.CapabilityContract(
        name="deep", version="1.0.0", can_do=["x"], input_schema_json=deep
    )
    code = _call(
        channel,
        "/agency.v1.CatalogService/Register",
        catalog_pb2.RegisterRequest(contract=contract).SerializeToString(),
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT


async def test_undecodable_request_is_invalid_argument_and_audited(grpc_gateway):
    agency, channel, _ = grpc_gateway
    raw = channel.unary_unary("/agency.v1.AgencyService/Submit")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw(b"\x12\x05ab", timeout=5)  # field 2 (text) claims 5 bytes, has 2
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    md = dict(info.value.trailing_metadata() or ())
    assert md["agency-reason"] == "INVALID_INPUT" and md["agency-field"] == "request"
    assert "DecodeError" in info.value.details() and "Traceback" not in info.value.details()
    rejected = [r for _, r in agency.audit.records() if r.event_type == "message.rejected"]
    assert rejected and "not a valid protobuf message" in rejected[-1].detail["problems"][0]
