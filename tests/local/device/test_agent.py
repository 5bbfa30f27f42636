"""The user agent (Paper IV Algorithm 1): policies, durable personal budgets, domain enforcement."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from dprivacy.errors import ValidationError
from dprivacy.local import (
    Code,
    MatrixRandomiser,
    PersonalBudget,
    PublicPolicy,
    Query,
    UserAgent,
)
from dprivacy.local.case_studies import rr_matrix, warner_query
from dprivacy.tables import Ledger

LN3 = math.log(3)
RR = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"], outputs=["yes", "no"])


def _agent(tmp_path: Path, *, user: str = "u1", data: dict | None = None, **kw) -> UserAgent:
    budget_kw = {k: kw.pop(k) for k in ("total", "per_field", "per_event") if k in kw}
    budget_kw.setdefault("total", 2.5)
    b = PersonalBudget(tmp_path / "ledger.sqlite", user, **budget_kw)
    return UserAgent(user, data or {"smoker": "yes", "age": 40}, b, sandbox=None, pad=False,
                     rng=np.random.default_rng(0), **kw)


def _q(qid: str, T=RR, fields=("smoker",), **kw) -> Query:  # noqa: N803
    return Query(qid, T, Code.builtin("field"), fields=fields, params={"field": fields[0]}, **kw)


def test_over_budget_refused_and_budget_unchanged(tmp_path: Path) -> None:
    a = _agent(tmp_path, total=2.5)
    assert a.handle(_q("q1"))["status"] == "ok"
    assert a.handle(_q("q2"))["status"] == "ok"
    before = a.remaining()
    assert before["total"] == pytest.approx(2.5 - 2 * LN3)
    r = a.handle(_q("q3"))
    assert r["status"] == "rejected" and r["reason"] == "personal budget exhausted" and r["result"] is None
    assert a.remaining() == before
    # the refusal is logged nowhere in the ledger: only the two paid queries
    db = Ledger(tmp_path / "ledger.sqlite")._db()
    assert db.execute("SELECT COUNT(*) FROM queries").fetchone()[0] == 2


def test_zero_column_refused_without_charge(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    T = MatrixRandomiser([[1.0, 0.0], [0.5, 0.5]], inputs=["yes", "no"])  # noqa: N806
    before = a.remaining()
    r = a.handle(_q("inf", T))
    assert r["status"] == "rejected" and "infinite" in r["reason"]
    assert a.remaining() == before


def test_public_policy_rules(tmp_path: Path) -> None:
    a = _agent(tmp_path, policy=PublicPolicy(allowed_fields=["smoker"], max_cost=1.2, max_t=2.0))
    before = a.remaining()
    assert "not offered" in a.handle(_q("f", fields=("age",)))["reason"]
    assert "above" in a.handle(_q("c", MatrixRandomiser(rr_matrix(2.0, 2), inputs=["yes", "no"])))["reason"]
    assert "time bound" in a.handle(_q("t", t=5.0))["reason"]
    assert "sandbox" in a.handle(Query("s", RR, Code.source("def pre(d, p, s):\n    return 'yes'"),
                                       fields=("smoker",)))["reason"]
    assert a.remaining() == before
    bad = a.handle({"id": "m", "T": {"kind": "matrix", "matrix": [[0.5, 0.6], [0.5, 0.5]]}})
    assert bad["status"] == "rejected" and bad["reason"].startswith("malformed")
    assert a.remaining() == before


def test_durable_total_cost(tmp_path: Path) -> None:
    a = _agent(tmp_path, total=2.5)
    a.handle(_q("q1"))
    b = _agent(tmp_path, total=2.5)  # a restarted agent on the same ledger file
    assert b.remaining()["total"] == pytest.approx(2.5 - LN3)
    with pytest.raises(ValidationError):  # the initial budget cannot be changed by restarting
        _agent(tmp_path, total=5.0)


def test_replayed_query_costs_nothing(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    r1 = a.handle(_q("q1"))
    rem = a.remaining()
    assert a.handle(_q("q1")) == r1 and a.remaining() == rem


def test_per_field_and_event_budgets(tmp_path: Path) -> None:
    a = _agent(tmp_path, total=10.0, per_field={"smoker": 1.5}, per_event=1.2)
    assert a.handle(_q("s1"))["status"] == "ok"
    assert a.handle(_q("s2"))["reason"] == "personal budget exhausted"  # field budget 1.5 < 2 ln 3
    assert a.remaining()["total"] == pytest.approx(10 - LN3)  # all-or-nothing: total untouched
    T = MatrixRandomiser(rr_matrix(LN3, 2), inputs=[40, 41])  # noqa: N806
    assert a.handle(_q("e1", T, fields=("age",), event="day1"))["status"] == "ok"
    assert a.handle(_q("e2", T, fields=("age",), event="day1"))["status"] == "rejected"
    assert a.handle(_q("e3", T, fields=("age",), event="day2"))["status"] == "ok"
    rem = a.remaining()
    assert rem["event/day1"] == pytest.approx(1.2 - LN3) and rem["field/smoker"] == pytest.approx(1.5 - LN3)


def test_private_policy_feeds_a_dummy(tmp_path: Path) -> None:
    T = MatrixRandomiser(rr_matrix(12.0, 2), inputs=["yes", "no"], outputs=["yes", "no"])  # noqa: N806
    a = _agent(tmp_path, total=1e3, private_policy=lambda q, d: d["smoker"] != "yes",
               domains={"smoker": ["no"]})
    res = [a.handle(_q(f"p{k}", T))["result"] for k in range(10)]
    assert res.count("no") >= 9  # the data says "yes"; the dummy "no" went through pre


def test_out_of_domain_pre_output_is_random(tmp_path: Path) -> None:
    cats = list("abcdefgh")
    T = MatrixRandomiser(rr_matrix(15.0, len(cats)), inputs=cats, outputs=cats)  # noqa: N806
    a = _agent(tmp_path, data={"c": "zzz"}, total=1e3)  # not a category: pre's value is outside
    q = [Query(f"o{k}", T, Code.builtin("field"), fields=("c",)) for k in range(8)]
    res = [a.handle(x)["result"] for x in q]
    assert len(set(res)) >= 3


def test_padding_hides_pre_time(tmp_path: Path) -> None:
    b = PersonalBudget(tmp_path / "l.sqlite", "u", total=10.0)
    a = UserAgent("u", {"smoker": "yes"}, b, sandbox=None, pad=True, rng=0)
    t0 = time.monotonic()
    a.handle(_q("slow", t=0.3))
    assert time.monotonic() - t0 >= 0.3


def test_warner_query_through_agent(tmp_path: Path) -> None:
    a = _agent(tmp_path, data={"smoker": "no"}, total=1.0)
    r = a.handle(warner_query("w", 0.5, "smoker", ["yes", "no"]))
    assert r["status"] == "ok" and r["result"] in ("yes", "no") and r["cost"] == pytest.approx(0.5)
