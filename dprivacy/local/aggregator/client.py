"""User agents and analysts talking to the aggregator over HTTP (httpx).

Both sides authenticate with a bearer credential issued by the operator
(:meth:`AggregatorStore.add_analyst`, :meth:`AggregatorStore.enrol`): :func:`connect` opens an
``httpx.Client`` that sends it. The analyst's side is :func:`publish`, :func:`collect` and
:func:`collect_results` (the replies post-processed by the query's ``post``, on the analyst's
side). :func:`poll_once` fetches the queries a device has not seen, answers each with
:meth:`UserAgent.handle` (Algorithm 1, on the device) and posts the replies; :func:`run_agent`
repeats it. :func:`run_server` starts uvicorn on a socket in a background thread (tests,
simulations).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dprivacy._serving import BackgroundServer
from dprivacy.local.device.agent import UserAgent
from dprivacy.local.query import Query

__all__ = ["ServerThread", "collect", "collect_results", "connect", "poll_once", "publish", "run_agent",
           "run_server", "simulate_users"]


def connect(url: str, credential: str | None = None, *, timeout: float = 60.0) -> Any:
    """An ``httpx.Client`` for ``url`` sending ``Authorization: Bearer <credential>``."""
    import httpx

    headers = {} if credential is None else {"Authorization": f"Bearer {credential}"}
    return httpx.Client(base_url=url, headers=headers, timeout=timeout)


def publish(client: Any, query: Query) -> dict[str, Any]:
    """Publish ``query`` with the analyst's client; the server's answer ``{position, id,
    publisher}`` (raises httpx.HTTPStatusError if it refuses)."""
    r = client.post("/queries", json=query.to_dict())
    r.raise_for_status()
    return dict(r.json())


def collect(client: Any, qid: str) -> list[dict[str, Any]]:
    """All replies collected for the analyst's query ``qid`` (every page)."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        r = client.get(f"/replies/{qid}", params={"after": after})
        r.raise_for_status()
        body = r.json()
        out.extend(body["replies"])
        if not body["replies"] or int(body["next"]) == after:
            return out
        after = int(body["next"])


def collect_results(client: Any, query: Query, *, rng: Any = None) -> list[Any]:
    """The analyst's results of ``query``: its collected replies, checked and post-processed on
    the analyst's side (:func:`dprivacy.local.postprocess.apply_post`; refusals are skipped)."""
    from dprivacy.local.postprocess import apply_post

    return apply_post(query, collect(client, query.id), rng=rng)


def poll_once(client: Any, agent: UserAgent, after: int = 0, *,
              credential: str | None = None) -> int:
    """Answer the queries published after position ``after``; returns the new position.

    ``client`` carries the device's credential, or ``credential`` is sent with each request
    (one client shared by several simulated devices).
    """
    headers = None if credential is None else {"Authorization": f"Bearer {credential}"}
    while True:
        r = client.get("/queries", params={"after": after}, headers=headers)
        r.raise_for_status()
        body = r.json()
        for q in body["queries"]:
            reply = agent.handle(q)
            client.post("/replies", json=reply, headers=headers).raise_for_status()
        if not body["queries"]:
            return after
        after = int(body["next"])


def run_agent(client: Any, agent: UserAgent, *, interval: float = 1.0, polls: int | None = None,
              stop: Callable[[], bool] | None = None, credential: str | None = None) -> int:
    """Poll every ``interval`` seconds (``polls`` times, or until ``stop()``); returns the position."""
    after, k = 0, 0
    while (polls is None or k < polls) and not (stop is not None and stop()):
        after = poll_once(client, agent, after, credential=credential)
        k += 1
        if polls is None or k < polls:
            time.sleep(interval)
    return after


class ServerThread(BackgroundServer):
    """uvicorn serving ``app`` on ``host`` (a free port) in a daemon thread; ``url``; ``stop()``."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(app, host, port, what="the aggregator", start_timeout=20.0)


def run_server(app: Any, host: str = "127.0.0.1", port: int = 0) -> ServerThread:
    """Start :class:`ServerThread` and return it."""
    return ServerThread(app, host, port)


def simulate_users(url: str, users: Sequence[Any], make_agent: Callable[[Any], UserAgent],
                   credentials: Mapping[str, str], *, workers: int = 2, timeout: float = 60.0) -> int:
    """Simulated devices: each worker thread builds the agents of its share of ``users`` (an
    agent's ledger connection belongs to its thread) and answers the published queries once
    through its own HTTP client, with each user's own credential (``credentials[agent.user]``).
    Returns the number of users served."""
    shares = [list(users[k::workers]) for k in range(workers)]

    def device(share: list[Any]) -> int:
        with connect(url, timeout=timeout) as c:
            for u in share:
                a = make_agent(u)
                poll_once(c, a, credential=credentials[a.user])
        return len(share)

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(device, shares))
