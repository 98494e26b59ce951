"""Every RPC the gateway serves, found from the protos (none can be forgotten), takes random
bytes, random well-formed messages built from its request type, truncated and oversized
messages, lone surrogates, NaN/Infinity and overflowing numbers in every ``*_json`` field,
non-finite floats, huge values and huge lists (50,000 steps), and answers each with a client
error status -- never INTERNAL or UNKNOWN -- while the server keeps serving. The audit log is
the real write-ahead log and a messaging agent is enrolled, so AuditService and MessageService
are exercised past their front doors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st
from proto_strategies import CLIENT_ERRORS, FUZZ, HOSTILE_JSON, HUGE_TEXT, REFUSED_JSON, messages_of
from served_in_thread import ServedInThread

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, audit_pb2, catalog_pb2, goals_pb2, messages_pb2
from middleware.audit import WalAuditLog
from middleware.demo import build_demo_agency
from middleware.messaging import generate_key, public_key_b64
from middleware.messaging.post_office import PostOffice
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.server import MAX_MESSAGE_BYTES

METHODS: dict[str, MethodDescriptor] = {
    f"/{service.full_name}/{method.name}": method
    for module in (agency_pb2, catalog_pb2, goals_pb2, audit_pb2, messages_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
}


class Served(ServedInThread):
    """The demo gateway (WAL audit log, one enrolled messaging agent) on its own loop in a thread."""

    def __init__(self, audit_dir: Path) -> None:
        super().__init__()
        self.audit_dir = audit_dir

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        self.agency = await build_demo_agency(
            Agency(audit=WalAuditLog(self.audit_dir, "fuzz"), sleep=no_sleep)
        )
        office = PostOffice(audit=self.agency.audit)
        self.token = await office.register("fuzzer", public_key_b64(generate_key()))
        self.server = build_server(self.agency, "127.0.0.1:0", post_office=office)
        await self.server.start()

    async def stop(self) -> None:  # type: ignore[override]
        await self.server.stop(0)
        await self.agency.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[grpc.Channel, str]]:
    with (
        Served(tmp_path_factory.mktemp("fuzz-audit")) as s,
        grpc.insecure_channel(
            f"127.0.0.1:{s.server.port}", options=[("grpc.max_send_message_length", -1)]
        ) as ch,
    ):
        yield ch, s.token
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _call(
    served: tuple[grpc.Channel, str],
    method: str,
    payload: bytes,
    *,
    stream_timeout: float = 0.3,
    fields: list[str] | None = None,
    details: list[str] | None = None,
) -> grpc.StatusCode:
    """Call ``method`` with raw bytes (no client-side validation); the status it ends with
    (``fields`` gets the ``agency-field`` of an INVALID_ARGUMENT, ``details`` the message)."""
    ch, token = served
    metadata = (("authorization", f"Bearer {token}"),) if "MessageService" in method else ()
    streaming = METHODS[method].server_streaming
    try:
        if streaming:  # read what comes at once; a healthy open stream then times out
            for _ in ch.unary_stream(method)(payload, timeout=stream_timeout, metadata=metadata):
                pass
        else:
            ch.unary_unary(method)(payload, timeout=2 if method.endswith("/Pull") else 15, metadata=metadata)
    except grpc.RpcError as err:
        code = err.code()
        if details is not None:
            details.append(err.details() or "")
        if streaming and code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return grpc.StatusCode.OK
        if method.endswith("/Pull") and code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return grpc.StatusCode.OK  # a long poll (wait_seconds up to 60) outlasting the call's timeout
        assert code in CLIENT_ERRORS, f"{method}: {code} {err.details()}"
        assert code is not grpc.StatusCode.DATA_LOSS, f"{method}: the audit log stopped verifying"
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            md = dict(err.trailing_metadata() or ())
            if fields is not None:
                fields.append(str(md.get("agency-field", "")))
            assert md.get("agency-reason") in {"INVALID_INPUT", "SCHEMA_VIOLATION"}, (method, md)
        return code
    return grpc.StatusCode.OK


# ------------------------------------------------------------------ tests
def test_every_served_rpc_is_fuzzed(served: tuple[grpc.Channel, str]) -> None:
    """The list comes from the protos: a new RPC is fuzzed without touching this file."""
    assert len(METHODS) >= 20
    assert {"/agency.v1.MessageService/Subscribe", "/agency.v1.AuditService/Export"} <= set(METHODS)
    # the fuzzed calls get past authentication and find a real audit log behind them
    pull = messages_pb2.PullRequest(consumer="fuzzer").SerializeToString()
    assert _call(served, "/agency.v1.MessageService/Pull", pull) is grpc.StatusCode.OK
    export = audit_pb2.ExportRequest().SerializeToString()
    assert _call(served, "/agency.v1.AuditService/Export", export) is grpc.StatusCode.OK


@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(payload=st.binary(max_size=200))
def test_random_bytes(served: tuple[grpc.Channel, str], method: str, payload: bytes) -> None:
    _call(served, method, payload)


@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(data=st.data())
def test_random_well_formed_requests(
    served: tuple[grpc.Channel, str], method: str, data: st.DataObject
) -> None:
    request = data.draw(messages_of(METHODS[method].input_type))
    _call(served, method, request.SerializeToString())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_truncated_and_oversized_requests(served: tuple[grpc.Channel, str], method: str) -> None:
    request = GetMessageClass(METHODS[method].input_type)()
    text_fields = [f for f in METHODS[method].input_type.fields if f.type == FieldDescriptor.TYPE_STRING]
    if text_fields and not text_fields[0].is_repeated:
        setattr(request, text_fields[0].name, "x" * 200)
        whole = request.SerializeToString()
        for cut in (1, len(whole) // 2, len(whole) - 1):
            _call(served, method, whole[:cut])
    oversized = b"\x0a" + b"\xff\xff\xff\x07" + b"x" * (MAX_MESSAGE_BYTES + 10)  # field 1, huge length
    assert _call(served, method, oversized, stream_timeout=15) is grpc.StatusCode.RESOURCE_EXHAUSTED


def _paths(descriptor: Any, depth: int = 0) -> Iterator[tuple[FieldDescriptor, ...]]:
    """Paths to every singular field (through singular and repeated message fields)."""
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if depth < 2 and not f.message_type.GetOptions().map_entry:
                for rest in _paths(f.message_type, depth + 1):
                    yield (f, *rest)
        else:
            yield (f,)


def _set(request: Any, path: tuple[FieldDescriptor, ...], value: Any) -> None:
    node = request
    for f in path[:-1]:
        node = getattr(node, f.name).add() if f.is_repeated else getattr(node, f.name)
    last = path[-1]
    if last.is_repeated:
        getattr(node, last.name).append(value)
    else:
        setattr(node, last.name, value)


def _with(method: str, path: tuple[FieldDescriptor, ...], value: Any) -> bytes:
    request = GetMessageClass(METHODS[method].input_type)()
    _set(request, path, value)
    return bytes(request.SerializeToString())


@pytest.mark.parametrize("method", sorted(METHODS))
def test_what_json_has_not_huge_values_and_non_finite_floats(
    served: tuple[grpc.Channel, str], method: str
) -> None:
    """Deterministic, every field: each hostile JSON text in each ``*_json`` field (refused
    naming the field), NaN and infinities in each float, a 128 KiB value in each string."""
    for path in _paths(METHODS[method].input_type):
        field = path[-1]
        name = ".".join(f.name + ("[0]" if f.is_repeated else "") for f in path)
        if field.type == FieldDescriptor.TYPE_STRING and field.name.endswith("_json"):
            for i, text in enumerate(HOSTILE_JSON):
                named: list[str] = []
                code = _call(served, method, _with(method, path, text), fields=named)
                if i < REFUSED_JSON:  # JSON has not these: refused naming the field, whatever the RPC
                    assert code is grpc.StatusCode.INVALID_ARGUMENT, (method, name, text[:40], code)
                    assert named == [name], (method, name, text[:40], named)
        elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            for value in (float("nan"), float("inf"), float("-inf")):
                named = []
                code = _call(served, method, _with(method, path, value), fields=named)
                assert code is grpc.StatusCode.INVALID_ARGUMENT, (method, name, value, code)
                assert named == [name], (method, name, value, named)
        elif field.type == FieldDescriptor.TYPE_STRING:  # refused or not, never echoed whole
            said: list[str] = []
            _call(served, method, _with(method, path, HUGE_TEXT), details=said)
            assert all(len(d) < 2048 and "metadata size" not in d for d in said), (method, name, said)


def test_huge_step_lists_are_refused_before_anything_runs(served: tuple[grpc.Channel, str]) -> None:
    steps = [
        agency_pb2.TaskStep(name=f"s{i}", action="check_warranty", input_json='{"n": 1}')
        for i in range(50_000)
    ]
    request = agency_pb2.SubmitRequest(text="My phone has a shattered screen", steps=steps)
    assert _call(served, "/agency.v1.AgencyService/Submit", request.SerializeToString()) is (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    hostile = [agency_pb2.TaskStep(name=f"s{i}", input_json=HOSTILE_JSON[i % 6]) for i in range(5_000)]
    request = agency_pb2.SubmitRequest(text="x", steps=hostile)
    assert _call(served, "/agency.v1.AgencyService/Submit", request.SerializeToString()) is (
        grpc.StatusCode.INVALID_ARGUMENT
    )
