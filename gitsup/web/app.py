"""The Starlette application of `git sup serve`: pages, server-sent events, the JSON API.

A thin layer like the CLI: each route reads through the same functions as `show`, `ls` and
`report`, and each action calls the same use case as its command (gitsup/tasks/human.py,
lifecycle.stop_task, integration.integrate, tasks.queue_state.add); nothing here decides anything.
Every request passes `Gate` first (gitsup/web/auth.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from http.cookies import SimpleCookie
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gitsup.errors import GitsupError
from gitsup.web import views
from gitsup.web.auth import CSRF_HEADER, Guard

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gitsup.attention.fold import TaskStatus, Tracker
    from gitsup.store.suprepo import SupRepo

API_VERSION = 1
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
STATIC = {"page.js": "text/javascript", "page.css": "text/css"}
KEEPALIVE = 15.0


class Gate:
    """ASGI middleware: the token (query once, then cookie; or Bearer), the Host, the
    Origin, and for a POST with the cookie the CSRF header. Also the security headers of
    every answer. Sets `scope["state"]["via"]`: "web" (the page) or "api" (Bearer)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        g = self.guard
        path: str = scope["path"]
        api = path.startswith("/api/")

        async def refuse(code: int, why: str) -> None:
            body: Response
            if api or code != 401:
                body = JSONResponse({"api": API_VERSION, "error": why}, status_code=code)
            else:
                body = HTMLResponse(
                    "<!DOCTYPE html><title>gitsup</title><p>"
                    f"{why}: open the URL that <code>git sup serve</code> printed</p>",
                    status_code=401,
                )
            if code == 401:
                body.headers["WWW-Authenticate"] = 'Bearer realm="gitsup"'
            await _secured(body)(scope, receive, send)

        if not g.host_ok(headers.get("host")):
            # Another name for this address (DNS rebinding): a foreign page must not read.
            await refuse(421, "misdirected request: not this server's host name")
            return
        if not g.origin_ok(headers.get("origin")):
            await refuse(403, "cross-origin request refused")
            return
        method = scope["method"]
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:
            cookie = SimpleCookie()
        from_cookie = cookie[g.cookie].value if g.cookie in cookie else None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        from_query = (query.get("token") or [None])[0]
        if bearer is not None:
            if not g.token_ok(bearer):
                await refuse(401, "wrong token")
                return
            via = "api"
        elif from_query is not None and method in ("GET", "HEAD") and not api:
            if not g.token_ok(from_query):
                await refuse(401, "wrong token")
                return
            # Once: the cookie, and the same page without the token in its address.
            rest = {k: v for k, v in query.items() if k != "token"}
            target = path + ("?" + urlencode(rest, doseq=True) if rest else "")
            resp = RedirectResponse(target, status_code=303)
            resp.set_cookie(
                g.cookie,
                g.token,
                httponly=True,
                samesite="strict",
                secure=g.secure,
                path="/",
            )
            await _secured(resp)(scope, receive, send)
            return
        elif from_cookie is not None and g.token_ok(from_cookie):
            via = "web"
            if method not in ("GET", "HEAD"):
                # A browser sends the cookie on its own: the request must also carry what
                # only this server's pages know, from this server's origin.
                if headers.get("origin") is None:
                    await refuse(403, "a state change needs an Origin header")
                    return
                if not g.csrf_ok(headers.get(CSRF_HEADER)):
                    await refuse(403, "missing or wrong CSRF token")
                    return
        else:
            await refuse(401, "a token is needed")
            return
        scope.setdefault("state", {})["via"] = via

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                hs = list(message.get("headers", []))
                have = {k.lower() for k, _ in hs}
                for k, v in _HEADERS.items():
                    if k.encode() not in have:
                        hs.append((k.encode(), v.encode()))
                message["headers"] = hs
            await send(message)

        await self.app(scope, receive, send_secured)


_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def _secured(resp: Response) -> Response:
    for k, v in _HEADERS.items():
        resp.headers.setdefault(k, v)
    return resp


def _templates() -> Any:
    from jinja2 import Environment, FileSystemLoader

    root = files("gitsup.data") / "web"
    env = Environment(loader=FileSystemLoader(str(root)), autoescape=True)
    return env


class Api(Exception):
    """An answer of the API other than 200: its status and what to say."""

    def __init__(self, status: int, error: str, hint: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.hint = status, error, hint


Handler = Callable[["Web", Request, str, Mapping[str, Any]], dict[str, Any]]


class Web:
    """The routes, over one repository."""

    def __init__(
        self, ctx: SupRepo, guard: Guard, stopping: Callable[[], bool] = lambda: False
    ) -> None:
        from gitsup.web.feed import Feed

        self.ctx, self.guard = ctx, guard
        self.stopping = stopping  # the server is shutting down: event streams end
        self.env = _templates()
        # One fold of every task for the index, the API and every event stream, kept across
        # requests (gitsup/web/feed.py)
        self.feed = Feed(ctx.layout)

    def rows(self) -> list[TaskStatus]:
        """Every task's status, needs-human first."""
        return self.feed.rows()

    # --- helpers -----------------------------------------------------------------------

    def _task_id(self, raw: str) -> str:
        try:
            tid = self.ctx.store.resolve(raw)
        except GitsupError as exc:
            raise Api(404, exc.message) from None
        if not self.ctx.layout.record(tid).is_file():
            raise Api(404, f"no task {raw} in this repository")
        return str(tid)

    def _page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(csrf=self.guard.csrf, **values)
        return HTMLResponse(html, status_code=status)

    # --- pages -------------------------------------------------------------------------

    def index(self, request: Request) -> Response:
        rows = self.rows()
        return self._page(
            "index.html",
            rows=rows,
            groups=views.groups(self.ctx),
            where=str(self.ctx.repo.main_workdir),
        )

    def group(self, request: Request) -> Response:
        try:
            g = views.group(self.ctx, request.path_params["group"])
        except GitsupError as exc:
            return self._page("missing.html", 404, message=exc.message)
        return self._page("group.html", g=g)

    def task(self, request: Request) -> Response:
        from gitsup.tasks.report import collect

        try:
            tid = self._task_id(request.path_params["task"])
        except Api as exc:
            return self._page("missing.html", 404, message=exc.error)
        try:
            data = collect(self.ctx, tid)
        except GitsupError as exc:
            return self._page("missing.html", 404, message=exc.message)
        tracked = _tracker(self.ctx, tid)
        s = data.show
        review = s.get("review") if isinstance(s.get("review"), Mapping) else None
        findings = [f for f in (review or {}).get("findings") or [] if isinstance(f, Mapping)]
        files = views.diff_files(data.diff, findings)
        return self._page(
            "task.html",
            t=s,
            tid=tid,
            data=data,
            verdict=views.verdict(s),
            review=review,
            findings=findings,
            files=files,
            tree=views.tree(files),
            timeline=views.timeline(data),
            integration=views.integration(data),
            budget_paused=bool(tracked.budget_paused) and not tracked.ended,
            attention=list(tracked.attention()),
        )

    def event(self, request: Request) -> Response:
        from gitsup.tasks.report import collect

        try:
            tid = self._task_id(request.path_params["task"])
        except Api as exc:
            return JSONResponse({"error": exc.error}, status_code=404)
        ev = views.event_of(collect(self.ctx, tid), int(request.path_params["seq"]))
        if ev is None:
            return JSONResponse({"error": "no such event"}, status_code=404)
        text = json.dumps(ev, ensure_ascii=False, indent=2, default=str)
        return PlainTextResponse(text, media_type="application/json")

    def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return PlainTextResponse("not found", status_code=404)
        body = (files("gitsup.data") / "web" / name).read_bytes()
        return Response(body, media_type=STATIC[name])

    async def events(self, request: Request) -> Response:
        """Server-sent events: `rows`, every task's status (as `GET /api/tasks`), each time
        one of them changes. Every stream reads the server's one view (gitsup/web/feed.py):
        however many pages are open, the tasks are read once per poll."""
        import anyio

        from gitsup.web.feed import POLL

        feed = self.feed

        async def stream() -> AsyncIterator[str]:
            sent = 0  # the feed's version this stream last sent
            quiet = 0.0
            yield "retry: 1000\n\n"
            while not self.stopping() and not await request.is_disconnected():
                if sent == 0 or feed.due() == 0.0:
                    await anyio.to_thread.run_sync(feed.poll)
                if feed.version != sent:
                    sent, payload = feed.payload()
                    quiet = 0.0
                    yield f"id: {sent}\nevent: rows\ndata: {payload}\n\n"
                elif quiet >= KEEPALIVE:
                    quiet = 0.0
                    yield ": keepalive\n\n"
                # wake when the view is due again: the first stream refreshes it, the others
                # wait for that refresh and send what it found
                pause = max(0.01, feed.due() or POLL)
                await anyio.sleep(pause)
                quiet += pause

        return StreamingResponse(stream(), media_type="text/event-stream")

    # --- API ---------------------------------------------------------------------------

    def api_tasks(self, request: Request) -> Response:
        rows = [views.row_dict(r) for r in self.rows()]
        return JSONResponse({"api": API_VERSION, "tasks": rows})

    def api_task(self, request: Request) -> Response:
        from gitsup.tasks.lifecycle import show_dict

        try:
            tid = self._task_id(request.path_params["task"])
        except Api as exc:
            return JSONResponse({"api": API_VERSION, "error": exc.error}, status_code=404)
        return JSONResponse(
            {"api": API_VERSION, "task": show_dict(self.ctx, self.ctx.store.load(tid))}
        )

    def action(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            import anyio

            try:
                raw = await request.body()
                body = json.loads(raw) if raw.strip() else {}
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                return JSONResponse(
                    {"api": API_VERSION, "error": f"the body is not a JSON object: {exc}"},
                    status_code=400,
                )
            via = str(request.scope.get("state", {}).get("via") or "api")

            def call() -> dict[str, Any]:
                tid = self._task_id(request.path_params["task"])
                return handler(self, request, tid, {**body, "_via": via})

            try:
                result = await anyio.to_thread.run_sync(call)
            except Api as exc:
                out = {"api": API_VERSION, "error": exc.error}
                if exc.hint:
                    out["hint"] = exc.hint
                return JSONResponse(out, status_code=exc.status)
            except GitsupError as exc:
                status = 400 if exc.exit_code == 2 else 503
                out = {"api": API_VERSION, "error": exc.message}
                if exc.hint:
                    out["hint"] = exc.hint
                return JSONResponse(out, status_code=status)
            status = int(result.pop("_status", 200))
            return JSONResponse({"api": API_VERSION, **result}, status_code=status)

        return run


# --- the actions: each calls the use case its command calls -------------------------------


def _str(body: Mapping[str, Any], key: str, default: str = "") -> str:
    v = body.get(key, default)
    if not isinstance(v, str):
        raise Api(400, f"{key!r} must be a string")
    return v


def _num(body: Mapping[str, Any], key: str) -> float:
    v = body.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise Api(400, f"{key!r} must be a number")
    try:
        return float(v)
    except ValueError:
        raise Api(400, f"{key!r} must be a number") from None


def do_answer(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.human import answer

    taken = answer(
        web.ctx,
        tid,
        _str(body, "request_id"),
        _str(body, "decision"),
        _str(body, "message"),
        via=body["_via"],
    )
    return {"taken": taken.as_dict()}


def do_message(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.human import send

    return {"taken": send(web.ctx, tid, _str(body, "text"), via=body["_via"]).as_dict()}


def do_continue(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.durations import parse_duration
    from gitsup.tasks.human import continue_task

    ext = body.get("extend", 0)
    if isinstance(ext, str):
        try:
            ext = parse_duration(ext) if ext.strip() else 0.0
        except ValueError as exc:
            raise Api(400, f"extend: {exc}") from None
    elif isinstance(ext, bool) or not isinstance(ext, int | float):
        raise Api(400, "'extend' is a duration (30m) or seconds")
    turns = _num(body, "add_turns")
    if turns != int(turns):
        raise Api(400, "'add_turns' must be a whole number")
    taken = continue_task(
        web.ctx,
        tid,
        add_cost_usd=_num(body, "add_cost_usd"),
        add_turns=int(turns),
        extend=float(ext),
        via=body["_via"],
    )
    return {"taken": taken.as_dict()}


def do_stop(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.lifecycle import show_dict, stop_task

    record = stop_task(web.ctx, tid)
    return {"task": show_dict(web.ctx, record)}


def do_integrate(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.integration.integrate import Strategy, integrate

    into = _str(body, "into")
    if not into:
        raise Api(400, "'into' names the target branch")
    res = integrate(
        web.ctx,
        tid,
        into,
        strategy=Strategy("auto"),
        on_progress=None,
        allow_policy_change=body.get("allow_policy_change") is True,
    )
    # Refused (2) or checks failed (3): the target is untouched; 409 with the result.
    return {"result": res.as_dict(), "_status": 200 if res.integrated else 409}


def do_queue(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.queue_state import add

    into = _str(body, "into") or None
    st = add(web.ctx, [tid], into, allow_policy_change=body.get("allow_policy_change") is True)
    return {"queue": st.as_dict()}


def do_comments(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.comments import add_comment

    line = body.get("line")
    if isinstance(line, str) and line.strip().isdigit():
        line = int(line)
    if isinstance(line, bool) or not isinstance(line, int):
        raise Api(400, "'line' must be a line number")
    comment = add_comment(
        web.ctx, tid, _str(body, "path"), line, _str(body, "message"), via=body["_via"]
    )
    return {"comment": comment}


def do_revise(web: Web, request: Request, tid: str, body: Mapping[str, Any]) -> dict[str, Any]:
    from gitsup.tasks.revise import revise

    return {"revision": revise(web.ctx, tid, _str(body, "message"), via=body["_via"])}


# `POST /api/tasks/ID/<name>`: one entry per action.
ACTIONS: dict[str, Handler] = {
    "answer": do_answer,
    "message": do_message,
    "continue": do_continue,
    "stop": do_stop,
    "integrate": do_integrate,
    "queue": do_queue,
    "comments": do_comments,
    "revise": do_revise,
}


def _tracker(ctx: SupRepo, tid: str) -> Tracker:
    """The attention fold of one task's whole log: who is needed, and why."""
    from gitsup.tasks.human import tracker

    tr: Tracker = tracker(ctx, tid)
    return tr


def routes(web: Web) -> list[BaseRoute]:
    table: list[BaseRoute] = [
        Route("/", web.index, methods=["GET"]),
        Route("/task/{task}", web.task, methods=["GET"]),
        Route("/task/{task}/event/{seq:int}", web.event, methods=["GET"]),
        Route("/group/{group}", web.group, methods=["GET"]),
        Route("/static/{name}", web.static, methods=["GET"]),
        Route("/events", web.events, methods=["GET"]),
        # Asked for by a browser on its own (e.g. showing a whole event as JSON): no icon.
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),
    ]
    # The API, at /api/ (the current version) and /api/v1/.
    for base in ("/api", f"/api/v{API_VERSION}"):
        table.append(Route(f"{base}/tasks", web.api_tasks, methods=["GET"]))
        table.append(Route(f"{base}/tasks/{{task}}", web.api_task, methods=["GET"]))
        for name, handler in ACTIONS.items():
            table.append(
                Route(f"{base}/tasks/{{task}}/{name}", web.action(handler), methods=["POST"])
            )
    return table


def make_app(ctx: SupRepo, guard: Guard, stopping: Callable[[], bool] = lambda: False) -> ASGIApp:
    web = Web(ctx, guard, stopping)
    app = Starlette(routes=routes(web))
    return Gate(app, guard)
