"""A long bad value is named, not echoed whole: the refusal keeps its real status, with a
short prefix of the value and its length in ``grpc-message`` and ``agency-problems``
(issue 13, item 5). Before, ``GetTask(task_id="t" * 2**20)`` ended RESOURCE_EXHAUSTED
about metadata size."""

from __future__ import annotations

import json

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2
from middleware.errors import InvalidInput, NotFound, Problem, clip, shorten

HUGE = 2**20


def _md(err: grpc.aio.AioRpcError) -> dict[str, str]:
    return dict(err.trailing_metadata() or ())


async def test_a_megabyte_task_id_is_not_found_with_a_short_message(grpc_gateway) -> None:
    _, channel, _ = grpc_gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    for call in (
        stub.GetTask(agency_pb2.GetTaskRequest(task_id="t" * HUGE)),
        stub.Resume(agency_pb2.ResumeRequest(task_id="t" * HUGE, answer="yes")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() in {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT}
        details = info.value.details() or ""
        assert len(details) < 1200
        assert "tttt" in details and str(HUGE)[:5] in details  # a prefix and the length


async def test_long_invalid_values_fit_the_status_and_its_metadata(grpc_gateway) -> None:
    _, channel, _ = grpc_gateway
    catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
    bad = common_pb2.CapabilityContract(
        name="n" * HUGE, version="v" * HUGE, can_do=["x" * HUGE], tags=["t" * 1000] * 500
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog.Register(catalog_pb2.RegisterRequest(contract=bad))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    md = _md(info.value)
    assert md["agency-reason"] == "INVALID_INPUT"
    assert len(info.value.details() or "") <= 1200
    assert len(md["agency-problems"]) <= 4096
    assert json.loads(md["agency-problems"])  # still a JSON list a client can read

    # thousands of bad steps: every problem counted, the metadata bounded
    agency = agency_pb2_grpc.AgencyServiceStub(channel)
    steps = [agency_pb2.TaskStep(name="", input_json="[1]") for _ in range(3000)]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await agency.Submit(agency_pb2.SubmitRequest(text="x", steps=steps))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    problems = json.loads(_md(info.value)["agency-problems"])
    assert len(_md(info.value)["agency-problems"]) <= 4096
    assert problems[0]["field"].startswith("steps[")


def test_errors_cut_echoed_values_where_they_are_made() -> None:
    assert clip("abc") == "'abc'"
    assert clip("t" * 100) == f"{'t' * 32!r}… (100 chars)"
    short = "no task 'abc'"
    assert shorten(short) == short
    err = NotFound(f"no task {'t' * HUGE!r}")
    assert len(err.message) < 200 and f"({HUGE + 2} chars)" in err.message
    many = InvalidInput([Problem("f" * HUGE, "r" * HUGE)] * 3)
    assert len(many.problems[0].field) < 200 and len(many.problems[0].reason) < 400
    assert len(many.message) <= 1100
    spaced = NotFound("word " * HUGE)  # long but made of short runs: cut as a whole
    assert len(spaced.message) <= 1100 and "chars in all" in spaced.message


def test_error_details_are_bounded_too() -> None:
    from middleware.errors import PermissionDenied

    err = PermissionDenied("no", details={"target": "n" * HUGE, "retry_after_ms": 5})
    assert len(err.details["target"]) < 400 and err.details["retry_after_ms"] == 5


async def test_thousands_of_bad_fields_make_one_bounded_rejection_record(grpc_gateway) -> None:
    agency, channel, _ = grpc_gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    for steps in (
        [agency_pb2.TaskStep(name="s", input_json='{"a": NaN}') for _ in range(5000)],  # the transport
        [agency_pb2.TaskStep(name="") for _ in range(200)],  # the core: 200 bad step names
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Submit(agency_pb2.SubmitRequest(text="x", steps=steps))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    records = [r for _, r in agency.audit.records() if r.rule == "request_validation"]
    assert len(records) == 2
    assert all(len(r.detail["problems"]) <= 101 for r in records)
    assert len(records[0].detail["problems"]) == 100  # the walk stops at 100 problems
    assert records[1].detail["problems"][-1] == "... and 100 more problems"
