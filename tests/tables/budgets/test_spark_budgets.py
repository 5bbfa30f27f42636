"""SparkBudgetTable: ProPer's budgets held in the cluster (a versioned Parquet table charged by
Spark). Fig. 3's Query rule against the Python reference, element costs against the DuckDB
store, refused queries, the driver out of the data path, the same plan whoever can pay,
durability in a new store object and process, garbage collection, SIGKILL at random points."""

from __future__ import annotations

import os
import re
from pathlib import Path

import ibis
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ibis import _

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables import ProPerTable
from dprivacy.tables.budgets.engine_budgets import proper_budgets
from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
from dprivacy.tables.relations.engine import relation_from
from dprivacy.tables.relations.protocol import ElementCosts
from tests.tables.budgets.test_budget_table import _reference

ROOT = str(Path(__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": ROOT}


def _people(spark, store, budgets, mult=None, ids=None):
    n = len(budgets)
    ids = np.arange(n) if ids is None else np.asarray(ids)
    df = pd.DataFrame({"id": ids, "k": np.arange(n), "m": np.ones(n, int) if mult is None else mult,
                       "b": budgets})
    rel = relation_from(spark.createDataFrame(df), "spark", id_column="id")
    return store.attach(rel, "b", id_column="id")


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budgets=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.3, 1.0]), min_size=1, max_size=6),
       data=st.data(), sparse_ids=st.booleans())
def test_pay_matches_the_reference_rule(spark, tmp_path_factory, budgets, data, sparse_ids):
    n = len(budgets)
    mult = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    path = tmp_path_factory.mktemp("sref") / "store"
    ids = (np.random.default_rng(n).permutation(n) * 7 + 3) if sparse_ids else np.arange(n)
    rel, table = _people(spark, SparkBudgetTable(path), budgets, mult, ids)
    queries, answers = [], []
    for _q in range(data.draw(st.integers(1, 3))):
        eps = data.draw(st.sampled_from([0.05, 0.1, 0.25]))
        lo = data.draw(st.integers(0, n - 1))
        flat = data.draw(st.booleans())
        sub = rel.where(lambda t, lo=lo: t.k >= lo)
        if flat:  # m copies of each record: its source pays m·eps
            sub = sub.select_many(3, lambda t: ibis.array([t.id, t.id, t.id])[: t.m], None)
            copies = dict(enumerate(mult))
        else:
            copies = dict.fromkeys(range(n), 1)
        queries.append((eps, range(lo, n), copies))
        eligible = table.pay(sub, eps)
        known = eligible.count()
        eligible.known_count = None  # and counted again by Spark over the semi-join
        assert eligible.count() == known
        answers.append(known)
    ref_answers, ref_left, ref_payers = _reference(budgets, queries)
    assert answers == ref_answers
    assert list(table.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    again = SparkBudgetTable(path, session=spark)  # a new handle reads the committed version
    assert list(again.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    assert [q[2] for q in again.queries()] == ref_payers


def test_element_costs_charge_like_the_duckdb_store(spark, tmp_path):
    n = 9
    df = pd.DataFrame({"id": np.arange(n), "g": ["a", "b", "c"] * 3, "b": np.linspace(0.2, 1, n)})
    costs = ElementCosts(("value",), pd.DataFrame({"value": ["a", "b"], "cost": [0.3, 0.15]}))
    srel, sb = SparkBudgetTable(tmp_path / "s").attach(
        relation_from(spark.createDataFrame(df), "spark", id_column="id"), "b", id_column="id")
    drel, db = proper_budgets(relation_from(df, "duckdb", id_column="id"), "b", id_column="id")
    for _q in range(3):  # records of "c" cost nothing, so their sources are never asked
        s = sb.pay(srel.select_many(2, lambda t: ibis.array([t.g, t.g]), None), 1.0, costs)
        d = db.pay(drel.select_many(2, lambda t: ibis.array([t.g, t.g]), None), 1.0, costs)
        assert s.known_count is None
        assert s.count() == d.count()
        assert list(sb.remaining(range(n))) == pytest.approx(list(db.remaining(range(n))))
    assert list(sb.remaining(range(n)))[:3] == pytest.approx([0.2 - 0, 0.3 - 0.3, 0.4])


def test_refused_queries_charge_nothing(spark, tmp_path):
    rel, table = _people(spark, SparkBudgetTable(tmp_path / "r"), [0.1, 0.1, 0.5])
    assert table.pay(rel, 0.3).count() == 1  # only the third covers 0.3
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    assert table.pay(rel.where(_.k < 2), 0.3).count() == 0  # nobody covers it
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    assert [q[2:] for q in table.queries()] == [(1, pytest.approx(0.3)), (0, 0.0)]
    # no protected record at all, only a public (⊥) one: nothing charged, the ⊥ record counted
    pub = rel.public(pd.DataFrame({"id": [50], "k": [9], "m": [1], "b": [0.0]}))
    assert table.pay(rel.where(_.k > 99).concat(pub), 0.3).count() == 1
    assert table.pay(rel.where(_.k > 99), 0.3).count() == 0
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    with pytest.raises(UnknownRecordError):
        table.remaining([7])
    # bad input is refused before any charge: no new version, no query logged
    p = ProPerTable(spark.createDataFrame(pd.DataFrame({"id": [0, 1, 2], "k": [0, 1, 2]})),
                    budget=1.0, ledger=table, id_column="id")
    versions = table.log.numbers()
    for bad in (lambda: p.noisy_count(-1.0), lambda: p.where(_.nope > 1).noisy_count(0.1),
                lambda: p.where(_.k + "x").noisy_count(0.1)):
        with pytest.raises(ValidationError):
            bad()
    assert table.log.numbers() == versions and len(table.queries()) == 4


def test_proper_table_on_spark_keeps_budgets_in_the_store(spark, tmp_path):
    df = pd.DataFrame({"pid": np.arange(6) * 10, "role": list("TMTMTM")})
    store = SparkBudgetTable(tmp_path / "p")
    p = ProPerTable(spark.createDataFrame(df), budget=1.0, ledger=store, id_column="pid")
    p.where(_.role == "T").noisy_count(0.4)
    q = p.where(_.role == "M").as_pinq(0.25)
    q.noisy_count(0.1)
    q.noisy_count(0.1)  # the PINQ table reads its version's payers again
    assert list(store.remaining(df["pid"])) == pytest.approx([0.6, 0.75] * 3)
    # a second table over the same people re-attaches: known ids keep their budgets
    ProPerTable(spark.createDataFrame(df), budget=5.0, ledger=store, id_column="pid")
    assert list(store.remaining(df["pid"])) == pytest.approx([0.6, 0.75] * 3)
    with pytest.raises(ValidationError, match="id_column"):
        ProPerTable(spark.createDataFrame(df), budget=1.0, ledger=store)
    dup = pd.DataFrame({"pid": [1, 1, 2], "role": list("TMT")})
    with pytest.raises(ValidationError, match="distinct"):
        ProPerTable(spark.createDataFrame(dup), budget=1.0, ledger=store, id_column="pid")
    with pytest.raises(UnknownRecordError):  # nothing of the refused table was registered
        store.remaining([1])


def test_the_driver_never_collects_during_a_charge(spark, tmp_path, monkeypatch):
    """pay() and the count of the eligible records run without bringing any row to the driver:
    every DataFrame action that returns rows fails while they run."""
    from pyspark.sql import DataFrame

    rel, table = _people(spark, SparkBudgetTable(tmp_path / "d"), [1.0] * 5)

    def refuse(*a, **k):
        raise AssertionError("rows were collected to the driver")

    for name in ("collect", "toPandas", "toArrow", "take", "first", "head", "toLocalIterator",
                 "tail"):
        monkeypatch.setattr(DataFrame, name, refuse)
    assert table.pay(rel.where(_.k >= 2), 0.5).count() == 3
    monkeypatch.undo()
    assert list(table.remaining(range(5))) == pytest.approx([1, 1, 0.5, 0.5, 0.5])


def test_the_same_plan_runs_whoever_can_pay(spark, tmp_path, monkeypatch):
    """The version written by a query everybody pays and by one nobody can has the same plan."""
    plans = {}
    for label, budget in (("rich", 10.0), ("exhausted", 0.0)):
        rel, table = _people(spark, SparkBudgetTable(tmp_path / label), [budget] * 6)
        seen: list[str] = []
        orig = table._write
        monkeypatch.setattr(table, "_write", lambda k, frame, seen=seen, orig=orig: seen.append(
            frame._jdf.queryExecution().optimizedPlan().toString()) or orig(k, frame))
        table.pay(rel.where(_.k > 2), 0.5).count()
        table.pay(rel.select_many(2, lambda t: ibis.array([t.k, t.k]), None), 0.5).count()
        # fresh names: expression ids, observation names and plan ids, paths, views
        plans[label] = [re.sub(r"#\d+L?|[0-9a-f]{8}-[0-9a-f-]{27}|file:\S+|__dp_\w+_\d+|\], \d+\n|ibis_\w+",
                               "X", s) for s in seen]
    assert plans["rich"] == plans["exhausted"] and len(plans["rich"]) == 2


def test_old_versions_and_dead_writers_directories_are_collected(spark, tmp_path):
    root = tmp_path / "g"
    rel, table = _people(spark, SparkBudgetTable(root, keep_versions=2), [1.0] * 3)
    (root / "v99-deadwriter").mkdir()  # as if a writer died before publishing
    for _q in range(4):
        table.pay(rel, 0.1)
    dirs = sorted(p.name for p in root.iterdir() if p.name.startswith("v"))
    assert len(dirs) == 2 and "v99-deadwriter" not in dirs
    assert {table.log.read(k)["data"] for k in table.log.numbers()[-2:]} == set(dirs)
    assert list(table.remaining(range(3))) == pytest.approx([0.6] * 3)
    assert table.storage_bytes() > 0


def test_a_kill_between_write_and_commit_leaves_the_budgets_uncharged(spark, tmp_path,
                                                                      monkeypatch):
    root = tmp_path / "c"
    rel, table = _people(spark, SparkBudgetTable(root), [1.0] * 4)
    table.pay(rel, 0.25)

    def die(k, meta):
        raise KeyboardInterrupt  # the process stops after writing, before the commit

    monkeypatch.setattr(table.log, "publish", die)
    with pytest.raises(KeyboardInterrupt):
        table.pay(rel.where(_.k < 2), 0.5)
    monkeypatch.undo()
    again = SparkBudgetTable(root)
    assert list(again.remaining(range(4))) == pytest.approx([0.75] * 4)
    assert [q[0] for q in again.queries()] == [1]
    assert again.pay(rel.where(_.k < 2), 0.5).count() == 2  # the next charge is query 2
    assert [q[0] for q in again.queries()] == [1, 2]
