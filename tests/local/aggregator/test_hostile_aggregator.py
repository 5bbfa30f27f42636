"""An untrusted aggregator's answers cannot stop, stall or swell a device.

The agent reads what the aggregator sends: a page nested too deep for the JSON parser (which
raises RecursionError, not ValueError, and used to stop the agent), a compression bomb, a body
that never ends or trickles in one byte at a time (each part inside the read time-out), and an
endless answer to a posted reply. Each bad page is skipped like any page the aggregator cannot
serve, holds at most ``MAX_PAGE_BYTES`` and takes about ``PAGE_SECONDS``; the next good query is
answered.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from dprivacy.local import PersonalBudget, UserAgent
from dprivacy.local.aggregator import client as agg_client
from dprivacy.local.aggregator.client import poll_once, run_agent
from dprivacy.local.case_studies import warner_query

pytestmark = pytest.mark.timeout(120)

GOOD = warner_query("good", 1.0, "smoker", ["yes", "no"])
CHUNK = 64 << 10


def _agent(tmp_path) -> UserAgent:
    return UserAgent("u1", {"smoker": "yes"}, PersonalBudget(tmp_path / "u1.sqlite", "u1", total=5.0),
                     sandbox=None, pad=False, rng=0)


def _aggregator(bad: httpx.Response | None, replies: httpx.Response | None = None
                ) -> tuple[httpx.Client, list]:
    """Positions 1 and 3 hold good queries; any page holding position 2 is answered ``bad()``."""
    queries = {1: {**GOOD.to_dict(), "id": "q1"}, 3: {**GOOD.to_dict(), "id": "q3"}}
    posted: list = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(json.loads(request.content)["query"])
            return replies if replies is not None else httpx.Response(200, json={"stored": True})
        after = int(request.url.params.get("after", 0))
        limit = int(request.url.params.get("limit", 100))
        page = [p for p in (1, 2, 3) if p > after][:limit]
        if 2 in page and bad is not None:
            return bad()
        return httpx.Response(200, json={"after": after, "next": page[-1] if page else after,
                                         "queries": [queries[p] for p in page if p in queries]})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://agg"), posted


def test_a_page_too_deep_for_the_parser_is_skipped_not_fatal(tmp_path) -> None:
    client, posted = _aggregator(lambda: httpx.Response(200, content=b"[" * 200_000))
    a = _agent(tmp_path)
    with client:
        assert poll_once(client, a, backoff=0.001) == 3
        assert run_agent(client, a, interval=0.001, polls=2) == 3
    assert posted == ["q1", "q3", "q1", "q3"]  # run_agent starts again at 0: replies replayed
    assert a.remaining()["total"] == pytest.approx(5.0 - 2 * GOOD.T.cost())


def test_endless_and_bomb_pages_are_cut_at_the_cap(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(agg_client, "MAX_PAGE_BYTES", 1 << 20)
    pulled, tries = [0], [0]

    def endless() -> Iterator[bytes]:
        tries[0] += 1
        for _ in range(1024):  # 64 MiB if read to the end
            pulled[0] += CHUNK
            yield b" " * CHUNK

    client, posted = _aggregator(lambda: httpx.Response(200, content=endless()))
    with client:
        assert poll_once(client, _agent(tmp_path), backoff=0.001) == 3
    assert posted == ["q1", "q3"]
    assert 1 <= tries[0] <= 6
    assert pulled[0] <= tries[0] * ((1 << 20) + 2 * CHUNK)  # each try cut at 1 MiB of 64 MiB

    bomb = gzip.compress(b" " * (16 << 20), 9)  # 16 KiB that decode to 16 MiB
    client, posted = _aggregator(lambda: httpx.Response(
        200, content=bomb, headers={"content-encoding": "gzip"}))
    with client:
        assert poll_once(client, _agent(tmp_path / ".."), backoff=0.001) == 3
    assert posted == ["q1", "q3"]


def test_a_trickling_page_is_cut_off_and_an_endless_reply_answer_is_not_read(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(agg_client, "PAGE_SECONDS", 0.2)

    def trickle() -> Iterator[bytes]:
        for _ in range(1000):  # 20 s if read to the end, each byte well inside a read time-out
            time.sleep(0.02)
            yield b" "

    def endless_answer() -> Iterator[bytes]:
        while True:
            yield b" " * CHUNK

    client, posted = _aggregator(lambda: httpx.Response(200, content=trickle()),
                                 replies=httpx.Response(200, content=endless_answer()))
    start = time.monotonic()
    with client:
        assert poll_once(client, _agent(tmp_path), backoff=0.001) == 3
    assert time.monotonic() - start < 8.0  # four tries of about 0.2 s each, not 4 x 20 s
    assert posted == ["q1", "q3"]


def test_every_answer_of_a_published_query_fits_a_reply(monkeypatch) -> None:
    """A one-hot product of 65 536 coordinates (a 174-byte query, cost 2 ln 3) was accepted at
    publish while each of its answers (196 KB of JSON) exceeded the 64 KiB reply cap: every device
    was charged and every reply refused. The cap now holds the largest output any accepted T has,
    a device's real answer to that query is stored, and a query whose answers could not fit the
    cap is refused at publish."""
    from dprivacy.errors import ValidationError
    from dprivacy.local import Code, Query
    from dprivacy.local.aggregator import replies, store
    from dprivacy.local.aggregator.store import AggregatorStore
    from dprivacy.local.limits import DEFAULT_LIMITS, MAX_REPLY_BYTES
    from dprivacy.local.randomiser import ProductRandomiser

    n = DEFAULT_LIMITS.max_length
    T = ProductRandomiser([[0.75, 0.25], [0.25, 0.75]], length=n, domain="one_hot")  # noqa: N806
    q = Query("wide", T, Code.builtin("one_hot"), fields=("x",), params={"k": n})
    st = AggregatorStore()
    _, full = st.publish("alice", q.to_dict())
    a = UserAgent("u1", {"x": "v"}, PersonalBudget(":memory:", "u1", total=5.0), sandbox=None,
                  pad=False, rng=0)
    r = a.handle({**q.to_dict(), "id": full})
    assert r["status"] == "ok" and len(json.dumps(r)) > 64 * 1024
    assert st.reply("u1", json.loads(json.dumps(r))) is True
    assert len(json.dumps(r)) <= replies.largest_answer(Query.from_dict({**q.to_dict(), "id": full}))
    # the widest outputs a query may have (4096 per coordinate) fit too
    widest = Query("widest", ProductRandomiser(np.full((2, 4096), 1 / 4096).tolist(), length=n),
                   Code.builtin("field"), fields=("x",))
    assert replies.largest_answer(widest) <= MAX_REPLY_BYTES
    monkeypatch.setattr(store, "MAX_REPLY_BYTES", 64 * 1024)  # with the old cap: refused at publish
    with pytest.raises(ValidationError, match="a reply holds at most 65536"):
        st.publish("alice", {**q.to_dict(), "id": "wide2"})


def test_an_aggregator_failing_every_page_cannot_keep_the_agent_looping(tmp_path) -> None:
    """An aggregator answering every page with a redirect to itself (or any other skippable
    failure) kept ``poll_once`` skipping position after position without end, so ``run_agent``
    never paused, never counted a poll and never asked ``stop()``. A call now returns after
    ``limit`` skipped queries; the next poll goes on from there."""
    calls = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        calls[0] += 1
        return httpx.Response(302, headers={"location": str(request.url)})

    a = _agent(tmp_path)
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://agg") as c:
        assert poll_once(c, a, limit=3, retries=0, backoff=0.001) == 3
        assert poll_once(c, a, 3, limit=3, retries=1, backoff=0.001) == 6
    assert calls[0] == (1 + 3) + (1 + 2 * 3)  # per call: the page, then the tries per position
