"""Leak class: free membership tests on pandas (issue: nothing escapes before a charge).

A pure per-record function misbehaves only on the target record: it raises a BaseException
(KeyboardInterrupt, SystemExit, GeneratorExit), returns a value whose sanitising recurses too
deep, a dict whose key raises when compared, or an ndarray subclass whose indexing raises. None of
it may escape (neighbouring tables look alike), and no analyst function runs before the query's
charge: transformations are lazy, so ``where(f)`` itself never calls ``f``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprivacy.tables import Queryable, sampling
from tests.tables.leak_harness import assert_indistinguishable, neighbours, pinq_pair, proper_pair

EPS = 0.5


def nested(depth=200_000):
    v = ()
    for _ in range(depth):
        v = (v,)
    return v


class EvilKey(str):
    """A dict key equal in hash to "value" whose comparison raises."""

    def __hash__(self):
        return hash("value")

    def __eq__(self, other):
        raise RuntimeError("eq")


class EvilArray(np.ndarray):
    def __getitem__(self, key):
        raise RuntimeError("getitem")

    def __len__(self):
        raise RuntimeError("len")


def _raise(exc):
    raise exc


ON_TARGET = {
    "KeyboardInterrupt": lambda: _raise(KeyboardInterrupt()),
    "SystemExit": lambda: _raise(SystemExit(2)),
    "GeneratorExit": lambda: _raise(GeneratorExit()),
    "a deeply nested tuple": lambda: nested(),
    "a dict whose key raises": lambda: {EvilKey("value"): 1},
    "a list of such dicts": lambda: [{EvilKey("value"): 1}],
    "an ndarray subclass": lambda: np.arange(3).view(EvilArray),
}


def on_target(make):
    def f(r, *_):
        return make() if r["name"] == "target" else 1.0
    return f


PROGRAMS = {
    "where": lambda f: lambda t: t.where(f).noisy_count(EPS),
    "select": lambda f: lambda t: t.select(v=f).noisy_count(EPS),
    "select_many": lambda f: lambda t: t.select_many(2, f).noisy_count(EPS),
    "select_many columns": lambda f: lambda t: t.select_many(2, f, columns=["value"])
    .noisy_count(EPS),
    "group_by": lambda f: lambda t: t.group_by(f).noisy_count(EPS),
    "partition": lambda f: lambda t: t.partition([1.0], f)[1.0].noisy_count(EPS),
    "sum": lambda f: lambda t: t.noisy_sum(EPS, f, -1, 1),
    "median": lambda f: lambda t: t.noisy_median(EPS, f, -1, 1),
    "exponential": lambda f: lambda t: t.exponential_mechanism(EPS, [0, 1], f),
}
SENS = {"select_many": 2, "select_many columns": 2, "group_by": 2, "sum": 1,
        "median": None, "exponential": None}


def contained(program):
    """Turn anything that escapes (BaseException included) into an observable error."""
    def run(t):
        try:
            return program(t)
        except BaseException as exc:  # noqa: BLE001 - what escapes is the finding
            raise RuntimeError(f"escaped: {type(exc).__name__}") from None
    return run


@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("odd", list(ON_TARGET))
def test_nothing_escapes_on_the_target(program, odd):
    prog = contained(PROGRAMS[program](on_target(ON_TARGET[odd])))
    a, b = pinq_pair(prog)
    assert b.error is None, b.error
    assert_indistinguishable(a, b, sensitivity=SENS.get(program, 1))


@pytest.mark.parametrize("odd", list(ON_TARGET))
def test_nothing_escapes_on_the_target_proper(odd):
    f = on_target(ON_TARGET[odd])
    for prog in (PROGRAMS["where"](f), PROGRAMS["select_many"](f), PROGRAMS["sum"](f)):
        a, b = proper_pair(contained(prog))
        assert b.error is None, b.error
        assert_indistinguishable(a, b, sensitivity=None)


TRANSFORMS = {
    "where": lambda t, f: t.where(f),
    "select": lambda t, f: t.select(v=f),
    "select_many": lambda t, f: t.select_many(2, lambda r: [f(r)]),
    "group_by key": lambda t, f: t.group_by(f),
    "partition": lambda t, f: t.partition([True], f)[True],
    "chain": lambda t, f: t.where(f).select(v=f).distinct().take(5),
    "join after where": lambda t, f: t.where(f).join(t, 1, on="g"),
    "sample after where": lambda t, f: sampling.sample_fraction(t.where(f), 0.5),
    "partition of a sample": lambda t, f: sampling.sample_bernoulli(t, 0.5).where(f),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_analyst_functions_run_only_after_the_charge(name):
    """Every call of the analyst's function sees the query's charge already made; building
    the transformation calls it never."""
    _, df = neighbours()
    t = Queryable(df, budget=10.0)
    seen = []

    def f(r):
        seen.append(t.remaining_budget())
        return True

    derived = TRANSFORMS[name](t, f)
    assert seen == []
    assert derived.columns  # the schema is public and needs no record
    assert seen == []
    derived.noisy_count(0.25)
    after = t.remaining_budget()
    assert after < 10.0 and seen and all(b == after for b in seen)
    n = len(seen)
    derived.noisy_count(0.25)  # computed once, kept: f does not run again
    assert len(seen) == n


DEEP_PROGRAMS = {
    "group_by": lambda t: t.group_by("name").noisy_count(EPS),
    "distinct": lambda t: t.distinct().noisy_count(EPS),
    "partition": lambda t: t.partition(["p1"], "name")["p1"].noisy_count(EPS),
    "join": lambda t: t.join(t, 1, on="name").noisy_count(EPS),
    "union": lambda t: t.union(t).noisy_count(EPS),
    "except": lambda t: t.except_(t.where(lambda r: True)).noisy_count(EPS),
    "count_by": lambda t: t.count_by(["p1"], "name", EPS),
}


@pytest.mark.parametrize("kind", [list, tuple])
@pytest.mark.parametrize("name", list(DEEP_PROGRAMS))
def test_a_deeply_nested_value_in_the_targets_record(kind, name):
    """The target's own data holds a value nested 100 000 deep: hashing or printing it in the
    library's grouping, joins and set operations must not raise RecursionError."""
    from tests.tables.leak_harness import target

    v = kind()
    for _ in range(100_000):
        v = kind([v])
    a, b = pinq_pair(contained(DEEP_PROGRAMS[name]), tgt=target(name=v))
    assert a.error is None and b.error is None, b.error


def test_a_deeply_nested_value_with_proper_public_tables():
    import pandas as pd

    from tests.tables.leak_harness import target

    v = []
    for _ in range(100_000):
        v = [v]
    pub = pd.DataFrame({"name": ["p1", "p2"], "zone": [1, 2]})
    for prog in (lambda p: p.join_public(pub, "name").noisy_count(EPS),
                 lambda p: p.exclude(pub[["name"]], ["name"]).noisy_count(EPS)):
        a, b = proper_pair(contained(prog), tgt=target(name=v))
        assert a.error is None and b.error is None, b.error
