"""One suite, three backends: the same analyst programs through the public Queryable/ProPerTable
API on pandas, DuckDB and Spark give the same answers (same data-owner noise seed), the same
costs and stability factors, the same silent ProPer drops and the same budgets left.

Analyst code is written once: ``lambda r: r["age"] > 17`` is a per-record function on pandas and
builds a row-wise Ibis expression on the engines (``r`` is then the public, data-free table)."""

from __future__ import annotations

import pandas as pd
import pytest

from dprivacy.errors import ValidationError
from dprivacy.tables import ProPerTable, Queryable
from dprivacy.tables.budgets.budget_table import BudgetTable

DF = pd.DataFrame({
    "id": [10, 11, 12, 13, 14, 15, 16, 17],
    "age": [15, 30, 47, 60, 22, 35, 71, 18],
    "role": ["T", "M", "T", "H", "T", "M", "H", "T"],
    "budget": [1.0, 1.0, 0.5, 2.0, 0.25, 1.0, 1.0, 0.75],
})
ENGINES = ["duckdb", "spark"]


@pytest.fixture(params=["pandas", "duckdb", "spark"])
def backend(request):
    return request.param


def _data(backend, request, df=DF):
    if backend == "spark":
        return request.getfixturevalue("spark").createDataFrame(df)
    return df


def _kw(backend):
    return {"backend": None if backend == "spark" else backend}


def pinq_program(q: Queryable) -> dict:
    """A PINQ analysis touching every transformation family; returns answers and costs."""
    out: dict = {}
    adults = q.where(lambda r: r["age"] > 17)
    out["count"] = adults.noisy_count(0.5)
    out["sum"] = adults.noisy_sum(0.5, "age", 0, 100)
    out["avg"] = adults.noisy_average(0.5, lambda r: r["age"] * 1.0, 0, 100)
    out["median"] = adults.noisy_median(0.5, "age", 0, 100)
    flat = q.select_many(2, lambda r: [r["age"], r["age"] + 1, r["age"] + 2])
    out["flat_cost"] = flat.cost(1.0)
    out["flat_sum"] = flat.noisy_sum(0.25, "value", 0, 100)
    groups = q.group_by("role")
    out["group_cost"] = groups.cost(1.0)
    out["groups"] = groups.noisy_count(0.25)
    parts = q.partition(["T", "M", "H"], lambda r: r["role"])
    out.update({f"part_{k}": parts[k].noisy_count(1.0) for k in ("T", "M", "H")})
    out["take_cost"] = q.take(3).cost(1.0)
    out["join_cost"] = q.join(q, 2, on="role").cost(1.0)
    out["bands"] = q.select(band=lambda r: r["age"] // 10).noisy_sum(0.25, "band", 0, 10)
    out["em"] = q.exponential_mechanism(0.5, [10, 40, 70], lambda r, c: r["age"] > c)
    out["left"] = q.remaining_budget()
    return out


def test_pinq_same_answers_costs_and_budget_on_every_backend(backend, request):
    ref = pinq_program(Queryable(DF, 10.0, noise_seed=7))
    got = pinq_program(Queryable(_data(backend, request), 10.0, noise_seed=7, **_kw(backend)))
    assert got == pytest.approx(ref)
    assert got["flat_cost"] == 2 and got["group_cost"] == 2 and got["take_cost"] == 2
    assert got["join_cost"] == 8  # 2·bound on each side (PINQ's bounded join)
    assert got["left"] == pytest.approx(10.0 - 0.5 * 4 - 0.25 * 2 - 0.5 - 1.0 - 0.25 - 0.5)


def proper_program(p: ProPerTable) -> dict:
    """Personal budgets: overlapping queries until some sources are exhausted."""
    out: dict = {}
    teachers = p.where(lambda r: r["role"] == "T")
    out.update({f"t{i}": teachers.noisy_count(0.25) for i in range(4)})  # sources drop out
    doubled = p.where(lambda r: r["age"] > 40).select_many(2, lambda r: [r["age"], r["age"]])
    out["d"] = doubled.noisy_count(0.5)  # each source pays 2 × 0.5
    out["both"] = p.concat(p).noisy_count(0.1)  # x ⊎ x: every source pays 0.2
    out.update({f"left{i}": float(x) for i, x in enumerate(p._ledger.remaining(DF["id"]))})
    return out


def test_proper_same_drops_and_budgets_on_every_backend(backend, request):
    ref = proper_program(ProPerTable(DF, "budget", id_column="id", noise_seed=11))
    got = proper_program(ProPerTable(_data(backend, request), "budget", id_column="id",
                                     noise_seed=11, **_kw(backend)))
    assert got == pytest.approx(ref)
    # hand-computed Fig. 3 outcome: T sources 10 (1.0), 12 (0.5), 14 (0.25), 17 (0.75)
    assert [got[f"left{i}"] for i in range(8)] == pytest.approx([0, 0.8, 0, 0.8, 0, 0.8, 0, 0])


def test_refused_code_charges_nothing_and_says_the_same_on_neighbours(request):
    neighbour = pd.concat([DF, pd.DataFrame({"id": [99], "age": [99], "role": ["X"],
                                             "budget": [1.0]})], ignore_index=True)
    for backend in ENGINES:
        outcomes = []
        for df in (DF, neighbour):
            q = Queryable(_data(backend, request, df), 1.0, **_kw(backend))
            p = ProPerTable(_data(backend, request, df), 1.0, id_column="id", **_kw(backend))
            msgs = []
            for attack in (lambda r: r["age"] > r["age"].max(), lambda r: r["age"].mean() > 3,
                           lambda r: [r["age"].sum()]):
                for call in (q.where, lambda f, q=q: q.select_many(1, f), p.where,
                             lambda f, q=q: q.noisy_sum(0.5, f, 0, 1)):
                    with pytest.raises(ValidationError) as info:
                        call(attack)
                    msgs.append(str(info.value))
            outcomes.append((msgs, q.remaining_budget(), list(p._ledger.remaining(df["id"]))[:8]))
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][1] == 1.0 and outcomes[0][2] == [1.0] * 8


def test_durable_budget_table_continues_across_reopenings(tmp_path, request):
    for backend in ENGINES:
        db = tmp_path / f"{backend}.duckdb"
        for _ in range(3):  # a new process would do the same: reopen, query, continue
            p = ProPerTable(_data(backend, request), 1.0, id_column="id", ledger=str(db),
                            **_kw(backend))
            p.where(lambda r: r["role"] == "H").noisy_count(0.3)
        left = BudgetTable(db).remaining(DF["id"].tolist())
        expect = [1.0 if r != "H" else 0.1 for r in DF["role"]]
        assert list(left) == pytest.approx(expect), backend
