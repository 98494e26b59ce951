"""The operator console: a server-rendered Starlette application over the human desk.

Pages: sign-in (a person's bearer token, posted in a form, checked by its SHA-256; or single
sign-on through the company's OIDC provider, :mod:`.sso`), the
inbox (what waits for this person, oldest first), one escalation with its decision form,
tasks (a live list, filters) and a task (graphical timeline, SMF metadata per hop, checks,
failure → resolution, routing explanation), contracts, and audit (latest signed checkpoint,
verification, exports).

Security: the session is a signed cookie (HttpOnly, SameSite=Strict, Secure when served
over TLS) holding the person's name and a CSRF token — never the bearer token; every form
carries the CSRF token and a POST without the right one is refused (and audited); each
decision names its escalation, whose id is claimed once. Jinja2 autoescapes every value
(agent outputs are untrusted text); a strict Content-Security-Policy allows only this
console's own stylesheet and script.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ...audit.export import ExportFilter, ExportFormat, export
from ...audit.verify import verify_path
from ...errors import AgencyError, InvalidInput, NotFound, Unavailable
from ...people.desk import HumanDesk
from ...people.model import Person
from ...smf import utcnow
from ...timeline import build_timelines
from .sso import COOKIE as SSO_COOKIE
from .sso import ConsoleSso, SignInRefused
from .views import audit_state, contract_rows, task_bars, waited

__all__ = ["build_app"]

_HERE = Path(__file__).parent
_CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_STATUS = {
    "INVALID_ARGUMENT": 400,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 409,
    "CONCURRENT_UPDATE": 409,
}


class _Headers:
    """Security headers on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with)


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("middleware.server.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )

    def pretty(value: Any) -> str:
        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            return str(value)

    env.filters["pretty"] = pretty
    env.filters["waited"] = waited
    env.filters["ms"] = lambda v: (
        "—" if v is None else (f"{float(v):,.0f} ms" if v >= 10 else f"{float(v):.2f} ms")
    )
    env.filters["pct"] = lambda v: f"{float(v) * 100:.1f} %"
    return env


def build_app(
    desk: HumanDesk,
    *,
    secret: str | None = None,
    secure_cookies: bool = False,
    session_seconds: float = 8 * 3600,
    sso: ConsoleSso | None = None,
) -> Starlette:
    """The console over ``desk`` (and its agency).

    Args:
        sso: Single sign-on through the company's OIDC provider (``/signin/oidc``); token
            sign-in stays.
        secret: Signs the session cookies (default: random, so sign-ins end with the process;
            give the same secret to every replica behind one address).
        secure_cookies: Mark the session cookie Secure (the console is served over TLS).
        session_seconds: How long a sign-in lasts.
    """
    env = _env()
    agency = desk.agency

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        person = _person(request)
        body = env.get_template(name).render(
            person=person, csrf=_csrf(request), page=name.removesuffix(".html"), now=utcnow(), **ctx
        )
        return HTMLResponse(body, status_code=status)

    def _person(request: Request) -> Person | None:
        name = request.session.get("person")
        return desk.people.get(name) if isinstance(name, str) else None

    def _csrf(request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    async def _form(request: Request, what: str) -> dict[str, str] | None:
        """The posted form when its CSRF token is this session's; None (audited) otherwise."""
        form = await request.form()
        sent = str(form.get("csrf", ""))
        expected = request.session.get("csrf")
        if not isinstance(expected, str) or not sent or not hmac.compare_digest(sent, expected):
            person = _person(request)
            await desk.refuse_request(
                person.name if person else "",
                "missing or wrong CSRF token (forged or stale form)",
                {"form": what},
            )
            return None
        return {k: str(v) for k, v in form.items() if isinstance(v, str)}

    def _signed_in(request: Request) -> Person | Response:
        person = _person(request)
        if person is None:
            return RedirectResponse("/signin", status_code=303)
        return person

    sso_issuer = sso.settings.issuer if sso is not None else ""

    async def signin_page(request: Request) -> Response:
        return render(request, "signin.html", sso_issuer=sso_issuer)

    def _signed_in_as(request: Request, person: Person) -> None:
        request.session.clear()
        request.session.update(person=person.name, csrf=secrets.token_urlsafe(32), at=utcnow().isoformat())

    async def signin_oidc(request: Request) -> Response:
        if sso is None:
            return render(request, "error.html", 404, error="Single sign-on is not configured.")
        try:
            url, flow = await sso.start(str(request.base_url))
        except Unavailable as exc:
            return render(request, "signin.html", 503, error=exc.message, sso_issuer=sso_issuer)
        response = RedirectResponse(url, status_code=303)
        # Lax (not the session's Strict): it must come back on the provider's redirect
        response.set_cookie(
            SSO_COOKIE, flow, max_age=600, path="/oidc", httponly=True, samesite="lax", secure=secure_cookies
        )
        return response

    async def oidc_callback(request: Request) -> Response:
        if sso is None:
            return render(request, "error.html", 404, error="Single sign-on is not configured.")
        try:
            name = await sso.finish(
                console_url=str(request.base_url),
                params=dict(request.query_params),
                cookie=request.cookies.get(SSO_COOKIE),
            )
        except SignInRefused as exc:
            await desk.refuse_request(
                "", f"single sign-on refused: {exc.why}", {"form": "signin", "via": "oidc"}
            )
            return render(
                request, "signin.html", 401, error=f"Sign-in refused: {exc.why}", sso_issuer=sso_issuer
            )
        except Unavailable as exc:
            return render(request, "signin.html", 503, error=exc.message, sso_issuer=sso_issuer)
        person = desk.people.get(name)
        if person is None:
            await desk.refuse_request(
                "", f"single sign-on of {name[:64]!r}: no such person in humans.people", {"form": "signin"}
            )
            return render(
                request,
                "signin.html",
                403,
                error=f"{name} is not a person of this agency.",
                sso_issuer=sso_issuer,
            )
        _signed_in_as(request, person)
        # a page, not a redirect: the session cookie is SameSite=Strict, and a redirect chain that
        # began at the provider's site would not carry it to /inbox
        response = render(request, "signed_in.html")
        response.delete_cookie(SSO_COOKIE, path="/oidc")
        return response

    async def signin(request: Request) -> Response:
        form = await _form(request, "signin")
        if form is None:
            return render(request, "signin.html", 403, error="The form expired; please sign in again.")
        person = desk.authenticate(form.get("token", ""))
        if person is None:
            await desk.refuse_request("", "sign-in with an unknown token", {"form": "signin"})
            return render(request, "signin.html", 401, error="Unknown token.", sso_issuer=sso_issuer)
        _signed_in_as(request, person)
        return RedirectResponse("/inbox", status_code=303)

    async def signout(request: Request) -> Response:
        if await _form(request, "signout") is not None:
            request.session.clear()
        return RedirectResponse("/signin", status_code=303)

    async def home(request: Request) -> Response:
        return RedirectResponse("/inbox", status_code=303)

    async def inbox(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        items = await desk.inbox(person)
        return render(request, "inbox.html", items=items)

    async def escalation(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        try:
            esc = await desk.escalation(request.path_params["esc_id"], person)
        except NotFound as exc:
            return render(request, "error.html", 404, error=exc.message)
        return render(request, "escalation.html", esc=esc)

    async def decide(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        esc_id = request.path_params["esc_id"]
        form = await _form(request, f"decide {esc_id}")
        if form is None:
            return render(request, "error.html", 403, error="Refused: the form is not this session's (CSRF).")
        output: Any = form.get("output") or None
        if output is not None:
            with contextlib.suppress(orjson.JSONDecodeError):  # plain text is an output too
                output = orjson.loads(output)
        try:
            outcome = await desk.decide(
                esc_id, person, choice=form.get("choice", ""), note=form.get("note", ""), output=output
            )
        except AgencyError as exc:
            try:
                esc = await desk.escalation(esc_id, person)
            except NotFound:
                esc = None
            template = "escalation.html" if esc is not None else "error.html"
            return render(request, template, _STATUS.get(exc.reason, 400), esc=esc, error=exc.message)
        if outcome is None:
            return RedirectResponse("/inbox", status_code=303)
        return RedirectResponse(f"/tasks/{outcome.task_id}", status_code=303)

    async def tasks(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        state, q = request.query_params.get("state", ""), request.query_params.get("q", "")
        return render(request, "tasks.html", rows=await _rows(state, q), state=state, q=q)

    async def _rows(state: str, q: str) -> list[dict[str, Any]]:
        rows = await desk.store.recent_tasks()
        return [
            r
            for r in rows
            if (not state or r.get("state") == state)
            and (not q or q.lower() in f"{r.get('task_id')} {r.get('text')} {r.get('client')}".lower())
        ]

    async def tasks_json(request: Request) -> Response:
        if _person(request) is None:
            return JSONResponse({"error": "sign in"}, status_code=401)
        state, q = request.query_params.get("state", ""), request.query_params.get("q", "")
        return JSONResponse({"tasks": await _rows(state, q)})

    async def task(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        task_id = request.path_params["task_id"]
        try:
            outcome = await agency.get_task(task_id)
        except AgencyError as exc:
            return render(request, "error.html", _STATUS.get(exc.reason, 400), error=exc.message)
        records = [r for _, r in agency.audit.records() if r.task_id == task_id]
        timelines = build_timelines(records)
        esc = await desk.store.open_for_task(task_id)
        return render(
            request,
            "task.html",
            task=outcome,
            timeline=timelines[0] if timelines else None,
            bars=task_bars(records),
            escalation=desk.redact(esc, person) if esc is not None else None,
            decisions=[r for r in records if r.event_type in ("task.resumed", "human.decision")],
        )

    async def contracts(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        return render(request, "contracts.html", rows=await contract_rows(agency))

    async def audit(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        verdict = None
        if request.query_params.get("verify"):
            try:
                v = await asyncio.to_thread(verify_path, agency.audit.location)
                verdict = {"ok": v.ok, "lines": [n.describe() for n in v.nodes]}
            except AgencyError as exc:
                verdict = {"ok": False, "lines": [exc.message]}
        return render(
            request,
            "audit.html",
            state=audit_state(agency),
            verdict=verdict,
            formats=[f.value for f in ExportFormat],
        )

    async def audit_checkpoint(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        if await _form(request, "checkpoint") is None:
            return render(request, "error.html", 403, error="Refused: the form is not this session's (CSRF).")
        sign = getattr(agency.audit, "checkpoint", None)
        if not callable(sign):
            return render(request, "error.html", 409, error="This audit log does not sign checkpoints.")
        await sign()
        return RedirectResponse("/audit", status_code=303)

    async def audit_export(request: Request) -> Response:
        person = _signed_in(request)
        if isinstance(person, Response):
            return person
        params = request.query_params
        try:
            fmt = ExportFormat(params.get("format", "jsonl"))
            flt = ExportFilter(
                since=_when(params.get("since", ""), "since"), until=_when(params.get("until", ""), "until")
            )
        except ValueError:
            return render(
                request, "error.html", 400, error="format: one of " + ", ".join(f.value for f in ExportFormat)
            )
        except InvalidInput as exc:
            return render(request, "error.html", 400, error=str(exc))
        out = io.BytesIO()
        try:
            await asyncio.to_thread(export, agency.audit.location, out, fmt, flt)
        except AgencyError as exc:
            return render(request, "error.html", 400, error=exc.message)
        stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
        ext = "csv" if fmt is ExportFormat.CSV else ("cef" if fmt is ExportFormat.CEF else "jsonl")
        return Response(
            out.getvalue(),
            media_type="text/csv" if fmt is ExportFormat.CSV else "application/octet-stream",
            headers={"content-disposition": f'attachment; filename="audit-{stamp}.{ext}"'},
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/signin", signin_page, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signin/oidc", signin_oidc, methods=["GET"]),
        Route("/oidc/callback", oidc_callback, methods=["GET"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/inbox", inbox),
        Route("/inbox/{esc_id}", escalation, methods=["GET"]),
        Route("/inbox/{esc_id}/decide", decide, methods=["POST"]),
        Route("/tasks", tasks),
        Route("/tasks.json", tasks_json),
        Route("/tasks/{task_id}", task),
        Route("/contracts", contracts),
        Route("/audit", audit),
        Route("/audit/export", audit_export),
        Route("/audit/checkpoint", audit_checkpoint, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(_Headers),
        Middleware(
            SessionMiddleware,
            secret_key=secret or secrets.token_urlsafe(32),
            session_cookie="agency_console",
            max_age=int(session_seconds),
            same_site="strict",
            https_only=secure_cookies,
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)


def _when(value: str, name: str) -> datetime | None:
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput.single(name, "an ISO date or time, e.g. 2026-11-30 or 2026-11-30T18:00") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)
