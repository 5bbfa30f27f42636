"""The HTTP API of ``dprivacy serve`` (FastAPI).

Every endpoint but ``/v1/health`` needs ``Authorization: Bearer <key>`` (401 without a valid key).
A source the analyst may not use gets the same 404 as a source that does not exist. Errors are one JSON line
``{"error": "<class>", "message": "<one line>"}`` whose text depends only on the request.

* ``GET /v1/health``: liveness (no key needed);
* ``GET /v1/sources``: the sources this analyst may query, with their kind;
* ``GET /v1/sources/{name}``: a source's public schema and kind;
* ``GET /v1/sources/{name}/release``: the owner's universe and metric for d_X releases on the
  source (public; :mod:`dprivacy.service.releases`);
* ``POST /v1/schema`` ``{"v": 1, "table": ...}``: the public schema of a derived table;
* ``POST /v1/budget`` ``{"v": 1, "table": ...}``: the analyst's remaining PINQ budget;
* ``POST /v1/query`` ``{"v": 1, "table": ..., "query": ...}``: ``{"value": ...}``, released at
  the query's deadline (:mod:`dprivacy.service.runner`).

A refused request (a malformed plan, a plan above the service's capacity, an operation the
table refuses, a forbidden source) is answered at the default deadline ``query_seconds`` after
it arrived, on every endpoint that takes a plan. A query (or a budget read) sent while the
analyst's previous query has not reached its deadline is refused at once with 429 and
``Retry-After`` (:mod:`dprivacy.service.lanes`), charging nothing.

No endpoint returns records, per-person budgets or the ledger. Request bodies larger than the
configured cap are refused while they are read (413), before any parsing.

A request's arrival is stamped when the bytes completing its headers are received
(:func:`stamped_protocol`, which ``dprivacy serve`` runs; otherwise by the outermost middleware,
when the request's task first runs), before its body is read. The event loop only reads
requests and releases answers: every plan is parsed, checked, bounded and decided in the
analyst's own decider process (:mod:`dprivacy.service.deciders`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from dprivacy.service.auth import authenticate
from dprivacy.service.config import AnalystConfig, ServiceConfig
from dprivacy.service.decide import no_source as _no_source
from dprivacy.service.runner import Outcome, Runner
from dprivacy.service.workbound import cpu_fractions, deadline_seconds

__all__ = ["create_app", "stamped_protocol"]

_MAX_MSG = 400


class _Refusal(Exception):
    def __init__(self, status: int, error: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers = headers


def one_line(msg: str) -> str:
    """``msg`` on one line, at most 400 characters."""
    s = " ".join(str(msg).split())
    return s if len(s) <= _MAX_MSG else s[: _MAX_MSG - 3] + "..."


def stamped_protocol() -> type:
    """uvicorn's h11 HTTP protocol, stamping ``scope["state"]["arrived"]``
    (``time.monotonic()``) when the bytes that complete a request's headers are received: the
    arrival does not wait for the event loop to run the request's task (behind other requests
    that arrived at the same moment) nor for the body."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class StampedH11Protocol(H11Protocol):
        def data_received(self, data: bytes) -> None:
            now = time.monotonic()
            before = getattr(self, "scope", None)
            super().data_received(data)
            scope = getattr(self, "scope", None)
            if scope is not None and scope is not before:  # a request's headers, just read
                scope.setdefault("state", {})["arrived"] = now

    return StampedH11Protocol


class _Arrival:
    """The outermost ASGI middleware: stamps ``scope["state"]["arrived"]``
    (``time.monotonic()``) when the request's task first runs, unless the HTTP protocol
    stamped it when its headers were read (:func:`stamped_protocol`). If the service traces
    its queries, ``written(record, moment)`` is called with a query's trace record
    (``scope["state"]["trace"]``) and the moment its response's last bytes were written to the
    transport; otherwise the response is sent untouched."""

    def __init__(self, app: Any, written: Callable[[dict[str, Any], float], None] | None = None
                 ) -> None:
        self.app, self.written = app, written

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state.setdefault("arrived", time.monotonic())
        written = self.written
        if written is None:
            await self.app(scope, receive, send)
            return

        async def sent(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                rec = state.pop("trace", None)
                if rec is not None:
                    written(rec, time.monotonic())

        await self.app(scope, receive, sent)


def _arrived(request: Request) -> float:
    return float(request.scope.get("state", {}).get("arrived", time.monotonic()))


def _error_response(exc: _Refusal) -> JSONResponse:
    """A refusal's response: one JSON line ``{"error", "message"}`` with its status."""
    return JSONResponse({"error": exc.error, "message": one_line(exc.message)},
                        status_code=exc.status, headers=exc.headers)


def _json_value(v: Any) -> Any:
    if isinstance(v, list):  # a release: one answer per query
        return [_json_value(x) for x in v]
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def create_app(cfg: ServiceConfig, runner: Runner | None = None, realtime: bool = False
               ) -> Any:
    """The FastAPI application serving ``cfg`` (opens every source and ledger now).

    Parameters:
        cfg: the configuration (see :mod:`dprivacy.service.config`).
        runner: an existing :class:`~dprivacy.service.runner.Runner` (tests); None builds one.
        realtime: the runner built here gives its threads real-time priority where the system
            allows it (:mod:`dprivacy.service.realtime`; ``dprivacy serve`` does).
    """
    run = runner if runner is not None else Runner(cfg, realtime=realtime)
    cfg = run.cfg  # with the costs measured at start, if the configuration asks for it
    app = FastAPI(title="dprivacy", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runner = run
    fractions = cpu_fractions(cfg)  # the analysts' CPU fractions, once (not at each query)
    app.add_middleware(_Arrival, written=run.trace_written if run.traced else None)

    @app.exception_handler(_Refusal)
    async def _refused(request: Request, exc: _Refusal) -> JSONResponse:
        return _error_response(exc)

    def who(request: Request) -> AnalystConfig:
        a = authenticate(request.headers.get("authorization"), cfg.analysts)
        if a is None:
            raise _Refusal(401, "AuthenticationError", "a valid key is required "
                           "(Authorization: Bearer <key>)")
        return a

    def no_source(name: str) -> _Refusal:
        """The one answer for a source that does not exist or that the analyst may not use."""
        return refused(_no_source(name))

    def refused(r: tuple[Any, ...]) -> _Refusal:
        """A decider's refusal ``("refused", status, class, message)``."""
        return _Refusal(int(r[1]), str(r[2]), str(r[3]))

    async def body(request: Request) -> bytes:
        cap = cfg.max_body_bytes
        cl = request.headers.get("content-length")
        if cl is not None and (not cl.isdigit() or int(cl) > cap):
            raise _Refusal(413, "ValidationError", f"the request is larger than {cap} bytes")
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > cap:
                raise _Refusal(413, "ValidationError", f"the request is larger than {cap} bytes")
        return bytes(buf)

    async def ask(a: AnalystConfig, op: str, *args: Any) -> tuple[Any, ...]:
        """The analyst's decider's reply; its refusal raised as one."""
        try:
            out = await run.ask(a.name, op, *args)
        except RuntimeError:
            raise _Refusal(500, "ServiceError", "the service failed to handle this request; "
                           "nothing was charged") from None
        if out[0] == "refused":
            raise refused(out)
        return out

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/v1/sources")
    async def sources(request: Request) -> dict[str, Any]:
        a = who(request)
        return {"sources": [{"name": s.name, "kind": s.kind} for s in cfg.sources
                            if a.may_use(s.name)]}

    def usable(request: Request, name: str) -> tuple[AnalystConfig, Any]:
        """The caller and the source ``name`` if the caller may use it; a one-line refusal
        otherwise."""
        a = who(request)
        src = cfg.source(name)
        if src is None or not a.may_use(name):
            raise no_source(name)
        return a, src

    @app.get("/v1/sources/{name}")
    async def source(name: str, request: Request) -> dict[str, Any]:
        a, src = usable(request, name)
        out = await ask(a, "schema", None, name)
        return {"name": name, "kind": src.kind, "schema": out[1]}

    @app.get("/v1/sources/{name}/release")
    async def release_inputs(name: str, request: Request) -> dict[str, Any]:
        usable(request, name)
        inputs = run.releases.get(name)
        if inputs is None:
            raise _Refusal(422, "UnsupportedOperationError", f"source {name!r} has no release "
                           "universe and metric (the data owner configures [source.release])")
        return dict(inputs.public)

    async def held(arrived: float) -> None:
        """Refusals come at the default deadline: their time says nothing, not even about the
        service's own state."""
        await asyncio.sleep(max(0.0, arrived + cfg.query_seconds - time.monotonic()))

    def lane_full(a: AnalystConfig, wait: float) -> _Refusal:
        """Refused at once: the analyst's lane holds a query until its deadline."""
        return _Refusal(429, "ServiceBusyError",
                        f"analyst {a.name!r} has a query in flight: one at a time; retry in "
                        f"{wait:.3f} s", headers={"Retry-After": str(max(1, math.ceil(wait)))})

    @app.post("/v1/schema")
    async def schema(request: Request) -> dict[str, Any]:
        arrived = _arrived(request)
        a = who(request)
        try:
            return {"schema": (await ask(a, "schema", await body(request)))[1]}
        except _Refusal:  # held to the default deadline
            await held(arrived)
            raise

    @app.post("/v1/budget")
    async def budget(request: Request) -> dict[str, Any]:
        arrived = _arrived(request)
        a = who(request)
        # the budget moves when a query is decided: not read while one is in flight
        wait = run.lanes.busy_for(a.name, arrived)
        try:
            out = await ask(a, "budget", await body(request), wait)
        except _Refusal:  # held to the default deadline
            await held(arrived)
            raise
        if out[0] == "busy":
            raise lane_full(a, float(out[1]))
        return {"remaining": out[1]}

    def _response(out: Outcome) -> JSONResponse:
        """The query's response, built at its cutoff (before the deadline)."""
        if out.error is not None:
            return _error_response(refused(out.error))
        return JSONResponse({"value": _json_value(out.value)})

    @app.post("/v1/query", response_model=None)
    async def query(request: Request) -> JSONResponse:
        arrived = _arrived(request)
        a = who(request)
        wait = run.lanes.busy_for(a.name, arrived)
        if wait > 0:  # refused at once, before the body is even read
            raise lane_full(a, wait)
        try:  # parsed, checked and bounded (from the plan and the caps only) by the decider
            raw = await body(request)
            _ok, token, bound, names, release = await ask(a, "bound", raw)
        except _Refusal as exc:  # refusals, too, come at the (default) deadline
            if exc.status != 500:
                await held(arrived)
            raise
        deadline = arrived + deadline_seconds(cfg, a.name, bound, set(names), release=release,
                                              body_bytes=len(raw), fractions=fractions)
        wait = run.lanes.admit(a.name, arrived, deadline)
        if wait > 0:
            raise lane_full(a, wait)
        out = await run.query(a.name, token, raw, arrived, deadline, render=_response)
        if out.trace is not None:  # completed when the response is written (_Arrival)
            request.scope["state"]["trace"] = out.trace
        return out.response

    return app
