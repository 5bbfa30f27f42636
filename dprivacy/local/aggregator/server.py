"""The aggregator service: publishes queries and collects replies (JSON over HTTP, FastAPI).

Endpoints
---------
``POST /queries``          publish a query (the JSON of :meth:`Query.to_dict`; validated)
``GET  /queries?after=k``  the queries published after position k (agents poll this)
``POST /replies``          a user's reply ``{query, user, status, result, ...}`` (first one kept)
``GET  /replies/{query}``  the replies collected for a query
``GET  /health``           liveness

Run it with ``dprivacy local serve`` (uvicorn). The store is in memory; the service sees only
replies, which are already randomised on the users' devices (it is not trusted with data).
Privacy condition: none here (everything it holds is post-processing of the users' replies).
"""

from __future__ import annotations

import threading
from typing import Any

from dprivacy.errors import DPrivacyError
from dprivacy.local.query import Query

__all__ = ["AggregatorStore", "create_app"]


class AggregatorStore:
    """Thread-safe in-memory queries and replies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.queries: list[dict[str, Any]] = []
        self._ids: set[str] = set()
        self.replies: dict[str, dict[str, dict[str, Any]]] = {}

    def publish(self, query: dict[str, Any]) -> int:
        q = Query.from_dict(query)  # validates; raises DPrivacyError on a bad query
        with self._lock:
            if q.id in self._ids:
                raise ValueError(f"query id {q.id!r} is already published")
            self._ids.add(q.id)
            self.queries.append(q.to_dict())
            self.replies[q.id] = {}
            return len(self.queries) - 1

    def since(self, after: int) -> list[dict[str, Any]]:
        with self._lock:
            return self.queries[max(after, 0):]

    def reply(self, r: dict[str, Any]) -> bool:
        qid, user = str(r.get("query", "")), str(r.get("user", ""))
        with self._lock:
            if qid not in self.replies or not user:
                raise KeyError(qid)
            if user in self.replies[qid]:
                return False
            self.replies[qid][user] = dict(r)
            return True

    def collected(self, qid: str) -> list[dict[str, Any]]:
        with self._lock:
            if qid not in self.replies:
                raise KeyError(qid)
            return list(self.replies[qid].values())


def create_app(store: AggregatorStore | None = None) -> Any:
    """The FastAPI application of the aggregator (``app.state.store`` holds the data).

    Examples
    --------
    >>> app = create_app()
    >>> sorted(r.path for r in app.routes if r.path.startswith(("/queries", "/replies")))
    ['/queries', '/queries', '/replies', '/replies/{qid}']
    """
    from fastapi import Body, FastAPI, HTTPException

    app = FastAPI(title="dprivacy aggregator (PreTPost)")
    app.state.store = store or AggregatorStore()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "queries": len(app.state.store.queries)}

    @app.post("/queries")
    async def publish(query: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        try:
            pos = app.state.store.publish(query)
        except (DPrivacyError, ValueError, TypeError, KeyError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return {"position": pos, "id": query.get("id")}

    @app.get("/queries")
    async def queries(after: int = 0) -> dict[str, Any]:
        qs = app.state.store.since(after)
        return {"after": after, "next": after + len(qs), "queries": qs}

    @app.post("/replies")
    async def reply(r: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        try:
            new = app.state.store.reply(r)
        except KeyError as exc:
            raise HTTPException(status_code=404, detail=f"unknown query {exc}") from exc
        return {"stored": new}

    @app.get("/replies/{qid}")
    async def replies(qid: str) -> dict[str, Any]:
        try:
            return {"query": qid, "replies": app.state.store.collected(qid)}
        except KeyError as exc:
            raise HTTPException(status_code=404, detail=f"unknown query {qid!r}") from exc

    return app
