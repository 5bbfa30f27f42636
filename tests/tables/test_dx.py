"""d_X Laplace releases on PINQ and ProPer tables: per-record and global charges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import dprivacy as dp
from dprivacy.errors import BudgetExceededError, ShapeError, ValidationError
from dprivacy.tables import ProPerTable, Queryable
from dprivacy.tables.dx import element_costs

U = dp.Universe.from_domains({"a": [0, 1, 2]})
F = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]])
W = dp.Workload(F)
M = dp.metrics.Discrete(eps=1.0)  # D's d_X loss is at most 0.2·1 + 0.2·2 = 0.6 ≤ 1
_D0 = dp.Design(w=np.array([1.0, 0.5]), beta=np.array([0.2, 0.4]))  # u = [0.2, 0.2]
D = dp.Design(w=_D0.w, beta=_D0.beta, constraints=M.constraint_set(U))
COST = np.array([0.2, 0.4, 0.4])  # Σ_k u_k |F_ki|


def records() -> pd.DataFrame:
    return pd.DataFrame({"a": [0, 0, 1, 2, 2, 2, 7]})  # 7 is not an element


def test_element_costs_dense_and_sparse():
    assert element_costs(W, D) == pytest.approx(COST)
    assert element_costs(dp.Workload(sp.csr_array(F)), D) == pytest.approx(COST)
    exact = dp.Design(w=np.array([1.0, 1.0]), beta=np.array([np.inf, 1.0]))
    with pytest.raises(ValidationError, match="infinite"):
        element_costs(W, exact)


@pytest.mark.parametrize("durable", [False, True])
def test_pinq_release_charges_the_max_cost_times_the_scaling(durable, tmp_path):
    t = Queryable(records(), budget=1.0, ledger=tmp_path / "l.sqlite" if durable else None)
    h = t.histogram(U)
    assert h.N == 3 and h.cost(W, D) == pytest.approx(0.4)
    doubled = t.concat(t)
    assert doubled.histogram(U).cost(W, D) == pytest.approx(0.8)
    y = t.release(W, D, U)
    assert y.shape == (2,) and t.remaining_budget() == pytest.approx(0.6)
    with pytest.raises(BudgetExceededError):
        doubled.release(W, D, U)
    assert t.remaining_budget() == pytest.approx(0.6)
    if durable:  # a new process sees what the release spent
        assert Queryable(records(), ledger=tmp_path / "l.sqlite").remaining_budget() == 0.6


def test_pinq_release_is_the_dx_laplace_of_the_histogram():
    """Same seed: the table release equals DXLaplace.release on the table's histogram."""
    t = Queryable(records(), budget=100.0, noise_seed=5)
    y = t.release(W, _D0, U, metric=M)
    x = U.histogram(records(), on_unknown="drop")
    assert list(x) == [2, 1, 3]
    assert y == pytest.approx(dp.DXLaplace(W, D).release(x, rng=5, secure=False))


def test_proper_release_charges_each_record_its_element_cost_and_drops_non_payers():
    df = records().assign(pid=np.arange(7))
    budgets = [0.2, 0.1, 0.5, 0.4, 0.3, 1.0, 0.0]
    t = ProPerTable(df, budget=budgets, id_column="pid", noise_seed=1)
    y = t.release(W, D, U)  # payers: ids 0, 2, 3, 5 (and 6 costs 0)
    rem = t._ledger.remaining(np.arange(7))
    assert rem == pytest.approx([0.0, 0.1, 0.1, 0.0, 0.3, 0.6, 0.0])
    x_paid = np.array([1, 1, 2])
    assert y == pytest.approx(dp.DXLaplace(W, D).release(x_paid, rng=1, secure=False))


def test_proper_release_sums_costs_per_source_and_keeps_bottom_records():
    t = ProPerTable(pd.DataFrame({"a": [0, 1]}), budget=[0.45, 10.0], noise_seed=3)
    both = t.select_many(2, lambda r: [(0,), (2,)] if r["a"] == 0 else [(1,)], columns=["a"])
    lit = both.concat(pd.DataFrame({"a": [1, 1]}))  # public rows: always counted, never charged
    lit.release(W, D, U)  # source 0: 0.2 + 0.4 = 0.6 > 0.45 -> dropped
    assert list(t._ledger.remaining([0, 1])) == pytest.approx([0.45, 9.6])
    gen = np.random.default_rng(3)
    gen.laplace(size=2)
    y = lit.histogram(U).release(W, D)
    assert y == pytest.approx(dp.DXLaplace(W, D).release(np.array([0, 3, 0]), rng=gen,
                                                          secure=False))


def test_bad_release_input_charges_nothing():
    t = Queryable(records(), budget=1.0)
    p = ProPerTable(records(), budget=1.0)
    small = dp.Universe.from_domains({"a": [0, 1]})
    for table in (t, p):
        with pytest.raises(ShapeError):
            table.release(W, D, small)
        with pytest.raises(ValidationError):
            table.histogram(U, on_unknown="maybe")
    with pytest.raises(ValidationError, match="always dropped"):
        p.histogram(U, on_unknown="raise")
    with pytest.raises(dp.errors.PrivacyViolationError):  # no constraint set, no metric
        t.release(W, _D0, U)
    with pytest.raises(dp.errors.PrivacyViolationError):  # the design breaks a tight metric
        p.release(W, _D0, U, metric=dp.metrics.Discrete(eps=0.1))
    assert t.remaining_budget() == 1.0
    assert (p._ledger.remaining(np.arange(7)) == 1.0).all()


def test_integer_workloads_release_integers_with_discrete_laplace_noise():
    """w ⊙ F integer: the answers are exact integers plus discrete Laplace noise (the output is
    on the integer grid); otherwise the continuous sampler is used."""
    from dprivacy import discrete_noise

    D1 = dp.Design(w=np.ones(3), beta=np.full(3, 0.5), constraints=M.constraint_set(U))
    eye = dp.Workload(np.eye(3))
    y = Queryable(records(), budget=100.0).release(eye, D1, U)  # secure noise
    assert y.shape == (3,) and np.all(y == np.round(y))
    seeded = Queryable(records(), budget=100.0, noise_seed=4).release(eye, D1, U)
    x = np.array([2, 1, 3])
    assert np.array_equal(seeded, x + discrete_noise.discrete_laplace(np.full(3, 2.0), rng=4,
                                                                      secure=False))
    halves = Queryable(records(), budget=100.0).release(W, D, U)  # w_1 F_12 = 0.5: continuous
    assert not np.all(halves == np.round(halves))
    p = ProPerTable(records(), budget=10.0)
    assert np.all(np.isin(p.release(eye, D1, U) % 1, [0.0]))
