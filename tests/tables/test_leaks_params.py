"""Leak class: privacy parameters that are charged as one value and used as another.

ε (and lo, hi, frac, k, ...) is converted once to a built-in number; that number is charged and
used. A float subclass whose ``__float__`` / arithmetic / comparisons lie, or a Real whose
``__float__`` changes between calls, must be charged exactly what it is used as.
"""

from __future__ import annotations

import fractions
import numbers

import numpy as np
import pandas as pd
import pytest

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables import ProPerTable, Queryable
from tests.tables.leak_harness import assert_indistinguishable, people, pinq_pair


class LyingFloat(float):
    """Claims to be tiny whenever asked, but stores its true value."""

    def __float__(self):
        return 1e-9

    def __mul__(self, other):
        return 1e-9

    __rmul__ = __mul__

    def __truediv__(self, other):
        return 1e-9

    def __rtruediv__(self, other):
        return 1e-9

    def __le__(self, other):
        return True

    def __lt__(self, other):
        return True

    def __gt__(self, other):
        return False

    def __ge__(self, other):
        return False


class LyingInt(int):
    def __index__(self):
        return 1

    def __int__(self):
        return 1

    def __mul__(self, other):
        return 1

    __rmul__ = __mul__

    def __lt__(self, other):
        return False


class Drifting(numbers.Real):
    """A Real whose value changes every time it is read."""

    def __init__(self, values):
        self.values = list(values)
        self.reads = 0

    def __float__(self):
        self.reads += 1
        return self.values.pop(0)

    # the abstract methods of numbers.Real, all lying
    def _no(self, *a):
        return 1e-9
    __abs__ = __add__ = __radd__ = __mul__ = __rmul__ = __neg__ = __pos__ = _no
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = _no
    __mod__ = __rmod__ = __trunc__ = __floor__ = __ceil__ = __round__ = _no

    def __lt__(self, other):
        return True

    def __le__(self, other):
        return True

    def __eq__(self, other):
        return False

    __hash__ = None


def table(**kw):
    return Queryable(people(), budget=1.0, noise_seed=0, **kw)


def test_a_float_subclass_is_charged_its_stored_value():
    t = table()
    with pytest.raises(BudgetExceededError):
        t.noisy_count(LyingFloat(5.0))  # 5 > 1: refused, whatever __float__ says
    assert t.remaining_budget() == 1.0
    assert t.cost(LyingFloat(0.25)) == 0.25


@pytest.mark.parametrize("query", [
    lambda t, e: t.noisy_count(e),
    lambda t, e: t.noisy_sum(e, "x", -1, 1),
    lambda t, e: t.noisy_average(e, "x", -1, 1),
    lambda t, e: t.noisy_median(e, "x", -1, 1),
    lambda t, e: t.where(lambda r: r["g"] == 1).group_by("g").noisy_count(e),
])
def test_charged_and_used_as_the_same_built_in_value(query):
    """Same seed, same program: ε = LyingFloat(0.5) gives the answer and the charge of 0.5."""
    lying, plain = table(), table()
    a = query(lying, LyingFloat(0.5))
    b = query(plain, 0.5)
    assert a == b
    assert lying.remaining_budget() == plain.remaining_budget() < 1.0


def test_a_drifting_real_is_read_once():
    t, twin = table(), table()
    eps = Drifting([0.3, 1e-9, 1e-9])
    a = t.noisy_count(eps)
    assert eps.reads == 1
    assert a == twin.noisy_count(0.3)
    assert t.remaining_budget() == twin.remaining_budget() == pytest.approx(0.7)


def test_lying_ranges_fractions_and_stabilities():
    t, twin = table(), table()
    assert t.noisy_sum(0.2, "x", LyingFloat(-1.0), LyingFloat(1.0)) == twin.noisy_sum(0.2, "x",
                                                                                      -1.0, 1.0)
    assert t.noisy_order_statistic(0.2, LyingFloat(0.25), "x", -1, 1) == \
        twin.noisy_order_statistic(0.2, 0.25, "x", -1, 1)
    big = Queryable(people(), budget=100.0)
    q = big.select_many(LyingInt(7), lambda r: [r["x"]] * 7)
    assert q.cost(1.0) == 7.0  # the stored 7, not what __index__ or __mul__ claim
    q.noisy_count(1.0)
    assert big.remaining_budget() == 93.0
    assert len(q._df) == 7 * len(people())
    assert big.take(LyingInt(3)).cost(1.0) == 2.0 and len(big.take(LyingInt(3))._df) == 3


def test_proper_charges_each_record_the_stored_value():
    df = people().assign(pid=np.arange(12))
    p = ProPerTable(df, budget=1.0, id_column="pid", noise_seed=0)
    p.where(lambda r: r["g"] == 0).noisy_count(LyingFloat(0.4))
    rem = p._ledger.remaining(np.arange(12))
    assert list(rem) == pytest.approx([0.6 if g == 0 else 1.0 for g in df["g"]])
    p.noisy_count(LyingFloat(5.0))  # nobody can pay 5: nobody charged, no error
    assert list(p._ledger.remaining(np.arange(12))) == pytest.approx(list(rem))


@pytest.mark.parametrize("bad", [True, np.bool_(True), float("nan"), float("inf"), -0.1, 0.0,
                                 "0.5", 1 + 0j, None, [0.5], np.array(0.5)])
def test_non_real_or_invalid_eps_is_refused_before_any_charge(bad):
    a, b = pinq_pair(lambda t: t.noisy_count(bad), budget=1.0)
    assert_indistinguishable(a, b, sensitivity=None)
    assert a.error is not None and a.error[0] == ValidationError.__name__
    assert a.budget == 1.0


@pytest.mark.parametrize("good", [np.float64(0.5), np.float32(0.5), fractions.Fraction(1, 2), 1])
def test_other_reals_are_converted(good):
    t = table()
    t.noisy_count(good)
    assert t.remaining_budget() == pytest.approx(1.0 - float(good))


def test_float_subclass_programs_on_neighbours():
    for prog in (lambda t: t.noisy_count(LyingFloat(5.0)),
                 lambda t: t.noisy_sum(LyingFloat(0.5), "x", LyingFloat(-1.0), 1.0),
                 lambda t: t.select_many(LyingInt(2), lambda r: [1, 1]).noisy_count(0.4)):
        a, b = pinq_pair(prog, budget=1.0)
        assert_indistinguishable(a, b, sensitivity=None)


def test_data_owner_budget_and_seed_arguments_are_checked():
    with pytest.raises(ValidationError):
        Queryable(pd.DataFrame({"a": [1]}), budget=float("nan"))
    assert Queryable(pd.DataFrame({"a": [1]}), budget=LyingFloat(2.0)).remaining_budget() == 2.0
    for seed in (True, -1, 1.5, "0"):
        with pytest.raises(ValidationError, match="noise_seed"):
            Queryable(pd.DataFrame({"a": [1]}), budget=1.0, noise_seed=seed)
