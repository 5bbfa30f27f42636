"""SparkSlotBudgets: ProPer's budgets beside the rows of a Parquet source, charged in the scan
of each query. Fig. 3's Query rule against the Python reference (with folds in between),
element costs against the DuckDB store, refused queries and ⊥ records, registration checks,
changed files, durability in a new store object, a kill before the commit, SIGKILL at random
points (folds in the background included), for both Spark stores."""

from __future__ import annotations

import os
import subprocess
import sys
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
from dprivacy.tables.budgets.ledger import scalar_units
from dprivacy.tables.budgets.spark_slots import SparkSlotBudgets
from dprivacy.tables.relations.engine import relation_from
from dprivacy.tables.relations.protocol import ElementCosts
from tests.sigkill import run_with_random_kills
from tests.tables.budgets.test_budget_table import _reference

ROOT = str(Path(__file__).resolve().parents[3])
ENV = {**os.environ, "PYTHONPATH": ROOT}


def _write(spark, df: pd.DataFrame, path: Path, files: int = 3) -> str:
    spark.createDataFrame(df).repartition(files).write.parquet(str(path))
    return str(path)


def _people(spark, tmp: Path, store, budgets, mult=None, ids=None, files: int = 3):
    n = len(budgets)
    ids = np.arange(n) if ids is None else np.asarray(ids)
    df = pd.DataFrame({"id": ids, "k": np.arange(n), "m": np.ones(n, int) if mult is None else mult,
                       "b": budgets})
    sdf = spark.read.parquet(_write(spark, df, tmp / "data", files))
    return store.attach(relation_from(sdf, "spark", id_column="id"), "b", id_column="id",
                        source=sdf)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budgets=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.3, 1.0]), min_size=1, max_size=7),
       data=st.data(), sparse_ids=st.booleans(), fold_every=st.sampled_from([1, 2, 8]))
def test_pay_matches_the_reference_rule(spark, tmp_path_factory, budgets, data, sparse_ids,
                                        fold_every):
    n = len(budgets)
    mult = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    tmp = tmp_path_factory.mktemp("slots")
    ids = (np.random.default_rng(n).permutation(n) * 7 + 3) if sparse_ids else np.arange(n)
    store = SparkSlotBudgets(tmp / "store", fold_every=fold_every, background=False)
    rel, table = _people(spark, tmp, store, budgets, mult, ids)
    queries, answers = [], []
    for _q in range(data.draw(st.integers(1, 4))):
        eps = data.draw(st.sampled_from([0.05, 0.1, 0.25]))
        lo = data.draw(st.integers(0, n - 1))
        flat = data.draw(st.booleans())
        sub = rel.where(lambda t, lo=lo: t.k >= lo)
        if flat:  # m copies of each record: its source pays m·eps
            sub = sub.select_many(3, lambda t: ibis.array([t.id, t.id, t.id])[: t.m], None)
            copies = dict(enumerate(mult))
        else:
            copies = dict.fromkeys(range(n), 1)
        queries.append((eps, [i for i in range(n) if i >= lo], copies))
        eligible = table.pay(sub, eps)
        known = eligible.count()
        eligible.known_count = None  # and counted again by Spark over the payers' slots
        assert eligible.count() == known
        answers.append(known)
    ref_answers, ref_left, ref_payers = _reference(budgets, queries)
    assert answers == ref_answers
    assert list(table.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    again = SparkSlotBudgets(tmp / "store", session=spark)  # a new handle reads the commits
    assert list(again.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)
    assert [q[2] for q in again.queries()] == ref_payers
    assert again.fold() or not again.log.latest()[1]["debits"]
    assert list(again.remaining(ids)) == pytest.approx(ref_left, abs=1e-9)  # folded: the same
    assert again.log.latest()[1]["debits"] == []


def test_element_costs_charge_like_the_duckdb_store(spark, tmp_path):
    n = 9
    df = pd.DataFrame({"id": np.arange(n), "g": ["a", "b", "c"] * 3, "b": np.linspace(0.2, 1, n)})
    costs = ElementCosts(("value",), pd.DataFrame({"value": ["a", "b"], "cost": [0.3, 0.15]}))
    sdf = spark.read.parquet(_write(spark, df, tmp_path / "data"))
    srel, sb = SparkSlotBudgets(tmp_path / "s", fold_every=2, background=False).attach(
        relation_from(sdf, "spark", id_column="id"), "b", id_column="id", source=sdf)
    drel, db = proper_budgets(relation_from(df, "duckdb", id_column="id"), "b", id_column="id")
    for _q in range(3):  # records of "c" cost nothing, so their sources are never asked
        s = sb.pay(srel.select_many(2, lambda t: ibis.array([t.g, t.g]), None), 1.0, costs)
        d = db.pay(drel.select_many(2, lambda t: ibis.array([t.g, t.g]), None), 1.0, costs)
        assert s.known_count is None
        assert s.count() == d.count()
        assert list(sb.remaining(range(n))) == pytest.approx(list(db.remaining(range(n))))
    assert list(sb.remaining(range(n)))[:3] == pytest.approx([0.2 - 0, 0.3 - 0.3, 0.4])


def test_refused_queries_charge_nothing_and_bottom_records_count(spark, tmp_path):
    rel, table = _people(spark, tmp_path, SparkSlotBudgets(tmp_path / "r"), [0.1, 0.1, 0.5])
    assert table.pay(rel, 0.3).count() == 1  # only the third covers 0.3
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    assert table.pay(rel.where(_.k < 2), 0.3).count() == 0  # nobody covers it
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    assert [q[2:] for q in table.queries()] == [(1, pytest.approx(0.3)), (0, 0.0)]
    pub = rel.public(pd.DataFrame({"id": [50], "k": [9], "m": [1], "b": [0.0]}))
    assert table.pay(rel.where(_.k > 99).concat(pub), 0.3).count() == 1  # the ⊥ record
    assert table.pay(rel.where(_.k > 99), 0.3).count() == 0
    assert list(table.remaining([0, 1, 2])) == pytest.approx([0.1, 0.1, 0.2])
    with pytest.raises(UnknownRecordError):
        table.remaining([7])


def test_proper_table_registration_checks_and_reattach(spark, tmp_path):
    df = pd.DataFrame({"pid": np.arange(6) * 10, "role": list("TMTMTM")})
    data = _write(spark, df, tmp_path / "data", files=2)
    store = SparkSlotBudgets(tmp_path / "p")
    p = ProPerTable(spark.read.parquet(data), budget=1.0, ledger=store, id_column="pid")
    p.where(_.role == "T").noisy_count(0.4)
    q = p.where(_.role == "M").as_pinq(0.25)
    q.noisy_count(0.1)
    q.noisy_count(0.1)  # the PINQ table reads its query's payers again
    assert list(store.remaining(df["pid"])) == pytest.approx([0.6, 0.75] * 3)
    # the same files again: their people keep their budgets
    ProPerTable(spark.read.parquet(data), budget=5.0, ledger=store, id_column="pid")
    assert list(store.remaining(df["pid"])) == pytest.approx([0.6, 0.75] * 3)
    other = _write(spark, df, tmp_path / "other")
    with pytest.raises(ValidationError, match="other files"):
        ProPerTable(spark.read.parquet(other), budget=1.0, ledger=store, id_column="pid")
    with pytest.raises(ValidationError, match="Parquet"):  # not a file source
        ProPerTable(spark.createDataFrame(df), budget=1.0,
                    ledger=SparkSlotBudgets(tmp_path / "mem"), id_column="pid")
    dup = _write(spark, pd.DataFrame({"pid": [1, 1, 2], "role": list("TMT")}), tmp_path / "dup")
    fresh = SparkSlotBudgets(tmp_path / "dupstore")
    with pytest.raises(ValidationError, match="distinct"):
        ProPerTable(spark.read.parquet(dup), budget=1.0, ledger=fresh, id_column="pid")
    assert fresh.log.numbers() == []  # nothing registered
    neg = _write(spark, pd.DataFrame({"pid": [3, -1], "role": list("TM")}), tmp_path / "neg")
    with pytest.raises(ValidationError, match="distinct"):
        ProPerTable(spark.read.parquet(neg), budget=1.0, ledger=fresh, id_column="pid")


def test_changed_files_are_refused_before_any_charge(spark, tmp_path):
    rel, table = _people(spark, tmp_path, SparkSlotBudgets(tmp_path / "c"), [1.0] * 4, files=1)
    assert table.pay(rel, 0.25).count() == 4
    f = next((tmp_path / "data").glob("*.parquet"))
    os.utime(f, ns=(os.stat(f).st_atime_ns, os.stat(f).st_mtime_ns + 10**9))
    n = len(table.log.numbers())
    with pytest.raises(ValidationError, match="changed"):
        table.pay(rel, 0.25)
    assert len(table.log.numbers()) == n


def test_storage_stays_small_and_old_files_are_collected(spark, tmp_path):
    root = tmp_path / "g"
    store = SparkSlotBudgets(root, keep_versions=2, fold_every=3, background=False)
    rel, table = _people(spark, tmp_path, store, [1.0] * 50)
    (root / "q-deadwriter").mkdir()  # as if a writer died before publishing
    for _q in range(7):
        table.pay(rel.where(_.k % 2 == 0), 0.1)
    assert table.log.latest()[1]["debits"] and len(table.log.latest()[1]["debits"]) == 1
    assert not (root / "q-deadwriter").exists()
    live = {d for k in table.log.numbers()[-2:] for d in table.log.read(k)["dirs"]}
    assert {p.name for p in root.iterdir() if p.name[:2] in ("b-", "r-", "q-")} <= live
    assert list(table.remaining(range(4))) == pytest.approx([0.3, 1.0, 0.3, 1.0])
    assert table.storage_bytes() > 0


def test_a_background_fold_and_queries_interleave(spark, tmp_path):
    store = SparkSlotBudgets(tmp_path / "bg", fold_every=1)
    rel, table = _people(spark, tmp_path, store, [1.0] * 20)
    for _q in range(6):
        table.pay(rel.where(_.k < 10), 0.1)
    store.wait_for_fold()
    assert store.fold_error is None
    assert list(store.remaining(range(20))) == pytest.approx([0.4] * 10 + [1.0] * 10)
    assert store.fold() or not store.log.latest()[1]["debits"]
    assert store.log.latest()[1]["debits"] == []
    assert list(store.remaining(range(20))) == pytest.approx([0.4] * 10 + [1.0] * 10)


def test_a_kill_between_write_and_commit_leaves_the_budgets_uncharged(spark, tmp_path,
                                                                      monkeypatch):
    root = tmp_path / "k"
    rel, table = _people(spark, tmp_path, SparkSlotBudgets(root), [1.0] * 4)
    table.pay(rel, 0.25)

    def die(k, meta):
        raise KeyboardInterrupt  # the process stops after writing, before the commit

    monkeypatch.setattr(table.log, "publish", die)
    with pytest.raises(KeyboardInterrupt):
        table.pay(rel.where(_.k < 2), 0.5)
    monkeypatch.undo()
    again = SparkSlotBudgets(root)
    assert list(again.remaining(range(4))) == pytest.approx([0.75] * 4)
    assert [q[0] for q in again.queries()] == [1]
    assert again.pay(rel.where(_.k < 2), 0.5).count() == 2  # the next charge is query 2
    assert [q[0] for q in again.queries()] == [1, 2]


def test_a_python_worker_killed_in_a_charge_charges_nothing(spark, tmp_path, monkeypatch):
    """SIGKILL of the Python worker running a charge task: the job fails, nothing is
    committed, and the next charge pays everybody once."""
    from dprivacy.tables.budgets import spark_slots

    rel, table = _people(spark, tmp_path, SparkSlotBudgets(tmp_path / "w"), [1.0] * 6)
    table.pay(rel, 0.25)
    marker = str(tmp_path / "killed-once")

    def killing(real):
        def task(ctx):
            run = real(ctx)

            def body(batches):
                import signal

                if not os.path.exists(marker):
                    open(marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
                yield from run(batches)

            return body

        return task

    for name in ("_charge_task", "_charge_words_task"):  # whichever the charge runs
        monkeypatch.setattr(spark_slots, name, killing(getattr(spark_slots, name)))
    versions = table.log.numbers()
    with pytest.raises(Exception, match="(?i)python|worker|crash|exit"):
        table.pay(rel.where(_.k < 3), 0.5)
    assert os.path.exists(marker) and table.log.numbers() == versions
    assert list(table.remaining(range(6))) == pytest.approx([0.75] * 6)
    assert table.pay(rel.where(_.k < 3), 0.5).count() == 3  # the marker exists: no more kills
    assert list(table.remaining(range(6))) == pytest.approx([0.25] * 3 + [0.75] * 3)
    assert [q[2] for q in table.queries()] == [6, 3]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["slots", "table"])
def test_sigkill_at_random_points_never_releases_an_uncharged_answer(spark, tmp_path, kind):
    """Fresh worker interpreters charge 12 queries, the first two SIGKILLed at random moments
    (the slot store folds every 2 queries in the background meanwhile): every released answer
    was committed to its payers, no debit is lost or doubled, the query numbers have no gap.
    Both Spark stores (``table``: SparkBudgetTable) run the same worker."""
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable

    store, out, data = tmp_path / "k", tmp_path / "released.txt", tmp_path / "data"
    _write(spark, pd.DataFrame({"id": np.arange(12), "g": np.arange(12) % 3}), data)
    n = 12  # each group asked 4 times: the kills land while a worker runs, on an idle machine too

    def spawn(done: int) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tables.budgets.spark_kill_worker", kind, str(store),
             str(data), str(out), str(done), str(n)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
            text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    kills = run_with_random_kills(spawn, out, n, kills_wanted=2, max_wait=3.0, seed=1,
                                  max_kills=20, final_timeout=600)
    released = [line.split() for line in out.read_text().splitlines()]
    assert [r[1] for r in released] == [f"q{i}" for i in range(n)] and kills == 2
    table = (SparkSlotBudgets(store, session=spark) if kind == "slots"
             else SparkBudgetTable(store, session=spark))
    logged = {q: (label, payers) for q, label, payers, _ in table.queries()}
    ids = list(range(12))
    init, left = table.initial(ids), table.remaining(ids)
    for qid, label, answer in released:  # every released answer was charged, to its payers
        assert logged[int(qid)] == (label, int(answer))
    assert all(0 <= a <= b for a, b in zip(left, init, strict=True))
    # each source is asked >= 4 times and can pay every time (0.07 x 12 <= 1): every committed
    # debit is in the budgets, none is lost or doubled
    units = scalar_units(0.07)
    spent = np.round((init - left) * 1e9).astype(np.int64)
    assert sum(p for _, p in logged.values()) * units == spent.sum()
    assert all(s % units == 0 and s >= 4 * units for s in spent)
    assert sorted(logged) == list(range(1, len(logged) + 1))


@pytest.mark.parametrize(("costs", "kinds"), [((7,), ["uint8", "plain"]),
                                              ((3, 5), ["uint8", "uint16", "plain"]),
                                              (tuple(range(1, 400)), ["uint8", "uint16", "plain"])])
def test_compact_budgets_debit_like_plain_integers(tmp_path, costs, kinds):
    """The codes (one or two bytes) a worker keeps per range: debits, checks and a write and read
    back give the plain integers' results, while the values fit a byte, two bytes (uint16), and
    beyond 2^16 of them or after a debit of single payers (plain int64)."""
    from dprivacy.tables.budgets.spark_slots import _Rem

    rng = np.random.default_rng(len(costs))
    n = 5000
    plain = rng.choice([10**6, 5 * 10**5], n).astype(np.int64)
    rem = _Rem.of(plain)
    seen: list[str] = []
    for step in range(60):
        cost = int(costs[step % len(costs)])
        a, z = sorted(rng.integers(0, n, 2).tolist())
        paid = (rng.random(z - a) < 0.5) & (plain[a:z] >= cost)
        if step == 55:  # a debit of single payers
            pos = np.flatnonzero(paid) + a
            rem.debit_points(pos, cost)
            plain[pos] -= cost
        else:
            rem.debit_range(a, z, paid, cost)
            plain[a:z] -= paid * cost
        kind = "plain" if rem.values is None else rem.codes.dtype.name
        if not seen or seen[-1] != kind:
            seen.append(kind)
        assert (rem.full() == plain).all()
        assert (rem.can_pay(a, z, cost) == (plain[a:z] >= cost)).all()
    assert seen == kinds
    rem.write(str(tmp_path / "r.parquet"))
    assert (_Rem.read(str(tmp_path / "r.parquet")).full() == plain).all()
    small = _Rem.of(np.array([5, 9, 9, 5], np.int64))
    small.debit_range(0, 4, np.array([True, True, True, True]), 5)  # 5 -> 0, 9 -> 4: 5 and 9 gone
    small.write(str(tmp_path / "s.parquet"))
    back = _Rem.read(str(tmp_path / "s.parquet"))
    assert list(back.full()) == [0, 4, 4, 0] and sorted(back.values.tolist()) == [0, 4]


def test_compact_budgets_start_plain_beyond_two_bytes():
    from dprivacy.tables.budgets.spark_slots import _Rem

    plain = np.arange(70000, dtype=np.int64) * 3 + 10**6  # 70 000 distinct values
    rem = _Rem.of(plain)
    assert rem.values is None and (rem.full() == plain).all()
    assert _Rem.of(np.repeat(np.arange(300, dtype=np.int64), 3)).codes.dtype == np.uint16


@pytest.mark.parametrize("spread", [3, 1000])
def test_one_budget_for_everybody_registers_without_writing_per_person(spark, tmp_path, spread):
    """With one budget for everybody and ids no sparser than 64 per person, the registration
    writes no file per person (the base ranges are the files' rows); sparser ids register row
    by row. Both charge, fold and read back alike."""
    n = 40
    ids = np.arange(n) * spread + 5
    data = _write(spark, pd.DataFrame({"pid": ids, "k": np.arange(n)}), tmp_path / "data", files=2)
    store = SparkSlotBudgets(tmp_path / "u", fold_every=2, background=False)
    p = ProPerTable(spark.read.parquet(data), budget=0.5, ledger=store, id_column="pid")
    lazy = all(b["ids"] is None for b in store.log.latest()[1]["base"])
    assert lazy == (spread == 3)
    sizes = [store.storage_bytes()]
    for _q in range(3):
        p.where(_.k < 10).noisy_count(0.2)  # the third query finds them with 0.1 left
        sizes.append(store.storage_bytes())
    assert (sizes[0] == 0) == lazy
    left = store.remaining(ids)
    assert list(left) == pytest.approx([0.1] * 10 + [0.5] * 30)
    assert list(store.initial(ids)) == pytest.approx([0.5] * n)
    assert [q[2] for q in store.queries()] == [10, 10, 0]
    again = SparkSlotBudgets(tmp_path / "u", session=spark)
    assert list(again.remaining(ids[::-1])) == pytest.approx(list(left[::-1]))
    with pytest.raises(UnknownRecordError):
        again.remaining([int(ids[-1]) + 1])


@pytest.mark.parametrize("kind", ["slots", "table"])
def test_an_as_pinq_table_outlives_the_files_of_its_charge(spark, tmp_path, kind):
    """as_pinq keeps its payers in Spark: later charges (and folds) delete the files of its
    charge, and the PINQ table still reads the same people."""
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable

    df = pd.DataFrame({"pid": np.arange(8), "role": list("TMTMTMTM")})
    data = _write(spark, df, tmp_path / "data", files=2)
    store = (SparkSlotBudgets(tmp_path / "p", keep_versions=2, fold_every=1, background=False)
             if kind == "slots" else SparkBudgetTable(tmp_path / "p", keep_versions=2))
    p = ProPerTable(spark.read.parquet(data), budget=1.0, ledger=store, id_column="pid")
    before = {d.name for d in (tmp_path / "p").iterdir()}
    q = p.where(_.role == "T").as_pinq(0.5)
    mine = {d.name for d in (tmp_path / "p").iterdir() if d.name[0] != "_"} - before
    for _k in range(3):
        p.where(_.role == "M").noisy_count(0.1)
    assert mine and not mine & {d.name for d in (tmp_path / "p").iterdir()}  # its files: gone
    q._rel.known_count = None  # counted again: the payers, read from Spark's copy
    assert q._rel.count() == 4
    assert np.isfinite(q.where(_.pid < 5).noisy_count(0.1))


def test_the_owners_summary_covers_the_slot_store(spark, tmp_path):
    """``dprivacy budgets`` summarises a Spark source's slot store: how many people have how
    much of their budget left, and the queries committed."""
    from types import SimpleNamespace

    from dprivacy.cli.cmd_budgets import _spark_proper_rows

    df = pd.DataFrame({"pid": np.arange(8), "role": list("TMTMTMTM")})
    data = _write(spark, df, tmp_path / "data", files=2)
    store = SparkSlotBudgets(tmp_path / "bd" / "proper-people", fold_every=2, background=False)
    p = ProPerTable(spark.read.parquet(data), budget=1.0, ledger=store, id_column="pid")
    p.where(_.role == "T").noisy_count(0.3)
    p.where(_.pid == 0).noisy_count(1.0)  # refused: 0.7 left
    cfg = SimpleNamespace(spark=SimpleNamespace(budget_dir=tmp_path / "bd", budgets="slots"))
    rows, summary = _spark_proper_rows(cfg, SimpleNamespace(name="people"))
    people = {r["left"]: r["people"] for r in rows}
    assert people["(50%, 75%]"] == 4 and people["all (untouched)"] == 4
    assert sum(people.values()) == 8
    assert summary["people"] == 8 and summary["queries"] == 2
    assert summary["min"] == pytest.approx(0.7) and summary["spent"] == pytest.approx(1.2)
