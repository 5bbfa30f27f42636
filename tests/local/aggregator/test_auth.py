"""The aggregator's credentials and reply schema over real HTTP: 401, 403, forgery, replays."""

from __future__ import annotations

import pytest

from dprivacy.local import PersonalBudget, PublicPolicy, UserAgent
from dprivacy.local.aggregator.client import collect, connect, poll_once, publish, run_server
from dprivacy.local.aggregator.server import create_app
from dprivacy.local.aggregator.store import AggregatorStore, ConflictError
from dprivacy.local.case_studies import rappor_query, warner_query

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def served(tmp_path):
    """A real uvicorn server over a file store with two analysts and two enrolled devices."""
    store = AggregatorStore(tmp_path / "agg.sqlite")
    creds = {"alice": store.add_analyst("alice"), "bob": store.add_analyst("bob"),
             "u1": store.enrol("u1"), "u2": store.enrol("u2")}
    srv = run_server(create_app(store))
    try:
        yield srv, store, creds
    finally:
        srv.stop()
        store.close()


def _agent(user: str, value: str, tmp_path, **kw) -> UserAgent:
    return UserAgent(user, {"smoker": value}, PersonalBudget(tmp_path / "dev.sqlite", user, total=5.0),
                     sandbox=None, pad=False, rng=1, **kw)


def test_every_endpoint_needs_a_valid_credential(served) -> None:
    srv, store, creds = served
    q = warner_query("q", 1.0, "smoker", ["yes", "no"]).to_dict()
    reply = {"query": "q", "user": "u1", "status": "ok", "cost": 1.0, "result": "yes"}
    good = creds["alice"]
    wrong_secret = good[:-4] + ("0000" if not good.endswith("0000") else "1111")
    for header in (None, "Bearer", f"Basic {good}", f"Bearer {wrong_secret}", "Bearer dpa_x_y",
                   f"Bearer {good}x"):
        with connect(srv.url) as c:
            h = {} if header is None else {"Authorization": header}
            assert c.post("/queries", json=q, headers=h).status_code == 401
            assert c.get("/queries", headers=h).status_code == 401
            assert c.post("/replies", json=reply, headers=h).status_code == 401
            r = c.get("/replies/q", headers=h)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    with connect(srv.url) as c:  # liveness needs none
        assert c.get("/health").json() == {"ok": True}
    assert store.count() == 0  # nothing was published by the refused requests


def test_roles_and_ownership_are_enforced(served, tmp_path) -> None:
    srv, store, creds = served
    q = warner_query("smokers", 1.0, "smoker", ["yes", "no"])
    with connect(srv.url, creds["alice"]) as alice, connect(srv.url, creds["bob"]) as bob, \
            connect(srv.url, creds["u1"]) as dev:
        assert dev.post("/queries", json=q.to_dict()).status_code == 403  # a device cannot publish
        spoof = {**q.to_dict(), "publisher": "bob"}
        assert alice.post("/queries", json=spoof).status_code == 403  # nor name another publisher
        assert publish(alice, q)["publisher"] == "alice"
        assert alice.post("/queries", json=q.to_dict()).status_code == 409  # ids are unique
        poll_once(dev, _agent("u1", "yes", tmp_path))
        r = alice.post("/replies", json={"query": "smokers", "status": "rejected", "reason": "x"})
        assert r.status_code == 403  # an analyst cannot reply
        # ids are namespaced per analyst: bob has no "smokers", and cannot name alice's either
        assert bob.get("/replies/smokers").status_code == 404
        assert bob.get("/replies/alice/smokers").status_code == 404
        assert dev.get("/replies/smokers").status_code == 403  # a device reads no replies
        assert alice.get("/replies/nope").status_code == 404
        got = collect(alice, "smokers")
        assert [r["user"] for r in got] == ["u1"] and got[0]["result"] in ("yes", "no")
        # the published query carries its authenticated publisher to the devices, and its id
        # in alice's namespace
        first = dev.get("/queries").json()["queries"][0]
        assert first["publisher"] == "alice" and first["id"] == "alice/smokers"
        # bob may use the same id; each analyst sees only their own queries, under their own id
        assert publish(bob, q) == {"position": 2, "id": "smokers", "device_id": "bob/smokers",
                                   "publisher": "bob"}
        assert [x["id"] for x in bob.get("/queries").json()["queries"]] == ["smokers"]
        assert [x["publisher"] for x in bob.get("/queries").json()["queries"]] == ["bob"]
        assert [x["publisher"] for x in alice.get("/queries").json()["queries"]] == ["alice"]
        assert [x["id"] for x in dev.get("/queries").json()["queries"]] == ["alice/smokers",
                                                                            "bob/smokers"]
        assert collect(bob, "smokers") == []  # u1 answered alice's query, not bob's
    store.revoke("device", "u1")
    with connect(srv.url, creds["u1"]) as dev:
        assert dev.get("/queries").status_code == 401  # a revoked credential is dead


def test_a_forged_reply_is_refused_and_cannot_displace_the_genuine_one(served, tmp_path) -> None:
    srv, store, creds = served
    q = warner_query("smokers", 1.0, "smoker", ["yes", "no"])
    forged = {"query": "alice/smokers", "user": "u1", "status": "ok", "cost": q.T.cost(), "result": "no"}
    with connect(srv.url, creds["alice"]) as alice, connect(srv.url, creds["u2"]) as mallory, \
            connect(srv.url) as anon, connect(srv.url, creds["u1"]) as u1:
        publish(alice, q)
        assert anon.post("/replies", json=forged).status_code == 401
        assert mallory.post("/replies", json=forged).status_code == 403  # u2's token, u1's name
        with pytest.raises(ConflictError, match="already enrolled"):
            store.enrol("u1")  # nobody can take over u1's enrolment
        genuine = _agent("u1", "yes", tmp_path)
        poll_once(u1, genuine)
        got = collect(alice, "smokers")
        sent = genuine.history["alice/smokers"]
        assert len(got) == 1 and got[0] == {**{k: sent[k] for k in got[0]}, "query": "smokers"}
        # u1 itself cannot change its reply afterwards; an identical replay is ignored
        other = "no" if got[0]["result"] == "yes" else "yes"
        assert u1.post("/replies", json={**sent, "result": other}).status_code == 409
        r = u1.post("/replies", json=sent)
        assert r.status_code == 200 and r.json() == {"stored": False}
        assert collect(alice, "smokers") == got


@pytest.mark.parametrize(("change", "why"), [
    ({"cost": 0.5}, "cost"),
    ({"cost": None}, "cost"),
    ({"result": "maybe"}, "not an output"),
    ({"result": ["yes"]}, "not an output"),
    ({"status": "done"}, "status"),
    ({"extra": 1}, "no key"),
    ({"query": "other"}, "unknown query"),
    ({"query": "smokers"}, "unknown query"),  # devices name a query by its namespaced id
])
def test_reply_schema_is_checked(served, change, why) -> None:
    srv, _, creds = served
    q = warner_query("smokers", 1.0, "smoker", ["yes", "no"])
    ok = {"query": "alice/smokers", "user": "u1", "status": "ok", "cost": q.T.cost(), "result": "yes"}
    with connect(srv.url, creds["alice"]) as alice, connect(srv.url, creds["u1"]) as u1:
        publish(alice, q)
        r = u1.post("/replies", json={**ok, **change})
        assert r.status_code in (400, 404) and why in r.json()["detail"]
        assert collect(alice, "smokers") == []
        assert u1.post("/replies", json=ok).json() == {"stored": True}


def test_product_outputs_are_checked(served) -> None:
    srv, _, creds = served
    q = rappor_query("colours", 2.0, "colour", ["r", "g", "b"])
    base = {"query": "alice/colours", "status": "ok", "cost": q.T.cost()}
    with connect(srv.url, creds["alice"]) as alice, connect(srv.url, creds["u1"]) as u1:
        publish(alice, q)
        for bad in ([0, 1], [0, 1, 2], [0, 1, True], [0, 1, 1.0], "011"):
            assert u1.post("/replies", json={**base, "result": bad}).status_code == 400
        assert u1.post("/replies", json={**base, "result": [0, 1, 1]}).json() == {"stored": True}


def test_agents_check_the_publisher_before_spending(served, tmp_path) -> None:
    srv, _, creds = served
    with connect(srv.url, creds["bob"]) as bob, connect(srv.url, creds["u1"]) as u1:
        publish(bob, warner_query("from-bob", 1.0, "smoker", ["yes", "no"]))
        a = _agent("u1", "yes", tmp_path, policy=PublicPolicy(publishers={"alice"}))
        poll_once(u1, a)
    assert a.history == {} or a.history.get("bob/from-bob", {}).get("status") != "ok"
    assert a.remaining()["total"] == pytest.approx(5.0)  # nothing charged


def test_post_runs_on_the_analysts_side(served, tmp_path) -> None:
    """Devices reply T's output; collect_results runs the query's post on the collected replies."""
    from dprivacy.local.aggregator.client import collect_results
    from dprivacy.local.builtins import rr_scale
    from dprivacy.local.case_studies import duchi_query

    srv, _, creds = served
    q = duchi_query("mean", 1.0, "x")
    with connect(srv.url, creds["alice"]) as alice:
        publish(alice, q)
        for u in ("u1", "u2"):
            a = UserAgent(u, {"x": 0.5}, PersonalBudget(tmp_path / "d.sqlite", u, total=5.0),
                          sandbox=None, pad=False, rng=2)
            with connect(srv.url, creds[u]) as dev:
                poll_once(dev, a)
        raw = [r["result"] for r in collect(alice, "mean")]
        assert set(raw) <= {-1, 1}  # only T's outputs travel
        out = collect_results(alice, q)
    c = rr_scale(1.0)
    assert sorted(out) == sorted(z * c for z in raw)


def test_a_refusal_may_be_replaced_an_answer_may_not(served) -> None:
    srv, _, creds = served
    q = warner_query("smokers", 1.0, "smoker", ["yes", "no"])
    refusal = {"query": "alice/smokers", "user": "u1", "status": "rejected", "reason": "busy",
               "result": None}
    answer = {"query": "alice/smokers", "user": "u1", "status": "ok", "cost": q.T.cost(),
              "result": "no"}
    with connect(srv.url, creds["alice"]) as alice, connect(srv.url, creds["u1"]) as u1:
        publish(alice, q)
        assert u1.post("/replies", json=refusal).json() == {"stored": True}
        assert u1.post("/replies", json=answer).json() == {"stored": True}  # replaces the refusal
        assert u1.post("/replies", json=refusal).status_code == 409  # an answer is final
        assert u1.post("/replies", json={**answer, "result": "yes"}).status_code == 409
        assert collect(alice, "smokers") == [{**answer, "query": "smokers"}]
