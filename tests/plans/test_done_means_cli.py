"""Issue 28's "done means", as a user types it: the sentence alone on a served demo gateway
completes the warranty case; the accidental-damage and 14-month claims still fail, saying why;
a customer nobody knows is asked for the phone's model and the answer completes it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date

import pytest
from served_in_thread import ServedInThread

from middleware import Agency
from middleware.cli import main
from middleware.demo import build_demo_agency, clock_on, demo_config
from middleware.server.grpc_api import build_server

pytestmark = pytest.mark.timeout(90)


class Served(ServedInThread):
    """``agency serve --demo`` in process, told as on 15 June 2026."""

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        agency = Agency(config=demo_config(), clock=clock_on(date(2026, 6, 15)), sleep=no_sleep)
        self.agency = await build_demo_agency(agency)
        self.server = build_server(self.agency, "127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(0)
        await self.agency.close()


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with Served() as served:
        yield f"127.0.0.1:{served.server.port}"


def submit(address: str, text: str, user: str, device: str = "") -> list[str]:
    given = f'{{"user_id": "{user}"' + (f', "device": "{device}"}}' if device else "}")
    return ["submit", text, "--user-id", user, "--input", given, "--address", address]


def test_the_sentence_alone_completes_with_the_goal_passed(address, capsys) -> None:
    code = main(submit(address, "我上周买的手机屏幕碎了，要换新", "u_789", "fp_7f3a"))
    out = capsys.readouterr().out
    assert code == 0, out
    assert ": completed (TASK_STATE_COMPLETED)" in out
    assert "plan (goal:GOAL_WARRANTY_001): intake → order → warranty → shipping → reply" in out
    assert re.search(r"goal GOAL_WARRANTY_001: passed \((\d+)/\1 checks?\)", out), out
    assert "预计6月17日送达" in out


@pytest.mark.parametrize(
    ("text", "user", "device", "why"),
    [
        ("我的手机摔了一下，屏幕碎了，要换新", "u_789", "fp_7f3a", "$..accidental is True, expected False"),
        (
            "我14个月前买的手机屏幕碎了，要换新",
            "u_456",
            "fp_19c2",
            "'2025-04-15', 14 months ago, more than 12",
        ),
    ],
)
def test_claims_the_warranty_does_not_cover_fail_with_their_reason(address, capsys, text, user, device, why):
    assert main(submit(address, text, user, device)) == 0  # waiting for a person is not an error
    out = capsys.readouterr().out
    assert ": input_required (TASK_STATE_INPUT_REQUIRED)" in out
    assert "goal GOAL_WARRANTY_001: FAILED" in out and why in out
    assert '"kind": "human_handover"' in out


def test_a_customer_nobody_knows_is_asked_for_the_model_and_answers(address, capsys) -> None:
    assert main(submit(address, "我上周买的手机屏幕碎了，要换新", "u_new")) == 0
    out = capsys.readouterr().out
    assert '"kind": "missing_input"' in out and "请提供：device_model" in out
    hint = re.search(r"resume with: agency task resume (\S+) --input", out)
    assert hint, out
    assert (
        main(["task", "resume", hint.group(1), "--input", '{"device_model": "PhoneX"}', "--address", address])
        == 0
    )
    done = capsys.readouterr().out
    assert ": completed (TASK_STATE_COMPLETED)" in done and "goal GOAL_WARRANTY_001: passed" in done
