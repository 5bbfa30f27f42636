"""The analyst's side: reply schema checks and ``post`` run on T's outputs only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprivacy.errors import ValidationError
from dprivacy.local import Code, MatrixRandomiser, PersonalBudget, ProductRandomiser, Query, UserAgent
from dprivacy.local.builtins import derive_seed, rr_scale
from dprivacy.local.case_studies import (
    basic_randomiser_estimate,
    basic_randomiser_query,
    duchi_query,
    rappor_query,
    warner_query,
)
from dprivacy.local.postprocess import apply_post, reply_problem


def _ok(q: Query, result, user: str = "u1") -> dict:
    return {"query": q.id, "user": user, "status": "ok", "cost": q.T.cost(), "result": result}


def test_reply_schema() -> None:
    q = warner_query("w", 1.0, "smoker", ["yes", "no"])
    assert reply_problem(q, _ok(q, "yes")) is None
    assert "not an output" in reply_problem(q, _ok(q, 1234))
    assert "cost" in reply_problem(q, {**_ok(q, "no"), "cost": 0.5})
    assert "keys" in reply_problem(q, {**_ok(q, "no"), "leak": 1234})
    assert "query" in reply_problem(q, {**_ok(q, "no"), "query": "other"})
    bits = rappor_query("r", 2.0, "c", ["a", "b", "c"])
    assert reply_problem(bits, _ok(bits, [0, 1, 1])) is None  # outputs need not be one-hot
    for bad in ([0, 2, 1], [0, 1], [True, 0, 0], "011"):
        assert reply_problem(bits, _ok(bits, bad)) is not None
    assert isinstance(bits.T, ProductRandomiser)


def test_builtin_post_on_the_analysts_side() -> None:
    q = basic_randomiser_query("b", 1.0, "x", m=4, seed=11)
    replies = [_ok(q, z, f"u{i}") for i, z in enumerate([1, -1, 1])]
    replies.append({"query": "b", "user": "u9", "status": "rejected", "reason": "budget", "result": None})
    out = apply_post(q, replies)
    c = rr_scale(1.0) * 2.0  # c_eps * sqrt(m)
    assert out == [[derive_seed(11, f"u{i}") % 4, z * c] for i, z in enumerate([1, -1, 1])]
    assert basic_randomiser_estimate(out, 4).shape == (4,)


def test_analyst_source_post_sees_only_the_reply() -> None:
    T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"], outputs=["yes", "no"])  # noqa: N806
    post = Code.source("def post(z, params, seed):\n    return [z, params['k'], seed]", entry="post")
    q = Query("s", T, Code.builtin("field"), post, fields=("smoker",), params={"k": 3}, seed=5)
    assert apply_post(q, [_ok(q, "no", "alice")]) == [["no", 3, derive_seed(5, "alice")]]


def test_invalid_replies_raise_or_are_dropped() -> None:
    q = duchi_query("d", 1.0, "x")
    bad = [_ok(q, 1), {**_ok(q, 1), "result": 0.3}]
    with pytest.raises(ValidationError, match="not an output"):
        apply_post(q, bad)
    assert apply_post(q, bad, invalid="drop") == [pytest.approx(rr_scale(1.0))]
    with pytest.raises(ValidationError, match="unknown builtin post"):
        apply_post(Query("x", q.T, q.pre, Code.builtin("nope"), fields=("x",)), [_ok(q, 1)])


def test_device_and_analyst_together(tmp_path) -> None:
    """Duchi's mean through real agents (T on the device) and apply_post (the scaling here)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, 400)
    q = duchi_query("mean", 1.0, "x")
    replies = [UserAgent(f"u{i}", {"x": float(v)}, PersonalBudget(tmp_path / "l.sqlite", f"u{i}", total=1.0),
                         sandbox=None, pad=False, rng=i).handle(q) for i, v in enumerate(x)]
    assert all(r["result"] in (-1, 1) for r in replies)  # the device replies T's output
    est = float(np.mean(apply_post(q, replies)))
    sd = math.sqrt((rr_scale(1.0) ** 2 * len(x) - float(np.sum(x ** 2))) / len(x) ** 2)
    assert abs(est - x.mean()) < 4.5 * sd
