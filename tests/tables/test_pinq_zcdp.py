"""PINQ tables in zCDP mode: Gaussian counts and sums charged rho, pure queries charged ε²/2,
stabilities squared, on pandas and DuckDB; refusals before any charge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dprivacy as dp
from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables import Queryable

BACKENDS = ["pandas", "duckdb"]


def people() -> pd.DataFrame:
    return pd.DataFrame({"age": [15, 22, 37, 41, 58, 63, 70, 19],
                         "zip": ["a", "b", "a", "c", "b", "a", "c", "b"]})


def _table(backend: str, **kw) -> Queryable:
    if backend == "duckdb":
        pytest.importorskip("duckdb")
    return Queryable(people(), backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_count_and_sum_are_charged_rho_and_pure_queries_eps_squared_over_two(backend):
    t = _table(backend, rho=1.0, noise_seed=1)
    assert t.zcdp
    if backend == "pandas":
        adults = t.where(lambda r: r["age"] > 17)
    else:
        from ibis import _

        adults = t.where(_.age > 17)
    y = adults.gaussian_count(rho=0.25)
    assert t.remaining_budget() == pytest.approx(0.75)
    assert abs(y - 7) < 10 and y == round(y)  # discrete Gaussian on an integer count
    adults.gaussian_sum(0.125, "age", 0, 100)
    assert t.remaining_budget() == pytest.approx(0.625)
    adults.noisy_count(eps=0.5)  # pure 0.5-DP: 0.5^2 / 2 = 0.125 of rho
    assert t.remaining_budget() == pytest.approx(0.5)
    assert t.cost(0.5) == pytest.approx(0.125)
    with pytest.raises(BudgetExceededError):
        t.gaussian_count(rho=0.6)
    assert t.remaining_budget() == pytest.approx(0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stability_multiplies_the_rho_by_its_square(backend):
    t = _table(backend, rho=10.0, noise_seed=2)
    t.group_by("zip").gaussian_count(rho=0.5)  # stability 2: 4 x 0.5
    assert t.remaining_budget() == pytest.approx(8.0)
    parts = t.partition(["a", "b"], "zip")
    parts["a"].gaussian_count(rho=1.0)
    parts["b"].gaussian_count(rho=1.0)  # disjoint parts: the maximum, not the sum
    assert t.remaining_budget() == pytest.approx(7.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_answers_have_the_promised_distribution(backend):
    t = _table(backend, rho=1e9, noise_seed=3)
    rho = 0.02  # count sigma = 5; sum over [0, 100] sigma = 500
    counts = np.array([t.gaussian_count(rho) for _ in range(300)])
    sums = np.array([t.gaussian_sum(rho, "age", 0, 100) for _ in range(300)])
    assert stats.kstest((counts - 8) / 5.0, "norm").pvalue > 1e-4
    assert stats.kstest((sums - people()["age"].sum()) / 500.0, "norm").pvalue > 1e-4


def test_refusals_charge_nothing():
    t = Queryable(people(), rho=1.0)
    with pytest.raises(ValidationError, match="rho"):
        t.gaussian_count(rho=0)
    with pytest.raises(ValidationError, match="rho"):
        t.gaussian_sum(float("inf"), "age", 0, 1)
    other = Queryable(people(), rho=1.0)
    with pytest.raises(ValidationError, match="zCDP mode"):
        t.concat(other)
    with pytest.raises(ValidationError, match="zCDP mode"):
        t.join(other, 1, "zip")
    joined = t.join(pd.DataFrame({"zip": ["a"], "city": ["x"]}), 1, "zip")  # public: allowed
    joined.gaussian_count(rho=0.01)  # stability 2 x bound 1 = 2 -> 4 x 0.01
    assert t.remaining_budget() == pytest.approx(0.96)
    from dprivacy.tables import sampling

    with pytest.raises(ValidationError, match="zCDP mode"):
        sampling.sample_bernoulli(t, 0.5)
    pure = Queryable(people(), budget=1.0)
    with pytest.raises(ValidationError, match="rho=R"):
        pure.gaussian_count(rho=0.1)
    with pytest.raises(ValidationError, match="not both"):
        Queryable(people(), budget=1.0, rho=1.0)
    assert t.remaining_budget() == pytest.approx(0.96) and pure.remaining_budget() == 1.0


def test_durable_zcdp_source_is_apart_from_the_pure_one(tmp_path):
    path = tmp_path / "l.sqlite"
    Queryable(people(), budget=2.0, ledger=path, source="s").noisy_count(eps=1.0)
    z = Queryable(people(), rho=0.5, ledger=path, source="s")
    z.gaussian_count(rho=0.2)
    assert Queryable(people(), rho=None, ledger=path, source="zcdp:s").remaining_budget() == \
        pytest.approx(0.3)
    assert Queryable(people(), ledger=path, source="s").remaining_budget() == pytest.approx(1.0)


def test_dx_histogram_release_on_a_zcdp_table_is_charged_its_pure_cost_squared_over_two():
    U = dp.Universe.from_domains({"zip": ["a", "b", "c"]})
    M = dp.metrics.Discrete(eps=1.0)
    W = dp.Workload(np.array([[1.0, 0.0, 1.0]]))
    D = dp.Design(w=np.array([1.0]), beta=np.array([0.4]), constraints=M.constraint_set(U))
    t = Queryable(people()[["zip"]], rho=1.0, noise_seed=0)
    h = t.histogram(U)
    assert h.cost(W, D) == pytest.approx(0.4**2 / 2)
    y = t.release(W, D, U)
    assert y.shape == (1,) and t.remaining_budget() == pytest.approx(1 - 0.08)
