"""The aggregator service: publishes queries and collects replies (JSON over HTTP, FastAPI).

Endpoints (``Authorization: Bearer <credential>``; 401 without a valid one, 403 with the wrong
kind or for another analyst's query):

* ``POST /queries``: an analyst publishes a query (the JSON of :meth:`Query.to_dict`, UTF-8;
  size-, depth- and text-checked in every part, validated; its ``publisher`` is the key's
  analyst);
* ``GET /queries?after=k``: a device reads the queries published after position k (ids
  namespaced per analyst: ``alice/q1``); an analyst reads only their own, under their own ids;
* ``POST /replies``: a device sends its own reply ``{query, status, cost, result}`` (schema
  checked; the first answer per user and query is kept);
* ``GET /replies/{id}?after=k``: an analyst reads a page of the replies to one of *their*
  queries, named by their own id (another analyst's ids are not found: 404);
* ``GET /health``: liveness (no credential).

Credentials are issued by the operator: :meth:`AggregatorStore.add_analyst` (an API key) and
:meth:`AggregatorStore.enrol` (a device's token), or ``dprivacy local credentials``. The state is
in SQLite (:class:`AggregatorStore`), so a restarted server keeps it. Request bodies are capped
while they are read (:class:`BodyLimit`); parsing, validation and every database call run in the
thread pool, so a slow or hostile request never blocks the event loop that answers the others.

The service sees only replies, which are already randomised on the users' devices.
Privacy condition: none here (everything it holds is post-processing of the users' replies).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool

from dprivacy.errors import DPrivacyError
from dprivacy.local.aggregator.errors import ConflictError, ForbiddenError, UnknownError
from dprivacy.local.aggregator.middleware import BodyLimit
from dprivacy.local.aggregator.store import AggregatorStore, Principal, local_id
from dprivacy.local.limits import safe_text

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

#: Largest request body accepted (bytes).
DEFAULT_MAX_BODY = 8 << 20
_MAX_POS = 1 << 62


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(raw: bytes) -> Any:
    """JSON from a UTF-8 body (no other encoding, no NaN or infinity)."""
    return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)


def create_app(store: AggregatorStore | None = None, *, max_body: int = DEFAULT_MAX_BODY,
               body_timeout: float = 30.0) -> Any:
    """The FastAPI application of the aggregator (``app.state.store`` holds the state).

    Parameters
    ----------
    store : AggregatorStore, optional
        Default: a new in-memory store (lost when the process ends).
    max_body : int
        Largest request body in bytes (413 above it).
    body_timeout : float
        Seconds a client has to send its body (408 after it).

    Examples
    --------
    >>> app = create_app()
    >>> sorted(r.path for r in app.routes if r.path.startswith(("/queries", "/replies")))
    ['/queries', '/queries', '/replies', '/replies/{qid:path}']
    """
    app = FastAPI(title="dprivacy aggregator (PreTPost)")
    app.add_middleware(BodyLimit, max_bytes=max_body, timeout=body_timeout)
    st = store if store is not None else AggregatorStore()
    app.state.store = st

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the thread pool, its errors as HTTP statuses."""
        try:
            return await run_in_threadpool(fn, *args)
        except UnknownError as exc:
            raise HTTPException(404, safe_text(exc, 2000)) from exc
        except ForbiddenError as exc:
            raise HTTPException(403, safe_text(exc, 2000)) from exc
        except ConflictError as exc:
            raise HTTPException(409, safe_text(exc, 2000)) from exc
        except (DPrivacyError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                RecursionError) as exc:
            raise HTTPException(400, safe_text(exc, 2000) or type(exc).__name__) from exc

    async def caller(request: Request, *kinds: str) -> Principal:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        who = None
        if scheme.lower() == "bearer" and 0 < len(token) <= 256:
            who = await run_in_threadpool(st.authenticate, token.strip())
        if who is None:
            raise HTTPException(401, "a valid credential is required (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})
        if who.kind not in kinds:
            raise HTTPException(403, f"an {who.kind} credential cannot do this")
        return who

    async def body(request: Request) -> Any:
        return await call(_loads, await request.body())

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True}

    @app.post("/queries")
    async def publish(request: Request) -> dict[str, Any]:
        who = await caller(request, "analyst")
        pos, full = await call(st.publish, who.name, await body(request))
        return {"position": pos, "id": local_id(who.name, full), "device_id": full,
                "publisher": who.name}

    @app.get("/queries")
    async def queries(request: Request, after: int = Query(0, ge=0, le=_MAX_POS),  # noqa: B008
                      limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:  # noqa: B008
        who = await caller(request, "device", "analyst")
        qs, nxt = await call(st.since, after, limit, who.name if who.kind == "analyst" else None)
        return {"after": after, "next": nxt, "queries": qs}

    @app.post("/replies")
    async def reply(request: Request) -> dict[str, Any]:
        who = await caller(request, "device")
        return {"stored": await call(st.reply, who.name, await body(request))}

    @app.get("/replies/{qid:path}")
    async def replies(request: Request, qid: str, after: int = Query(0, ge=0, le=_MAX_POS),  # noqa: B008
                      limit: int = Query(100_000, ge=1, le=100_000)) -> dict[str, Any]:  # noqa: B008
        who = await caller(request, "analyst")
        out, nxt = await call(st.collected, who.name, qid, after, limit)
        return {"query": qid, "after": after, "next": nxt, "replies": out}

    return app
