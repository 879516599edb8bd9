"""The dashboard's web app (Starlette): the pages, their JSON endpoints and the event stream.

Safety, for a server any local web page could try to reach:

* it answers only to its own host names (:class:`HostCheck`), so a DNS-rebinding page cannot
  read it;
* what changes something (control, answers) needs the dashboard's control key in the
  ``X-Hankweave-Key`` header: a cross-origin page cannot send that header without a CORS
  preflight this app never grants, and without the key nothing is changed.  The key is printed
  by ``hankweave dashboard`` and entered on the page to unlock control; a run's own control
  token never leaves this process;
* an action link (``/act#TOKEN``, :mod:`hankweave_dashboard.act`) is its own credential: its
  two endpoints take the signed token in a JSON body instead of the key.  A cross-site form
  cannot send JSON, and a request another site's page makes (its ``Origin``) is refused;
* every error is a JSON ``{"error": …}`` with its status (400 malformed, 404 unknown, 409 not
  now, 403 locked or forged, 410 an expired link), never a traceback; the pages' scripts render data as text, never as HTML,
  under a Content-Security-Policy that allows only this origin's scripts.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hankweave.api import host_allowed, host_name
from hankweave_dashboard import act, actions, compare, pages
from hankweave_dashboard.budgets import BudgetCache
from hankweave_dashboard.catalog import BadRequest, Catalog, NotFound
from hankweave_dashboard.diffs import Busy, Differ, DiffError
from hankweave_dashboard.live import sse_stream
from hankweave_dashboard.resume import Resumer

log = logging.getLogger("hankweave.dashboard")

M = TypeVar("M", bound=BaseModel)

KEY_HEADER = "x-hankweave-key"
MAX_BODY = 64 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none';"
                               " base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class Settings:
    roots: list[Path]
    control_key: str | None
    """None: read-only (control cannot be unlocked)."""
    allowed_hosts: list[str]
    resumer: Resumer = field(default_factory=Resumer)
    """How an execution a link answered goes on when no runtime runs it."""


class Forbidden(Exception):
    """Control is locked: no key, or a wrong one (HTTP 403)."""


_STATUS: dict[type[Exception], int] = {
    BadRequest: 400, Forbidden: 403, NotFound: 404, Busy: 409, actions.ActionRefused: 409,
    actions.NoRuntime: 409, DiffError: 500, compare.CannotCompare: 400,
    act.LinkForged: 403, act.LinkExpired: 410, act.LinkKeyError: 500,
}


def create_app(settings: Settings) -> Starlette:
    """The dashboard over the executions below ``settings.roots`` (Starlette's application
    factory: the routes are :class:`Endpoints`' methods)."""
    endpoints = Endpoints(settings)
    return Starlette(routes=endpoints.routes(), lifespan=endpoints.lifespan,
                     middleware=[Middleware(HostCheck, allowed=settings.allowed_hosts)],
                     exception_handlers={404: _not_found, 405: _not_found})


class Endpoints:
    """The pages, JSON endpoints and event stream of one dashboard, with what they share: the
    catalogue of executions, the diff worker and the budget cache."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.catalog = Catalog(settings.roots)
        self.differ = Differ()
        self.budgets = BudgetCache()
        self.static = resources.files("hankweave_dashboard") / "static"

    def routes(self) -> list[Route | Mount]:
        base = "/api/executions/{ident}"
        codon_base = base + "/runs/{run}/codons/{codon}"
        return [
            Route("/", self._page("index.html")),
            Route("/executions/{ident}", self._page("execution.html")),
            Route("/compare", self.compare_page),
            Route("/act", self._page("act.html")),
            Route("/api/executions", _api(self.list_executions)),
            Route("/api/compare", _api(self.show_comparison)),
            Route(base, _api(self.show_execution)),
            Route(base + "/budget", _api(self.show_budget)),
            Route(base + "/events", _api(self.stream_events)),
            Route(codon_base + "/log", _api(self.show_log)),
            Route(codon_base + "/diff", _api(self.show_diff)),
            Route(codon_base + "/sentinels", _api(self.show_sentinels)),
            Route("/api/unlock", _api(self.unlock), methods=["POST"]),
            Route(base + "/control", _api(self.control), methods=["POST"]),
            Route(base + "/interruptions/{interruption}/answer", _api(self.answer),
                  methods=["POST"]),
            Route("/api/act/preview", _api(self.preview_link), methods=["POST"]),
            Route("/api/act", _api(self.act_on_link), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(self.static)), name="static"),
        ]

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.differ.close()

    def _page(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            if "ident" in request.path_params:
                try:
                    await _run_blocking(self._execution, request)
                except (BadRequest, NotFound) as exc:
                    return not_found_page(str(exc))
            return self._html(name)
        return serve

    def _html(self, name: str) -> Response:
        response = FileResponse(str(self.static / name), media_type="text/html")
        response.headers.update(SECURITY_HEADERS)
        return response

    async def compare_page(self, request: Request) -> Response:
        """The compare page, once both ids name executions this dashboard serves (its script
        then asks ``/api/compare``, which can take a moment)."""
        try:
            a, b = compare.idents(dict(request.query_params))
            await _run_blocking(self.catalog.path_of, a)
            await _run_blocking(self.catalog.path_of, b)
        except BadRequest as exc:
            return problem_page(400, "Cannot compare", str(exc))
        except NotFound as exc:
            return not_found_page(str(exc))
        return self._html("compare.html")

    def _execution(self, request: Request) -> tuple[str, Path]:
        ident = request.path_params["ident"]
        return ident, self.catalog.path_of(ident)

    def _codon(self, request: Request) -> tuple[Path, str, str]:
        _, path = self._execution(request)
        return path, request.path_params["run"], request.path_params["codon"]

    # ----- reading -----

    async def list_executions(self, request: Request) -> Any:
        rows = await _run_blocking(self.catalog.rows)
        return {"roots": [str(root) for root in self.catalog.roots], "executions": rows,
                "control": self.settings.control_key is not None}

    async def show_execution(self, request: Request) -> Any:
        ident, path = self._execution(request)
        data = await _run_blocking(pages.execution_page, ident, path, self.catalog.served_id)
        data["controlAvailable"] = self.settings.control_key is not None
        return data

    async def show_comparison(self, request: Request) -> Any:
        a, b = compare.idents(dict(request.query_params))
        return await _run_blocking(compare.comparison, self.catalog, a, b)

    async def show_budget(self, request: Request) -> Any:
        _, path = self._execution(request)
        return await _run_blocking(self.budgets.report, path)

    async def show_log(self, request: Request) -> Any:
        return await _run_blocking(pages.conversation, *self._codon(request))

    async def show_diff(self, request: Request) -> Any:
        return await _run_blocking(self.differ.codon_diff, *self._codon(request))

    async def show_sentinels(self, request: Request) -> Any:
        return await _run_blocking(pages.sentinel_outputs, *self._codon(request))

    async def stream_events(self, request: Request) -> Any:
        _, path = self._execution(request)
        after = _after_seq(request)
        return StreamingResponse(sse_stream(path, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    # ----- changing (behind the control key) -----

    async def unlock(self, request: Request) -> Any:
        _check_key(request, self.settings)
        return {"ok": True, "message": "Control unlocked"}

    async def control(self, request: Request) -> Any:
        _check_key(request, self.settings)
        _, path = self._execution(request)
        body = await _body(request, actions.ControlBody)
        return await actions.control(path, body)

    async def answer(self, request: Request) -> Any:
        _check_key(request, self.settings)
        _, path = self._execution(request)
        interruption = request.path_params["interruption"]
        if not pages.NAME_PATTERN.match(interruption):
            raise BadRequest(f"{interruption!r} is not an interruption id")
        body = await _body(request, actions.AnswerBody)
        return await actions.answer(path, interruption, body)

    # ----- acting from a message (the link is the credential, not the key) -----

    async def preview_link(self, request: Request) -> Any:
        """What a link will do; nothing is changed."""
        claim = await self._claim(request)
        return await _run_blocking(act.preview, self.catalog, claim)

    async def act_on_link(self, request: Request) -> Any:
        """Do what a link says, once."""
        claim = await self._claim(request)
        return await act.act(self.catalog, claim, self.settings.resumer)

    async def _claim(self, request: Request) -> Any:
        """The verified claim of the request's link (an ``ActionClaim``)."""
        if self.settings.control_key is None:
            raise Forbidden("this dashboard is read-only (started with --read-only): links"
                            " cannot act through it")
        _same_origin(request)
        body = await _body(request, act.LinkBody)
        return await _run_blocking(act.verified, body.token)


def _api(handler: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint answering ``handler``'s result as JSON, and its known errors as
    ``{"error": …}`` with their status (a bug is logged, never sent)."""
    async def endpoint(request: Request) -> Response:
        try:
            result = await handler(request)
        except tuple(_STATUS) as exc:
            return _error(_STATUS[type(exc)], str(exc))
        except Exception:  # a bug: logged with its traceback here, never sent
            log.exception("dashboard request %s failed", request.url.path)
            return _error(500, "internal error in the dashboard; its terminal has the"
                               " details")
        if isinstance(result, Response):
            return result
        return _json(result)
    return endpoint


async def _run_blocking(function: Callable[..., Any], *args: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(function, *args)


async def _not_found(request: Request, exc: Exception) -> Response:
    code = exc.status_code if isinstance(exc, HTTPException) else 404
    detail = exc.detail if isinstance(exc, HTTPException) else "not found"
    if code == 404:
        detail = f"no such page: {request.url.path}"
        if not request.url.path.startswith("/api/") and _wants_html(request):
            return not_found_page(str(detail))
    return _error(code, str(detail))


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def not_found_page(message: str) -> Response:
    """A 404 a person reads: what is not here, and the way back to the list."""
    return problem_page(404, "Not found", message)


def problem_page(status: int, heading: str, message: str) -> Response:
    """An error page a person reads: what went wrong, and the way back to the list."""
    from html import escape

    body = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>hankweave · {escape(heading.lower())}</title>"
            "<link rel=\"icon\" href=\"data:,\">"
            "<link rel=\"stylesheet\" href=\"/static/app.css\"></head><body>"
            "<header class=\"bar\"><a class=\"brand\" href=\"/\">hankweave</a></header>"
            f"<main class=\"not-found\"><h1>{escape(heading)}</h1>"
            f"<p class=\"error\" id=\"problem\">{escape(message)}</p>"
            "<p><a href=\"/\">Back to the list of executions</a></p></main></body></html>")
    return Response(body, status_code=status, media_type="text/html", headers=SECURITY_HEADERS)


class HostCheck:
    """Refuse a request whose ``Host`` is not one of the dashboard's own names (400); the rule
    is the kernel's (``hankweave.api.host_allowed``), shared with the run's WebSocket server."""

    def __init__(self, app: Any, allowed: list[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not host_allowed(header, self.allowed):
                response = _error(400, f"this dashboard answers to {', '.join(sorted(self.allowed))}"
                                       f" only, not to the host {host_name(header)!r}")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return Response(body, status_code=status, media_type="application/json",
                    headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


def _error(status: int, message: str) -> Response:
    return _json({"error": message, "status": status}, status)


def _after_seq(request: Request) -> int:
    """Where the stream resumes: ``Last-Event-ID`` (a reconnecting browser), else ``afterSeq``."""
    raw = request.headers.get("last-event-id") or request.query_params.get("afterSeq") or "0"
    if not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"afterSeq must be a seq (a whole number >= 0), not {raw!r}")
    return int(raw)


def _check_key(request: Request, settings: Settings) -> None:
    if settings.control_key is None:
        raise Forbidden("this dashboard is read-only (started with --read-only)")
    given = request.headers.get(KEY_HEADER, "")
    if not given or not hmac.compare_digest(given.encode(), settings.control_key.encode()):
        raise Forbidden("control is locked: unlock it with the control key `hankweave"
                        " dashboard` printed")


def _same_origin(request: Request) -> None:
    """Refuse a request a page of another site makes (a browser names it in ``Origin``)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "").lower()
    if origin is not None and urlsplit(origin.lower()).netloc != host:
        raise Forbidden("a page of another site cannot act through this dashboard")


async def _bounded_body(request: Request) -> bytes:
    """The body, read no further than :data:`MAX_BODY` (some endpoints take requests without
    the control key: a huge body must not fill the dashboard's memory)."""
    too_large = BadRequest(f"the body is larger than {MAX_BODY // 1024} KiB")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise too_large
    return bytes(raw)


async def _body(request: Request, model: type[M]) -> M:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise BadRequest("the body must be JSON (Content-Type: application/json)")
    raw = await _bounded_body(request)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise BadRequest(f"bad request body: {problems}") from None
