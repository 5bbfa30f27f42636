"""count_by and grouped aggregation through the service: one request and one deadline for every
key, ε in total, a noisy answer for every listed key and none for the others."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from ibis import _
from scipy import stats

from dprivacy.errors import ValidationError
from dprivacy.remote import connect
from dprivacy.tables import Queryable
from dprivacy.tables.grouped import Count, Mean, Sum
from tests.service.conftest import KEYS, people


class _Counting:
    """Counts the session's query requests."""

    def __init__(self, session):
        self.session, self.queries = session, 0
        self._request = session.request
        session.request = self.request

    def request(self, method, path, body=None):
        if path == "/v1/query":
            self.queries += 1
        return self._request(method, path, body)


def test_pinq_count_by_is_one_request_at_one_deadline_for_eps_in_total(start):
    srv = start(query_seconds=0.3)
    s = connect(srv.url, key=KEYS["alice"])
    counting = _Counting(s)
    v = s.table("visits")                                   # 200 rows, city x / y
    t0 = time.monotonic()
    counts = v.count_by(["x", "y", "z"], "city", eps=0.5)
    took = time.monotonic() - t0
    assert counting.queries == 1 and 0.3 <= took < 0.3 + 2.0
    assert list(counts) == ["x", "y", "z"]
    assert abs(counts["x"] - 100) < 40 and abs(counts["y"] - 100) < 40 and abs(counts["z"]) < 40
    assert v.remaining_budget() == pytest.approx(0.5)      # once, not 3 x 0.5
    out = v.group_by(keys=["x", "y"], column="city").agg(
        0.25, n=Count(), age=Mean("age", 0, 90), total=Sum("age", 0, 90))
    assert counting.queries == 2
    assert list(out.index) == ["x", "y"] and list(out.columns) == ["n", "age", "total"]
    assert ((out["age"] >= 0) & (out["age"] <= 90)).all()
    assert v.remaining_budget() == pytest.approx(0.25)


def test_proper_grouped_charges_listed_people_once_and_unlisted_nobody(start):
    srv = start(query_seconds=1.0)
    p = connect(srv.url, key=KEYS["alice"]).table("people")  # age = 7i mod 90, budget 1.0
    budgets = srv.runner.owner.budgets["people"]
    ages = people()["age"].to_numpy()
    band = (ages // 30)
    out = p.group_by(keys=[0, 1, 7], column=_.age // 30).agg(
        0.5, n=Count(), m=Mean("age", 0, 90))
    assert list(out.index) == [0, 1, 7]                     # 7: no record, still answered
    left = budgets.remaining(np.arange(200))
    listed = np.isin(band, [0, 1])
    assert np.allclose(left[listed], 0.5) and np.allclose(left[~listed], 1.0)
    true = [int((band == b).sum()) for b in (0, 1, 7)]
    assert np.abs(out["n"].to_numpy() - true).max() < 40   # Lap(4) noise: the real answer


def test_remote_noise_matches_the_per_key_answers(start):
    """1000 empty keys in one request: their answers are Lap(1/ε) noise, distributed as the
    per-key noisy counts of the same table in process (two-sample KS), not Lap(K/ε)."""
    ppl = people()
    ppl["eps"] = 1e9
    srv = start(ppl=ppl, query_seconds=1.0, service="max_candidates = 2000")
    p = connect(srv.url, key=KEYS["alice"]).table("people")
    keys = [f"none{i}" for i in range(1000)]
    eps = 0.5
    remote = np.array(list(p.count_by(keys, "name", eps=eps).values()))
    local = Queryable(ppl.drop(columns=["eps"]), budget=1e9, backend="duckdb")
    parts = local.partition(keys[:300], "name")
    per_key = np.array([parts[k].noisy_count(eps) for k in keys[:300]])
    assert stats.ks_2samp(remote, per_key).pvalue > 1e-3
    assert stats.kstest(remote, stats.laplace(scale=1 / eps).cdf).pvalue > 1e-3
    assert stats.kstest(remote, stats.laplace(scale=2 / eps).cdf).pvalue < 1e-6
    # large ε: the listed names are counted exactly once, unlisted names never appear
    few = p.count_by(["p10", "p11", "nobody"], "name", eps=1e6)
    assert {k: round(v) for k, v in few.items()} == {"p10": 1, "p11": 1, "nobody": 0}


def _post(srv, body):
    return httpx.post(srv.url + "/v1/query", content=json.dumps(body).encode(),
                      headers={"Authorization": f"Bearer {KEYS['alice']}",
                               "Content-Type": "application/json"})


def test_bad_grouped_plans_are_refused_before_any_charge(start):
    srv = start(query_seconds=0.1)
    s = connect(srv.url, key=KEYS["alice"])
    v = s.table("visits")
    table = {"source": "visits", "steps": []}
    good = {"op": "grouped", "eps": 0.1, "by": "city", "keys": ["x"],
            "aggs": {"n": {"how": "count"}}}
    bad = [
        {**good, "keys": "x"},
        {**good, "keys": [{"a": 1}]},
        {**good, "keys": ["x", "x"]},
        {**good, "aggs": {}},
        {**good, "aggs": {f"n{i}": {"how": "count"} for i in range(17)}},
        {**good, "aggs": {"n": {"how": "max"}}},
        {**good, "aggs": {"n": {"how": "count", "lo": 0}}},
        {**good, "aggs": {"n": {"how": "sum", "f": "age"}}},
        {**good, "aggs": {"n": {"how": "sum", "f": "age", "lo": 5, "hi": 1}}},
        {**good, "by": "nope"},
        {**good, "eps": 0},
        {k: v for k, v in good.items() if k != "keys"},
    ]
    for q in bad:
        r = _post(srv, {"v": 1, "table": table, "query": q})
        assert r.status_code in (400, 422), (q, r.text)
        assert "\n" not in r.json()["message"]
    assert v.remaining_budget() == 1.0
    assert _post(srv, {"v": 1, "table": table, "query": good}).status_code == 200
    assert v.remaining_budget() == pytest.approx(0.9)
    with pytest.raises(ValidationError):
        v.group_by(keys=["x"], column="city").agg(0.1, n="count")
    with pytest.raises(ValidationError):
        v.group_by(keys=["x"], column="nope")
    assert v.remaining_budget() == pytest.approx(0.9)


def test_grouped_answer_is_a_frame_in_key_order(start):
    srv = start(query_seconds=0.1)
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    out = v.group_by("city", keys=["y", "x", "w"]).agg(0.1, n=Count())
    assert isinstance(out, pd.DataFrame) and list(out.index) == ["y", "x", "w"]
    assert out.index.name == "city" and out.shape == (3, 1)
