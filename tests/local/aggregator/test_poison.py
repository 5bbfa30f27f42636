"""No query can stop a device: poison queries are refused at publish or skipped by every agent.

Three poison queries used to be accepted at publish and then stop every device: a lone
surrogate character (``GET /queries`` answered 500: the page could not be encoded as UTF-8),
700-deep ``params`` (500 again: too deep to encode) and long field names (the device's refusal,
which quoted them, passed the 64 KiB reply cap and was refused with 400); agents died on any
HTTP error, and restarted agents polled from the start and died again. A normal query published
after them must be answered by every device, also after the agents restart.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from dprivacy.local import PersonalBudget, UserAgent
from dprivacy.local.aggregator.client import (
    collect,
    connect,
    poll_once,
    publish,
    run_agent,
    run_server,
)
from dprivacy.local.aggregator.server import create_app
from dprivacy.local.aggregator.store import AggregatorStore
from dprivacy.local.case_studies import warner_query
from dprivacy.local.limits import MAX_REPLY_BYTES

pytestmark = pytest.mark.timeout(180)

USERS = ("u1", "u2", "u3")
GOOD = warner_query("after-the-poison", 1.0, "smoker", ["yes", "no"])


def _deep(n: int) -> object:
    v: object = 0
    for _ in range(n):
        v = [v]
    return v


def _poisons() -> dict[str, bytes]:
    base = warner_query("p", 1.0, "smoker", ["yes", "no"]).to_dict()
    text = json.dumps({**base, "id": "surrogate", "params": {"field": "smoker", "x": "@"}})
    return {
        "lone surrogate in params": text.replace('"@"', '"\\ud800"').encode(),
        "lone surrogate in the id": json.dumps({**base, "id": "s@"}).replace("@", "\\udfff").encode(),
        "lone surrogate in a field": json.dumps({**base, "id": "s2", "fields": ["@"]}).replace(
            "@", "\\ud834").encode(),
        "700-deep params": json.dumps({**base, "id": "deep", "params": {"x": _deep(700)}}).encode(),
        "a 100 000-character field name": json.dumps({**base, "id": "long",
                                                       "fields": ["f" * 100_000]}).encode(),
        "latin-1 body": json.dumps({**base, "id": "latin", "params": {"x": "é"}},
                                   ensure_ascii=False).encode("latin-1"),
        "utf-16 body": json.dumps({**base, "id": "utf16"}).encode("utf-16"),
    }


def _agents(tmp_path, tag: str = "") -> list[UserAgent]:
    return [UserAgent(u, {"smoker": "yes"}, PersonalBudget(tmp_path / f"{u}.sqlite", u, total=5.0),
                      sandbox=None, pad=False, rng=k) for k, u in enumerate(USERS)]


def test_poison_is_refused_at_publish_and_never_stops_a_device(tmp_path) -> None:
    store = AggregatorStore(tmp_path / "agg.sqlite")
    key = store.add_analyst("mallory")
    tokens = {u: store.enrol(u) for u in USERS}
    srv = run_server(create_app(store))
    try:
        with connect(srv.url, key) as m:
            for name, body in _poisons().items():
                t0 = time.monotonic()
                r = m.post("/queries", content=body, headers={"content-type": "application/json"})
                assert r.status_code == 400, (name, r.status_code, r.text[:200])
                assert time.monotonic() - t0 < 2.0, name
            # many long field names are accepted (each within its cap), and the devices' refusal
            # (they do not offer those fields) still fits the reply cap
            wide = {**GOOD.to_dict(), "id": "wide", "fields": [f"{k:04d}" + "f" * 124 for k in range(1024)]}
            assert m.post("/queries", json=wide).status_code == 200
            publish(m, GOOD)
        assert store.count() == 2
        agents = _agents(tmp_path)
        for a in agents:
            with connect(srv.url, tokens[a.user]) as dev:
                assert run_agent(dev, a, interval=0.01, polls=2) == 2
        with connect(srv.url, key) as m:
            wide_replies = collect(m, "wide")
            good = collect(m, GOOD.id)
        assert sorted(r["user"] for r in wide_replies) == list(USERS)
        for r in wide_replies:
            assert r["status"] == "rejected" and "not offered" in r["reason"]
            assert len(json.dumps(r)) <= MAX_REPLY_BYTES
        assert sorted(r["user"] for r in good) == list(USERS)
        assert all(r["status"] == "ok" for r in good)
        # restarted agents (new processes on the same ledgers) poll from the start: nothing stops
        # them, nothing is charged twice, the stored replies are replayed
        before = {a.user: a.remaining()["total"] for a in agents}
        again = _agents(tmp_path)
        for a in again:
            with connect(srv.url, tokens[a.user]) as dev:
                assert run_agent(dev, a, interval=0.01, polls=2) == 2
            assert a.remaining()["total"] == pytest.approx(before[a.user])
            full = f"mallory/{GOOD.id}"
            assert a.history[full] == agents[USERS.index(a.user)].history[full]
    finally:
        srv.stop()
        store.close()


def test_rows_stored_before_the_checks_are_passed_over(tmp_path) -> None:
    """A store written by an older aggregator may hold poison: it is never served."""
    store = AggregatorStore(tmp_path / "agg.sqlite")
    key, token = store.add_analyst("alice"), store.enrol("u1")
    base = warner_query("p", 1.0, "smoker", ["yes", "no"]).to_dict()
    poisoned = [json.dumps({**base, "id": "old-surrogate", "params": {"x": "\ud800"}}),
                json.dumps({**base, "id": "old-deep", "params": {"x": _deep(700)}}),
                json.dumps({**base, "id": "old-long", "fields": ["f" * 100_000]})]
    for k, body in enumerate(poisoned):
        store._db.execute("INSERT INTO queries (id, publisher, cost, body, created) VALUES "
                          "(?, 'alice', 1.0, ?, 0)", (f"old{k}", body))
    srv = run_server(create_app(store))
    try:
        with connect(srv.url, key) as alice:
            publish(alice, GOOD)
        with connect(srv.url, token) as dev:
            page = dev.get("/queries")
            assert page.status_code == 200
            assert [q["id"] for q in page.json()["queries"]] == [f"alice/{GOOD.id}"]
            a = _agents(tmp_path)[0]
            assert poll_once(dev, a) == 4
        assert a.history[f"alice/{GOOD.id}"]["status"] == "ok"
    finally:
        srv.stop()
        store.close()


def _flaky_aggregator(bad_positions: set[int], status: int = 500) -> tuple[httpx.Client, list]:
    """An aggregator (httpx MockTransport) that fails every page holding a bad position."""
    queries = {p: {**GOOD.to_dict(), "id": f"q{p}"} for p in range(1, 7)}
    posted: list = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = json.loads(request.content)
            posted.append(body["query"])
            return httpx.Response(400 if body["query"] == "q5" else 200, json={"stored": True})
        after = int(request.url.params.get("after", 0))
        limit = int(request.url.params.get("limit", 100))
        page = [p for p in sorted(queries) if p > after][:limit]
        if any(p in bad_positions for p in page):
            if status == 0:
                raise httpx.ReadTimeout("slow page", request=request)
            return httpx.Response(status, text="boom")
        return httpx.Response(200, json={"after": after, "next": page[-1] if page else after,
                                         "queries": [queries[p] for p in page]})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://agg"), posted


@pytest.mark.parametrize("status", [500, 400, 0], ids=["500", "400", "read-timeout"])
def test_an_agent_skips_what_the_aggregator_cannot_serve(tmp_path, status: int) -> None:
    client, posted = _flaky_aggregator({2, 4}, status)
    a = _agents(tmp_path)[0]
    with client:
        assert poll_once(client, a, backoff=0.001) == 6
    assert posted == ["q1", "q3", "q5", "q6"]  # q2 and q4 skipped; q5's refused reply skipped
    assert all(a.history[q]["status"] == "ok" for q in posted)


def test_an_unreachable_aggregator_is_waited_for_not_skipped(tmp_path) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.params.get("after"))
        raise httpx.ConnectError("down", request=request)

    a = _agents(tmp_path)[0]
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://agg") as c:
        assert run_agent(c, a, interval=0.001, polls=3, max_backoff=0.01) == 0
    assert calls == ["0", "0", "0"]  # polled again from the same position each time


def test_handle_refuses_hostile_dicts_without_raising(tmp_path) -> None:
    a = _agents(tmp_path)[0]
    base = GOOD.to_dict()
    for hostile in ({**base, "params": {"x": _deep(5000)}}, {**base, "id": ["x"]},
                    {**base, "id": "i" * 10_000}, {**base, "fields": ["\udfff"]},
                    {**base, "T": {"kind": "matrix", "matrix": [[_deep(900)]]}}, [], None, "x"):
        r = a.handle(hostile)
        assert r["status"] == "rejected" and r["reason"].startswith("malformed")
        assert len(json.dumps(r)) <= MAX_REPLY_BYTES and r["reason"].encode("utf-8")
    assert a.remaining()["total"] == 5.0
