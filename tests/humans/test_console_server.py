"""The console served in the gateway's event loop: plain HTTP, and HTTPS with a Secure cookie."""

from __future__ import annotations

import re
import ssl

import httpx

from middleware import Agency
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.console import ConsoleServer

from .cases import TOKENS, people


def _desk() -> HumanDesk:
    return HumanDesk(Agency(), [Person.model_validate(p) for p in people()])


async def _sign_in(c: httpx.AsyncClient) -> httpx.Response:
    page = await c.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    return await c.post("/signin", data={"csrf": csrf, "token": TOKENS["alice"]})


async def test_the_console_serves_http_on_its_own_port_and_stops():
    server = ConsoleServer(_desk(), "127.0.0.1:0")
    await server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        async with httpx.AsyncClient(base_url=server.url) as c:
            signed = await _sign_in(c)
            assert signed.status_code == 303 and "secure" not in signed.headers["set-cookie"].lower()
    finally:
        await server.stop()
    async with httpx.AsyncClient(base_url=server.url) as c:
        try:
            await c.get("/healthz")
            raise AssertionError("still serving")
        except httpx.ConnectError:
            pass


async def test_over_tls_the_session_cookie_is_secure(pki):
    server = ConsoleServer(_desk(), "127.0.0.1:0", tls_cert=pki.server_cert, tls_key=pki.server_key)
    await server.start()
    try:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(pki.ca))
        async with httpx.AsyncClient(base_url=server.url, verify=context) as c:
            signed = await _sign_in(c)
            cookie = signed.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    finally:
        await server.stop()
