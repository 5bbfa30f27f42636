"""Leak classes: failures (exception types and messages), overflow, and refusals.

An attacker makes a query fail only when the target is present: a function that raises, returns
an odd type, NaN, inf or a huge number on the target's record; key types that cannot be sorted
or merged; sums that overflow; costs too large to store. Every such program must behave the same
on neighbouring tables: no exception, or the same exception with the same message raised before
anything is charged; and the same budget left.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError
from dprivacy.tables import ProPerTable, Queryable
from tests.tables.leak_harness import (
    assert_indistinguishable,
    neighbours,
    pinq_pair,
    proper_pair,
    target,
)

EPS = 0.5


class Evil:
    """A value whose every protocol method raises: hashing, comparing, converting."""

    def __hash__(self):
        raise RuntimeError("hash")

    def __eq__(self, other):
        raise RuntimeError("eq")

    def __lt__(self, other):
        raise RuntimeError("lt")

    def __float__(self):
        raise RuntimeError("float")

    def __bool__(self):
        raise RuntimeError("bool")


class EvilFloat(float):
    def __float__(self):
        raise RuntimeError("float")

    def __hash__(self):
        raise RuntimeError("hash")


def on_target(value, other=1.0):
    """A per-record function returning ``value`` (or raising it) on the target only."""
    def f(r):
        if r["name"] == "target":
            if isinstance(value, BaseException):
                raise value
            return value() if callable(value) else value
        return other
    return f


ODD = {
    "ZeroDivisionError": ZeroDivisionError("x"),
    "KeyError": KeyError("nope"),
    "RecursionError": RecursionError("deep"),
    "MemoryError": MemoryError(),
    "SystemExit": SystemExit(3),
    "a string": "not a number",
    "None": None,
    "NaN": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "10**400": 10**400,
    "1e308": 1e308,
    "an Evil object": Evil,
    "an EvilFloat": lambda: EvilFloat(1.0),
    "a list": [1, 2],
    "a dict": {"a": 1},
    "a numpy array": np.ones(3),
    "a Series": pd.Series([1.0]),
}

PROGRAMS = {
    "where": lambda f: lambda t: t.where(f).noisy_count(EPS),
    "select then sum": lambda f: lambda t: t.select(v=f).noisy_sum(EPS, "v", -1, 1),
    "select then group_by": lambda f: lambda t: t.select(v=f).group_by("v").noisy_count(EPS),
    "select then distinct": lambda f: lambda t: t.select(v=f).distinct().noisy_count(EPS),
    "select then join": lambda f: lambda t: t.select(g=f).join(
        pd.DataFrame({"g": [1.0, 2.0]}), 2, on="g").noisy_count(EPS),
    "select then intersect": lambda f: lambda t: t.select(v=f).intersect(
        pd.DataFrame({"v": [1.0]})).noisy_count(EPS),
    "select then except": lambda f: lambda t: t.select(v=f).except_(
        pd.DataFrame({"v": [1.0]})).noisy_count(EPS),
    "group_by key": lambda f: lambda t: t.group_by(f).noisy_count(EPS),
    "partition key": lambda f: lambda t: t.partition([1.0, 2.0], f)[1.0].noisy_count(EPS),
    "select_many": lambda f: lambda t: t.select_many(2, lambda r: [f(r), f(r)])
    .noisy_count(EPS),
    "sum value": lambda f: lambda t: t.noisy_sum(EPS, f, -1, 1),
    "average value": lambda f: lambda t: t.noisy_average(EPS, f, -1, 1),
    "median value": lambda f: lambda t: t.noisy_median(EPS, f, -1, 1),
    "exponential score": lambda f: lambda t: t.exponential_mechanism(
        EPS, [0, 1], lambda r, c: f(r)),
}
SENSITIVITY = {"select then sum": 1, "sum value": 1, "average value": None,
               "median value": None, "exponential score": None, "select then group_by": 2,
               "select_many": 2}


@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("odd", list(ODD))
def test_per_record_failures_on_the_target_are_invisible(program, odd):
    prog = PROGRAMS[program](on_target(ODD[odd]))
    a, b = pinq_pair(prog)
    assert_indistinguishable(a, b, sensitivity=SENSITIVITY.get(program, 1))
    assert b.error is None


@pytest.mark.parametrize("odd", ["ZeroDivisionError", "a string", "NaN", "10**400",
                                 "an Evil object", "a list"])
def test_proper_per_record_failures_are_invisible(odd):
    f = on_target(ODD[odd])
    for prog in (lambda p: p.where(f).noisy_count(EPS),
                 lambda p: p.select(v=f).noisy_sum(EPS, "v", -1, 1),
                 lambda p: p.partition([1.0], f)[1.0].noisy_count(EPS),
                 lambda p: p.noisy_median(EPS, f, -1, 1)):
        a, b = proper_pair(prog)
        assert_indistinguishable(a, b, sensitivity=None)
        assert b.error is None


@pytest.mark.parametrize("backend", ["pandas", "duckdb"])
@pytest.mark.parametrize("value", [1e308, -1e308, 1.7976931348623157e308])
def test_sums_saturate_instead_of_overflowing(value, backend):
    """Clamping to a huge range: the exact sum overflows only with the target; no error."""
    base = pd.DataFrame({"pid": np.arange(4), "name": ["a"] * 4, "x": [1.7e308] * 4})
    tgt = pd.DataFrame({"pid": [99], "name": ["target"], "x": [value]})
    for prog in (lambda t: t.noisy_sum(2.0, "x", 0, 1.7e308),  # scale 8.5e307: finite
                 lambda t: t.noisy_average(2.0, "x", 0, 1.7e308),
                 lambda t: t.noisy_median(2.0, "x", 0, 1.7e308),
                 lambda t: t.noisy_sum(2.0, "x", -8e307, 8e307)):
        a, b = pinq_pair(prog, base=base, tgt=tgt, backend=backend)
        assert_indistinguishable(a, b, sensitivity=None)
        assert a.error is None and b.error is None


def test_analyst_set_warnings_and_float_errors_do_not_surface(monkeypatch):
    """The analyst turns warnings into errors and asks numpy to raise on overflow: the data-
    dependent overflow of the target's run still raises nothing."""
    import warnings

    base = pd.DataFrame({"pid": np.arange(4), "name": ["a"] * 4, "x": [1.7e308] * 4})
    tgt = pd.DataFrame({"pid": [99], "name": ["target"], "x": [1.7e308]})
    old = np.seterr(all="raise")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for prog in (lambda t: t.noisy_sum(2.0, "x", 0, 1.7e308),
                         lambda t: t.noisy_average(2.0, "x", 0, 1.7e308),
                         lambda t: t.where(lambda r: r["x"] * 10 > 0).noisy_count(1.0),
                         lambda t: t.select(v=lambda r: r["x"] * 10).noisy_sum(2.0, "v", 0, 1)):
                a, b = pinq_pair(prog, base=base, tgt=tgt)
                assert_indistinguishable(a, b, sensitivity=None)
                assert a.error is None and b.error is None
    finally:
        np.seterr(**old)


def test_proper_costs_too_large_to_store_saturate():
    """ε × the target's multiplicity exceeds the largest storable budget only with the target's
    three outputs: the target simply cannot pay, no error, others unchanged."""
    prog = lambda p: p.select_many(  # noqa: E731
        3, lambda r: [1, 1, 1] if r["name"] == "target" else [1]).noisy_count(1e9)
    a, b = proper_pair(prog, budget=2e9, target_budget=2e9)
    assert_indistinguishable(a, b, sensitivity=None)
    assert a.error is None


def test_huge_eps_and_median_interval_edge_cases_are_total():
    base = pd.DataFrame({"pid": np.arange(3), "name": ["a"] * 3, "x": [0.5, 0.5, 0.5]})
    tgt = pd.DataFrame({"pid": [99], "name": ["target"], "x": [0.5]})
    for prog in (lambda t: t.noisy_median(1e300, "x", 0, 1),
                 lambda t: t.exponential_mechanism(1e300, [0, 1], lambda r, c: float(c == 1)),
                 lambda t: t.noisy_average(1e300, "x", 0, 1)):
        a, b = pinq_pair(prog, base=base, tgt=tgt, budget=1e301)
        assert a.error is None and b.error is None


@pytest.mark.parametrize("bad", [
    lambda t: t.noisy_count(5e-324),  # scale 1/ε is infinite
    lambda t: t.noisy_sum(1e-300, "x", 0, 1e300),
    lambda t: t.noisy_median(0.1, "x", -1e308, 1e308),  # hi - lo overflows
    lambda t: t.noisy_sum(0.1, "nope"),
    lambda t: t.select(v=lambda r: 1).noisy_sum(0.1),  # ok: one column -> refused? no: runs
    lambda t: t.noisy_sum(0.1, None),  # several columns
    lambda t: t.partition([[1]], "g"),
    lambda t: t.where("age > 3"),
    lambda t: t.join(t, 0, on="g"),
    lambda t: t.concat(pd.DataFrame({"other": [1]})),
    lambda t: t.exponential_mechanism(0.1, [], lambda r, c: 1),
    lambda t: t.noisy_count(0.1, rng=0),
    lambda t: t.noisy_count(0.1, secure=False),
    lambda t: t.histogram(None, on_unknown="raise"),
])
def test_refused_arguments_are_refused_alike_and_charge_nothing(bad):
    a, b = pinq_pair(bad, budget=1.0)
    assert_indistinguishable(a, b, sensitivity=None)
    if a.error is not None:
        assert a.budget == 1.0


def test_budget_refusals_do_not_depend_on_the_data():
    def program(t):
        t.where(lambda r: r["age"] > 20).noisy_count(0.6)
        return t.group_by("g").noisy_count(0.3)  # 2 x 0.3 > 0.4 left

    a, b = pinq_pair(program, budget=1.0)
    assert_indistinguishable(a, b, sensitivity=None)
    assert a.error is not None and a.error[0] == BudgetExceededError.__name__
    assert "0.3" in a.error[1]


def test_proper_never_refuses_or_reveals_exhaustion():
    """The target's budget is 0 in one run and 10 in the other: no observable difference
    except through the noisy answer itself."""
    outs = []
    for tb in (0.0, 10.0):
        _, df = neighbours()
        p = ProPerTable(df, budget=np.where(df["pid"] == 99, tb, 1.0), id_column="pid",
                        noise_seed=0)
        errs = []
        for call in (lambda p=p: p.noisy_count(5.0), lambda p=p: p.noisy_sum(5.0, "x"),
                     lambda p=p: p.as_pinq(5.0).noisy_count(5.0)):
            try:
                call()
            except Exception as exc:  # noqa: BLE001
                errs.append(type(exc).__name__)
        outs.append((errs, list(p._ledger.remaining(np.arange(12)))))
    assert outs[0] == outs[1] == ([], [1.0] * 12)


def test_target_rows_with_unhashable_values_in_the_data():
    """The data owner's data may hold unhashable values; grouping and set operations still
    run on neighbouring tables alike."""
    tgt = target(name=["target"])  # a list, unhashable
    for prog in (lambda t: t.group_by("name").noisy_count(EPS),
                 lambda t: t.distinct().noisy_count(EPS),
                 lambda t: t.partition(["p1"], "name")["p1"].noisy_count(EPS),
                 lambda t: t.join(t, 1, on="name").noisy_count(EPS)):
        a, b = pinq_pair(prog, tgt=tgt)
        assert a.error is None and b.error is None


def test_exception_messages_carry_no_counts():
    """A few refusals, made on tables of different sizes: identical messages."""
    msgs = []
    for n in (3, 40):
        t = Queryable(pd.DataFrame({"a": np.arange(n), "b": 1}), budget=1.0)
        row = []
        for bad in (lambda t=t: t.noisy_sum(0.1), lambda t=t: t.select_many(0, lambda r: []),
                    lambda t=t: t.noisy_median(0.1, "a", 1, 1), lambda t=t: t.take(-1)):
            with pytest.raises(Exception) as info:
                bad()
            row.append((type(info.value).__name__, str(info.value)))
        msgs.append(row)
    assert msgs[0] == msgs[1]
