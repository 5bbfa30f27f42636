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

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dprivacy._serving import BackgroundServer
from dprivacy.local.device.agent import UserAgent
from dprivacy.local.query import Query

__all__ = ["PollError", "ServerThread", "collect", "collect_results", "connect", "poll_once",
           "publish", "run_agent", "run_server", "simulate_users"]

log = logging.getLogger(__name__)


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


class PollError(RuntimeError):
    """The aggregator could not be reached or did not answer usefully: back off and poll again."""


#: Largest page of queries (bytes, after any content encoding is undone) an agent reads; a larger
#: one is a malformed page (the aggregator's own pages stop at a few MiB, or one query).
MAX_PAGE_BYTES = 32 << 20
#: Seconds an agent gives the aggregator to send one whole page (a body that trickles in, or never
#: ends, is cut off like a read time-out).
PAGE_SECONDS = 120.0


def _page(client: Any, after: int, limit: int, headers: Any) -> tuple[list[Any], int]:
    """One page of queries after ``after``: (queries, next). Raises ``httpx.HTTPError`` (transport,
    status, or a body not received within :data:`PAGE_SECONDS`) or ValueError (a body that is not
    a page: not JSON, nested too deep for the parser, or above :data:`MAX_PAGE_BYTES` once
    decompressed).

    The body is streamed and counted as it is decoded, so neither a compression bomb nor an
    endless or trickling body holds more than :data:`MAX_PAGE_BYTES` or takes much longer than
    :data:`PAGE_SECONDS` (the check runs as each part arrives, at least once per read time-out)."""
    import httpx

    max_bytes, seconds = MAX_PAGE_BYTES, PAGE_SECONDS
    end = time.monotonic() + seconds
    parts, size = [], 0
    with client.stream("GET", "/queries", params={"after": after, "limit": limit},
                       headers=headers) as r:
        r.raise_for_status()
        for part in r.iter_bytes():
            size += len(part)
            if size > max_bytes:
                raise ValueError(f"the aggregator's page is above {max_bytes} bytes")
            if time.monotonic() > end:
                raise httpx.ReadTimeout(f"the page was not received within {seconds:g} s",
                                        request=r.request)
            parts.append(part)
    try:
        body = json.loads(b"".join(parts))
    except RecursionError as exc:  # not a ValueError: it would stop the agent
        raise ValueError("the aggregator's page is nested too deep to parse") from exc
    if not isinstance(body, dict) or not isinstance(body.get("queries"), list):
        raise ValueError("the aggregator's page is not {queries, next}")
    nxt = body.get("next")
    if isinstance(nxt, bool) or not isinstance(nxt, int) or nxt < after:
        raise ValueError("the aggregator's page has no valid next position")
    return body["queries"], nxt


def _post_reply(client: Any, reply: dict[str, Any], headers: Any) -> None:
    """Post one reply; raises ``httpx.HTTPError``. The aggregator's answer body is never read
    (a hostile one could be endless or a compression bomb): only its status counts."""
    with client.stream("POST", "/replies", json=reply, headers=headers) as r:
        r.raise_for_status()


def _skippable(exc: BaseException) -> bool:
    """True for a failure that a bad query can cause (an HTTP error status, a read time-out, a
    malformed page); False for one that says the aggregator is unreachable or refuses us."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code not in (401, 403, 429, 502, 503, 504)
    return isinstance(exc, (httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.DecodingError,
                            ValueError))


def poll_once(client: Any, agent: UserAgent, after: int = 0, *,
              credential: str | None = None, limit: int = 100, retries: int = 2,
              backoff: float = 0.5) -> int:
    """Answer the queries published after position ``after``; returns the new position.

    ``client`` carries the device's credential, or ``credential`` is sent with each request
    (one client shared by several simulated devices).

    No query can stop the device. A page the aggregator cannot serve is fetched again one query
    at a time, and a single query that still fails (an HTTP error, a time-out, a malformed page,
    ``retries`` times with growing pauses from ``backoff`` seconds) is skipped; a query the
    agent cannot read is refused by :meth:`UserAgent.handle`; a reply the aggregator refuses is
    logged and skipped; after ``limit`` skipped queries the call returns (an aggregator that fails
    every page cannot keep it looping). Only a failure that is not the query's (no connection, a refused
    credential, the aggregator overloaded) raises :class:`PollError`, after which the caller
    polls again from the returned position (answered queries are then replayed from the
    ledger, never charged twice).
    """
    import httpx

    headers = None if credential is None else {"Authorization": f"Bearer {credential}"}
    size, failures, skipped = max(1, int(limit)), 0, 0
    while True:
        try:
            queries, nxt = _page(client, after, size, headers)
        except (httpx.HTTPError, ValueError) as exc:
            if not _skippable(exc):
                raise PollError(f"polling after {after}: {type(exc).__name__}: {exc}") from exc
            if size > 1:  # find the query that breaks the page
                size = 1
                continue
            failures += 1
            if failures <= retries:
                time.sleep(backoff * 2 ** (failures - 1))
                continue
            log.warning("skipping the query after position %d: %s", after, type(exc).__name__)
            after, failures, skipped = after + 1, 0, skipped + 1
            if skipped >= max(1, int(limit)):  # an aggregator failing every page: let the
                return after                   # caller pause (and stop) before going on
            continue
        failures = 0
        if not queries:
            return after
        for q in queries:
            try:
                reply = agent.handle(q)
            except Exception as exc:  # noqa: BLE001 (handle never raises; belt and braces)
                log.warning("a query could not be handled (%s): skipped", type(exc).__name__)
                continue
            try:
                _post_reply(client, reply, headers)
            except httpx.HTTPStatusError as exc:
                if not _skippable(exc):
                    raise PollError(f"posting a reply: {exc}") from exc
                log.warning("the aggregator refused the reply to %r (%d): skipped",
                            str(reply.get("query"))[:80], exc.response.status_code)
            except httpx.HTTPError as exc:
                raise PollError(f"posting a reply: {type(exc).__name__}: {exc}") from exc
        after = nxt
        size = max(1, int(limit))


def run_agent(client: Any, agent: UserAgent, *, interval: float = 1.0, polls: int | None = None,
              stop: Callable[[], bool] | None = None, credential: str | None = None,
              max_backoff: float = 60.0) -> int:
    """Poll every ``interval`` seconds (``polls`` times, or until ``stop()``); returns the position.

    Never stops on an aggregator's failure: after a :class:`PollError`, or any other error while
    polling, it waits (doubling the pause up to ``max_backoff`` seconds) and polls again from
    where it was.
    """
    after, k, pause = 0, 0, float(interval)
    while (polls is None or k < polls) and not (stop is not None and stop()):
        try:
            after = poll_once(client, agent, after, credential=credential)
            pause = float(interval)
        except PollError as exc:
            log.warning("%s; polling again in %.3g s", exc, pause)
            pause = min(max(pause, 0.01) * 2, max_backoff)
        except Exception as exc:  # noqa: BLE001 (nothing the aggregator sends may stop the agent)
            log.warning("polling after %d failed (%s); polling again in %.3g s", after,
                        type(exc).__name__, pause)
            pause = min(max(pause, 0.01) * 2, max_backoff)
        k += 1
        if polls is None or k < polls:
            time.sleep(pause)
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
