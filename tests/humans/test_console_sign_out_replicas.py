"""Signing out on one console replica ends the session on every replica (sign-ins in Redis)."""

from __future__ import annotations

import httpx

from middleware.people.desk import HumanDesk
from middleware.redis.sign_ins import RedisSignIns
from middleware.server.console import build_app

from .test_console_security import AUDREY, desk, sign_in_as  # noqa: F401 (the fixture)


async def test_a_sign_out_through_one_replica_ends_the_session_on_the_other(
    desk: HumanDesk,  # noqa: F811
    redis_client: object,
    redis_prefix: str,
) -> None:
    one = build_app(desk, secret="s" * 40, sign_ins=RedisSignIns(redis_client, prefix=redis_prefix))
    two = build_app(desk, secret="s" * 40, sign_ins=RedisSignIns(redis_client, prefix=redis_prefix))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=one), base_url="http://console") as a:
        csrf = await sign_in_as(a, AUDREY)
        signed_in = await redis_client.keys(f"{redis_prefix}{{signin:*")  # type: ignore[attr-defined]
        assert len(signed_in) == 1  # the pattern below finds sign-ins
        cookies = dict(a.cookies)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=two), base_url="http://console", cookies=cookies
        ) as b:
            assert (await b.get("/inbox")).status_code == 200  # the same sign-in on the other replica
            assert (await b.post("/signout", data={"csrf": csrf})).status_code == 303
        r = await a.get("/inbox")
        assert r.status_code == 303 and r.headers["location"] == "/signin"
    keys = await redis_client.keys(f"{redis_prefix}{{signin:*")  # type: ignore[attr-defined]
    assert keys == []
