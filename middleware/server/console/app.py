"""The operator console: a server-rendered Starlette application over the human desk.

Pages: sign-in (a person's bearer token, posted in a form, checked by its SHA-256; or single
sign-on through the company's OIDC provider, :mod:`.sso`), the
inbox (what waits for this person, oldest first), one escalation with its decision form,
tasks (a live list, filters) and a task (graphical timeline, SMF metadata per hop, checks,
failure → resolution, routing explanation), contracts, and audit (latest signed checkpoint,
verification, exports).

Security: the session is a signed cookie (HttpOnly, SameSite=Strict, Secure when served
over TLS) holding the person's name, a sign-in id and a CSRF token — never the bearer token;
the sign-in is held on the server (:mod:`middleware.people.sign_ins`, Redis with replicas), so
signing out ends it everywhere, copied cookies included. Sign-in attempts are limited per source
address (429 past the limit) and refused ones are audited per source and minute
(:mod:`middleware.refusals`), so a flood cannot flood the log; every form
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
import math
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

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

from ...access import HumanRole
from ...audit.export import ExportFilter, ExportFormat, export
from ...audit.verify import NodeVerdict, verify_path
from ...errors import (
    AgencyError,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from ...people.desk import HumanDesk
from ...people.model import Person
from ...people.sign_ins import MemorySignIns, SignInStore
from ...refusals import RefusalAggregator
from ...smf import utcnow
from ...timeline import build_timelines, plan_lines
from .sso import COOKIE as SSO_COOKIE
from .sso import ConsoleSso, SignInRefused
from .views import audit_state, contract_rows, escalation_view, task_bars, timeline_layout, waited

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
    sign_ins: SignInStore | None = None,
    signin_per_minute: float = 10.0,
    signin_burst: int = 10,
    refusals: RefusalAggregator | None = None,
    clock: Callable[[], float] = time.monotonic,
    sso: ConsoleSso | None = None,
) -> Starlette:
    """The console over ``desk`` (and its agency).

    Args:
        secret: Signs the session cookies (default: random, so sign-ins end with the process;
            give the same secret to every replica behind one address).
        secure_cookies: Mark the session cookie Secure (the console is served over TLS).
        session_seconds: How long a sign-in lasts.
        sign_ins: Where sign-ins are held (default: this process; Redis shares them between
            replicas, so a sign-out ends a session on every one).
        signin_per_minute: Sign-in attempts one source address may make per minute ...
        signin_burst: ... and at once; past them 429, audited with the refusals.
        refusals: Audits refused sign-ins per source and minute (default: its own, on the
            agency's audit log); the app keeps it as ``app.state.refusals`` (flushed at stop).
        clock: Monotonic seconds for the sign-in rate limit (injected in tests).
        sso: Single sign-on through the company's OIDC provider (``/signin/oidc``); token
            sign-in stays.
    """
    env = _env()
    agency = desk.agency
    sign_ins = sign_ins or MemorySignIns()
    refusals = refusals or RefusalAggregator(agency.audit.append, node=agency.config.node_id)
    attempts = _Attempts(signin_per_minute / 60.0, signin_burst, clock)

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        person = getattr(request.state, "person", None)  # as _person found it for this request
        body = env.get_template(name).render(
            person=person, csrf=_csrf(request), page=name.removesuffix(".html"), now=utcnow(), **ctx
        )
        return HTMLResponse(body, status_code=status)

    async def _person(request: Request) -> Person | None:
        """The signed-in person: the cookie's sign-in must still be held in the store (sign-out
        on any replica ends it) and name the same person."""
        name, sign_in = request.session.get("person"), request.session.get("sign_in")
        if not isinstance(name, str) or not isinstance(sign_in, str):
            return None
        if await sign_ins.holder(sign_in) != name:
            request.session.clear()  # ended elsewhere, or expired: the cookie is worthless
            return None
        person = desk.people.get(name)
        request.state.person = person
        return person

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
            person = await _person(request)
            if what == "signin":  # nobody is signed in yet: counted per source, like gRPC refusals
                await refusals.refused(
                    _source(request),
                    "console/signin",
                    PermissionDenied("sign-in form without its CSRF token"),
                )
                return None
            await desk.refuse_request(
                person.name if person else "",
                "missing or wrong CSRF token (forged or stale form)",
                {"form": what},
            )
            return None
        return {k: str(v) for k, v in form.items() if isinstance(v, str)}

    async def _signed_in(request: Request) -> Person | Response:
        person = await _person(request)
        if person is None:
            return RedirectResponse("/signin", status_code=303)
        return person

    sso_issuer = sso.settings.issuer if sso is not None else ""

    async def signin_page(request: Request) -> Response:
        return render(request, "signin.html", sso_issuer=sso_issuer)

    async def _signed_in_as(request: Request, person: Person) -> None:
        old = request.session.get("sign_in")
        if isinstance(old, str):
            await sign_ins.end(old)
        request.session.clear()
        sign_in = await sign_ins.start(person.name, seconds=session_seconds)
        request.session.update(
            person=person.name, sign_in=sign_in, csrf=secrets.token_urlsafe(32), at=utcnow().isoformat()
        )

    async def _limited(source: str, wait: float) -> Response:
        await refusals.refused(
            source,
            "console/signin",
            ResourceExhausted(
                f"more than {signin_burst} sign-in attempts from one address "
                f"(humans.console.signin_per_minute {signin_per_minute:g})"
            ),
        )
        response = HTMLResponse("Too many sign-in attempts; wait a minute.", status_code=429)
        response.headers["retry-after"] = str(max(1, math.ceil(wait)))
        return response

    async def signin_oidc(request: Request) -> Response:
        if sso is None:
            return render(request, "error.html", 404, error="Single sign-on is not configured.")
        if (wait := attempts.take(_source(request))) is not None:
            return await _limited(_source(request), wait)
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
        source = _source(request)
        if (wait := attempts.take(source)) is not None:
            return await _limited(source, wait)
        try:
            name = await sso.finish(
                console_url=str(request.base_url),
                params=dict(request.query_params),
                cookie=request.cookies.get(SSO_COOKIE),
            )
        except SignInRefused as exc:  # anonymous: counted per source, like unknown tokens
            why = f"single sign-on refused: {exc.why}"
            await refusals.refused(source, "console/oidc/callback", Unauthenticated(why))
            return render(
                request, "signin.html", 401, error=f"Sign-in refused: {exc.why}", sso_issuer=sso_issuer
            )
        except Unavailable as exc:
            return render(request, "signin.html", 503, error=exc.message, sso_issuer=sso_issuer)
        person = desk.people.get(name)
        if person is None:  # the provider vouches for someone the agency does not know: named
            await desk.refuse_request(
                "", f"single sign-on of {name[:64]!r}: no such person in humans.people", {"form": "signin"}
            )
            error = f"{name} is not a person of this agency."
            return render(request, "signin.html", 403, error=error, sso_issuer=sso_issuer)
        await _signed_in_as(request, person)
        request.state.person = person
        # a page, not a redirect: the session cookie is SameSite=Strict, and a redirect chain that
        # began at the provider's site would not carry it to /inbox
        response = render(request, "signed_in.html")
        response.delete_cookie(SSO_COOKIE, path="/oidc")
        return response

    async def signin(request: Request) -> Response:
        source = _source(request)
        wait = attempts.take(source)
        if wait is not None:  # before anything is read or checked: a flood costs next to nothing
            await refusals.refused(
                source,
                "console/signin",
                ResourceExhausted(
                    f"more than {signin_burst} sign-in attempts from one address "
                    f"(humans.console.signin_per_minute {signin_per_minute:g})"
                ),
            )
            response = render(request, "signin.html", 429, error="Too many sign-in attempts; wait a minute.")
            response.headers["retry-after"] = str(max(1, math.ceil(wait)))
            return response
        form = await _form(request, "signin")
        if form is None:
            return render(request, "signin.html", 403, error="The form expired; please sign in again.")
        person = desk.authenticate(form.get("token", ""))
        if person is None:
            await refusals.refused(source, "console/signin", Unauthenticated("sign-in with an unknown token"))
            return render(request, "signin.html", 401, error="Unknown token.", sso_issuer=sso_issuer)
        await _signed_in_as(request, person)
        return RedirectResponse("/inbox", status_code=303)

    async def signout(request: Request) -> Response:
        if await _form(request, "signout") is not None:
            sign_in = request.session.get("sign_in")
            if isinstance(sign_in, str):
                await sign_ins.end(sign_in)  # the cookie stops working everywhere, copies too
            request.session.clear()
        return RedirectResponse("/signin", status_code=303)

    async def home(request: Request) -> Response:
        return RedirectResponse("/inbox", status_code=303)

    async def inbox(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        items = await desk.inbox(person)
        return render(request, "inbox.html", items=items)

    async def escalation(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        try:
            esc = await desk.escalation(request.path_params["esc_id"], person)
        except NotFound as exc:
            return render(request, "error.html", 404, error=exc.message)
        return render(request, "escalation.html", esc=esc, view=await _view(esc, person))

    async def _view(esc: Any, person: Person) -> dict[str, Any]:
        """The escalation as its page shows it (with its task's request, when the task is known)."""
        record = None
        if not esc.held_message:
            with contextlib.suppress(AgencyError):
                record = await agency.tasks.get(esc.task_id)
        return escalation_view(esc, person, record)

    async def decide(request: Request) -> Response:
        person = await _signed_in(request)
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
            view = await _view(esc, person) if esc is not None else None
            return render(
                request, template, _STATUS.get(exc.reason, 400), esc=esc, view=view, error=exc.message
            )
        if outcome is None:
            return RedirectResponse("/inbox", status_code=303)
        return RedirectResponse(f"/tasks/{quote(outcome.task_id, safe='/')}", status_code=303)

    async def tasks(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        state, q = request.query_params.get("state", ""), request.query_params.get("q", "")
        return render(request, "tasks.html", rows=await _rows(state, q, person), state=state, q=q)

    async def _rows(state: str, q: str, person: Person) -> list[dict[str, Any]]:
        rows = await desk.store.recent_tasks()
        return [
            r
            for r in rows
            if r.get("tenant", "") == person.tenant  # a person sees their own tenant's tasks only
            and (not state or r.get("state") == state)
            and (not q or q.lower() in f"{r.get('task_id')} {r.get('text')} {r.get('client')}".lower())
        ]

    async def tasks_json(request: Request) -> Response:
        person = await _person(request)
        if person is None:
            return JSONResponse({"error": "sign in"}, status_code=401)
        state, q = request.query_params.get("state", ""), request.query_params.get("q", "")
        return JSONResponse({"tasks": await _rows(state, q, person)})

    async def task(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        task_id = request.path_params["task_id"]
        try:
            if (await agency.tasks.get(task_id)).tenant != person.tenant:  # not even named
                raise NotFound(f"no task {task_id!r}")
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
            layout=timeline_layout(task_bars(records)),
            plan=plan_lines(timelines[0].plan) if timelines and timelines[0].plan else [],
            escalation=desk.redact(esc, person) if esc is not None else None,
            decisions=[r for r in records if r.event_type in ("task.resumed", "human.decision")],
        )

    async def cancel(request: Request) -> Response:
        """An operator cancels a task waiting for input or interrupted (audited with who and why)."""
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        task_id = request.path_params["task_id"]
        form = await _form(request, f"cancel {task_id}")
        if form is None:
            return render(request, "error.html", 403, error="Refused: the form is not this session's (CSRF).")
        if not person.has(HumanRole.OPERATOR):
            why = "canceling a task needs the operator role"
            await desk.refuse_request(person.name, why, {"task": task_id})
            return render(request, "error.html", 403, error="Canceling a task needs the operator role.")
        try:
            await agency.cancel(task_id, reason=form.get("reason", ""), person=person.ref())
        except AgencyError as exc:
            return render(request, "error.html", _STATUS.get(exc.reason, 400), error=exc.message)
        return RedirectResponse(f"/tasks/{quote(task_id, safe='/')}", status_code=303)

    async def contracts(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        return render(request, "contracts.html", rows=await contract_rows(agency, tenant=person.tenant))

    async def audit(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        verdict = None
        if request.query_params.get("verify"):
            try:
                v = await asyncio.to_thread(verify_path, agency.audit.location)
                verdict = {"ok": v.ok, "lines": [_verdict_line(n, agency.audit.location) for n in v.nodes]}
            except AgencyError as exc:
                verdict = {"ok": False, "lines": [_no_path(exc.message, agency.audit.location)]}
        return render(
            request,
            "audit.html",
            may_sign=_may_sign(person),
            state=audit_state(agency),
            verdict=verdict,
            formats=[f.value for f in ExportFormat],
        )

    async def audit_checkpoint(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        if await _form(request, "checkpoint") is None:
            return render(request, "error.html", 403, error="Refused: the form is not this session's (CSRF).")
        if not _may_sign(person):
            why = f"{person.name} may not sign a checkpoint: it needs the role {HumanRole.AUDITOR.value}"
            await desk.refuse_request(
                person.name, why, {"form": "checkpoint", "roles": [r.value for r in person.roles]}
            )
            return render(request, "error.html", 403, error=f"Refused: {why}.")
        sign = getattr(agency.audit, "checkpoint", None)
        if not callable(sign):
            return render(request, "error.html", 409, error="This audit log does not sign checkpoints.")
        await sign()
        return RedirectResponse("/audit", status_code=303)

    async def audit_export(request: Request) -> Response:
        person = await _signed_in(request)
        if isinstance(person, Response):
            return person
        params = request.query_params
        try:
            fmt = ExportFormat(params.get("format", "jsonl"))
            flt = ExportFilter(
                since=_when(params.get("since", ""), "since"),
                until=_when(params.get("until", ""), "until"),
                tenant=person.tenant or None,  # a tenant's person exports that tenant's records only
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
        Route("/tasks/{task_id:path}/cancel", cancel, methods=["POST"]),  # before the page's route
        Route("/tasks/{task_id:path}", task),  # a task id may hold '/' (ids are the callers')
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
    app = Starlette(routes=routes, middleware=middleware)
    app.state.refusals = refusals
    return app


def _source(request: Request) -> str:
    """Who is asking, for per-source limits: the peer's address (a proxy's, behind one)."""
    return request.client.host if request.client is not None else "unknown"


class _Attempts:
    """A token bucket per source address (sign-in attempts)."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float]) -> None:
        self.per_second, self.burst, self.clock = per_second, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, source: str) -> float | None:
        """Spend one attempt of ``source``: None when allowed, else the seconds to wait."""
        now = self.clock()
        tokens, at = self._buckets.get(source, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_second)
        if tokens < 1.0:
            self._buckets[source] = (tokens, now)
            return (1.0 - tokens) / self.per_second
        self._buckets[source] = (tokens - 1.0, now)
        if len(self._buckets) > 10_000:  # forget full buckets now and then
            rate, burst = self.per_second, self.burst
            self._buckets = {k: (t, a) for k, (t, a) in self._buckets.items() if t + (now - a) * rate < burst}
        return None


def _no_path(text: str, location: str) -> str:
    """``text`` without the server's audit directory (the page never shows server paths)."""
    return text.replace(location, "<audit log>") if location else text


def _verdict_line(node: NodeVerdict, location: str) -> str:
    """One node's verification, as :meth:`NodeVerdict.describe` without the file it read."""
    if node.ok:
        return f"OK {node.node}: {node.events} events, {node.checkpoints} signed checkpoints"
    return _no_path(f"FAIL {node.node}: {node.error} at {node.where}", location)


def _may_sign(person: Person) -> bool:
    """Signing a checkpoint is an auditor's act (it vouches for the log up to now)."""
    return HumanRole.AUDITOR in person.roles


def _when(value: str, name: str) -> datetime | None:
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput.single(name, "an ISO date or time, e.g. 2026-11-30 or 2026-11-30T18:00") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)
