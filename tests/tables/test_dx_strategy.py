"""Strategy releases on PINQ and ProPer tables (pandas, DuckDB): the in-process mechanism's
answers plus the noisy number of records, and every record charged ||A e_i||_1 + total_eps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dprivacy as dp
from dprivacy.errors import BudgetExceededError, PrivacyViolationError
from dprivacy.tables import ProPerTable, Queryable
from dprivacy.tables.dx import _StrategyPlan

U = dp.Universe.from_points(np.arange(8.0)[:, None], names=[f"p{i}" for i in range(8)])
M = dp.metrics.Euclidean(1.0)
W = dp.Workload.range_queries(8, [(a, b) for a in range(8) for b in range(a, 8)])


@pytest.fixture(scope="module")
def design():
    return dp.design_strategy(W, U, M, rounds=1)


def _records() -> pd.DataFrame:
    return pd.DataFrame({"name": ["p0", "p0", "p3", "p7", "p7", "p7", "elsewhere"],
                         "pid": np.arange(7)})


def _expected(design, x: np.ndarray, seed: int, total_eps: float) -> np.ndarray:
    """The in-process mechanism's release with the same seed, plus the noisy total's part."""
    mech = dp.StrategyMechanism(W, design, universe=U, metric=M)
    y = mech.release(x, rng=seed, secure=False)
    gen = np.random.default_rng(seed)
    gen.laplace(0.0, 1.0, size=design.p)  # the measurements' noise, drawn first
    n_noise = float(gen.laplace(0.0, 1.0, size=1)[0]) / total_eps
    plan = _StrategyPlan(W, design, U, M, ["name"], total_eps)
    per_n = plan.answer_variances()  # computed for the check below
    assert np.all(per_n >= mech.query_variances() - 1e-12)
    from dprivacy.mechanisms.strategy import _answers
    d_dn = _answers(mech.workload, mech.M, mech.o, mech.X, mech.z, np.zeros(design.p), 1.0)
    return y + d_dn * n_noise


def _costs(design) -> np.ndarray:
    import solvers.strategy as st
    return np.abs(st.materialise(design.C, design.basis)).sum(axis=0)


def test_pinq_charges_the_worst_element_and_releases_the_mechanism(design):
    c = _costs(design)
    # adding a record is not a d_X move: it costs ||A e_i||_1, up to the whole line here
    assert c.max() > 1
    t = Queryable(_records(), budget=100.0, noise_seed=5)
    y = t.release(W, design, U, metric=M)
    assert t.remaining_budget() == pytest.approx(100.0 - 2 * c.max())  # total_eps = max c_i
    x = U.histogram(_records().drop(columns="pid"), on_unknown="drop")
    assert list(x) == [2, 0, 0, 1, 0, 0, 0, 3]
    assert y == pytest.approx(_expected(design, x, 5, float(c.max())), rel=1e-9, abs=1e-9)
    t2 = Queryable(_records(), budget=c.max(), noise_seed=5)
    with pytest.raises(BudgetExceededError):
        t2.release(W, design, U, metric=M, total_eps=0.5)
    assert t2.remaining_budget() == c.max()


@pytest.mark.parametrize("backend", ["pandas", "duckdb"])
def test_proper_charges_each_record_and_drops_those_who_cannot_pay(design, backend):
    if backend == "duckdb":
        pytest.importorskip("duckdb")
        pytest.importorskip("ibis")
    c = _costs(design)
    total_eps = 0.25
    need = c + total_eps
    el = {f"p{i}": i for i in range(8)}
    budgets = [need[0] + 0.1, need[0] - 1e-6, need[3] + 1e-6, need[7] * 0.5, need[7] + 1, 5.0, 0.0]
    df = _records().assign(budget=budgets)
    t = ProPerTable(df, budget="budget", id_column="pid", noise_seed=2,
                    **({"backend": "duckdb"} if backend == "duckdb" else {}))
    y = t.release(W, design, U, metric=M, total_eps=total_eps)
    rem = np.array([float(v) for v in t._ledger.remaining(np.arange(7))])
    # id 5 (5.0 < 7.25 at p7) cannot pay; id 6 is not an element: neither counted nor charged
    paid = [True, False, True, False, True, False, False]
    want = [b - need[el[n]] if p else b for b, n, p in
            zip(budgets, _records()["name"].replace({"elsewhere": "p0"}), paid, strict=True)]
    assert rem == pytest.approx(want, abs=1e-8)
    x_paid = np.array([1, 0, 0, 1, 0, 0, 0, 1])
    assert y == pytest.approx(_expected(design, x_paid, 2, total_eps), rel=1e-9, abs=1e-9)


def test_the_answers_follow_the_mechanism_distribution(design):
    """Secure sampling: unbiased, with the strategy's variances plus the noisy total's."""
    x = np.array([2, 0, 0, 1, 0, 0, 0, 3])
    truth = W.answer(x)
    t = Queryable(_records().drop(columns="pid"), budget=1e9)
    R = 600
    out = np.array([t.release(W, design, U, metric=M, total_eps=1.0) for _ in range(R)])
    var = _StrategyPlan(W, design, U, M, ["name"], 1.0).answer_variances()
    assert np.all(np.abs(out.mean(axis=0) - truth) <= 5 * np.sqrt(var / R) + 1e-9)
    assert out.var(axis=0, ddof=1) == pytest.approx(var, rel=0.35)


def test_a_strategy_over_budget_is_refused_before_any_charge(design):
    bad = dp.StrategyDesign(W, design.C * 2, design.basis, None, None)
    t = Queryable(_records(), budget=10.0, noise_seed=1)
    with pytest.raises(PrivacyViolationError):
        t.release(W, bad, U, metric=M)
    assert t.remaining_budget() == 10.0


def _strategy_config(design) -> object:
    """The design as an analyst sends it: a strategy MechanismConfig, re-loaded and re-verified
    against the universe and metric (as the service does)."""
    from dprivacy.config import MechanismConfig

    text = MechanismConfig.from_design(W, U, M, design).to_json()
    return MechanismConfig.loads(text, U, M, W).design()


@pytest.mark.slow
def test_a_strategy_config_on_spark_pinq_and_proper_tables(design, spark, tmp_path):
    """PINQ and ProPer tables on Spark (budgets in the cluster's store): the in-process
    mechanism's release for the same seed, and per-record charges ||A e_i||_1 + total_eps."""
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable

    sd = _strategy_config(design)
    c = _costs(design)
    t = Queryable(spark.createDataFrame(_records()), budget=100.0, noise_seed=5, backend="spark")
    y = t.release(W, sd, U, metric=M)
    assert t.remaining_budget() == pytest.approx(100.0 - 2 * c.max())
    x = np.array([2, 0, 0, 1, 0, 0, 0, 3])
    assert y == pytest.approx(_expected(design, x, 5, float(c.max())), rel=1e-9, abs=1e-9)

    total_eps = 0.25
    need = c + total_eps
    el = {f"p{i}": i for i in range(8)}
    budgets = [need[0] + 0.1, need[0] - 1e-6, need[3] + 1e-6, need[7] * 0.5, need[7] + 1, 5.0, 0.0]
    store = SparkBudgetTable(tmp_path / "budgets", session=spark)
    p = ProPerTable(spark.createDataFrame(_records().assign(budget=budgets)), budget="budget",
                    ledger=store, id_column="pid", noise_seed=2, backend="spark")
    y = p.release(W, sd, U, metric=M, total_eps=total_eps)
    paid = [True, False, True, False, True, False, False]
    want = [b - need[el[n]] if ok else b for b, n, ok in
            zip(budgets, _records()["name"].replace({"elsewhere": "p0"}), paid, strict=True)]
    assert list(store.remaining(np.arange(7))) == pytest.approx(want, abs=1e-8)
    # one committed charge, paid by the three people who could
    (q, _label, payers, total), = store.queries()
    assert payers == 3 and total == pytest.approx(need[0] + need[3] + need[7], abs=1e-8)
    assert y == pytest.approx(_expected(design, np.array([1, 0, 0, 1, 0, 0, 0, 1]), 2, total_eps),
                              rel=1e-9, abs=1e-9)
    # a tampered strategy is refused before anything is written to the store
    bad = dp.StrategyDesign(W, design.C * 2, design.basis, None, None)
    versions = store.log.numbers()
    with pytest.raises(PrivacyViolationError):
        p.release(W, bad, U, metric=M)
    assert store.log.numbers() == versions
