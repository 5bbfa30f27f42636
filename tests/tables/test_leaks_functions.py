"""Leak class: analyst functions that see more than one record, and select_many relabelling.

Attacker programs written the old way (a function of the whole frame) must not make every row
depend on the target: neighbouring tables give answers within the program's stability, the same
budget and the same (absence of) error. ProPer outputs always carry their parent's id, so a
flat-map cannot make a record with budget 0 be released at someone else's expense.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.tables.leak_harness import assert_indistinguishable, neighbours, pinq_pair, proper_pair

EPS = 0.5

WHOLE_FRAME_PROGRAMS = {
    # program -> its sensitivity on neighbouring tables (stability x the aggregation's range)
    "where any(name == target)": (
        lambda t: t.where(lambda d: (d["name"] == "target").any()).noisy_count(EPS), 1),
    "where sum(age) > threshold": (
        lambda t: t.where(lambda d: d["age"].sum() > 480).noisy_count(EPS), 1),
    "where isin over the frame": (
        lambda t: t.where(lambda d: d["name"].isin(["target"]).any()).noisy_count(EPS), 1),
    "where via len(frame)": (
        lambda t: t.where(lambda d: len(d) > 12).noisy_count(EPS), 1),
    "where via shape": (
        lambda t: t.where(lambda d: d.shape[0] > 12).noisy_count(EPS), 1),
    "select the target indicator": (
        lambda t: t.select(lambda d: float((d["name"] == "target").any()))
        .noisy_sum(EPS, "value", 0, 1), 1),
    "select broadcast of a frame statistic": (
        lambda t: t.select(v=lambda d: d["age"].max()).noisy_sum(EPS, "v", 0, 100), 100),
    "value function of the frame": (
        lambda t: t.noisy_sum(EPS, lambda d: d["x"] * (d["name"] == "target").any(), -1, 1), 1),
    "group_by key of the frame": (
        lambda t: t.group_by(lambda d: (d["name"] == "target").any()).noisy_count(EPS), 2),
    "partition by a frame statistic": (
        lambda t: t.partition([True, False],
                              lambda d: np.repeat((d["name"] == "target").any(), len(d)))[True]
        .noisy_count(EPS), 1),
    "select_many of the frame": (
        lambda t: t.select_many(3, lambda d: d[d["name"] == "target"].index.tolist())
        .noisy_count(EPS), 3),
    "exponential mechanism with frame scores": (
        lambda t: t.exponential_mechanism(
            EPS, [0, 1], lambda d, c=None: np.full((len(d), 2), (d["name"] == "target").any())),
        None),
}


@pytest.mark.parametrize("name", list(WHOLE_FRAME_PROGRAMS))
def test_whole_frame_functions_cannot_make_rows_depend_on_the_target(name):
    program, sensitivity = WHOLE_FRAME_PROGRAMS[name]
    a, b = pinq_pair(program)
    assert_indistinguishable(a, b, sensitivity=sensitivity)
    assert a.error is None  # made total, not refused after the fact


def test_the_record_gives_no_way_to_the_other_records():
    """What a per-record function receives: one record's values, read-only."""
    seen, refused = [], []

    def probe(r):
        seen.append((type(r).__name__, sorted(r), dict(r)))
        r2 = r  # a fresh object per record: replacing its values changes nothing else
        setattr(r2, "_v", ())  # noqa: B010
        for attempt in (lambda: r.__setitem__("age", 0), lambda: r._p.__setitem__("age", 1)):
            try:
                attempt()
                refused.append(False)
            except (TypeError, AttributeError):
                refused.append(True)
        return True

    _, df = neighbours()
    from dprivacy.tables import Queryable

    t = Queryable(df, budget=1.0)
    kept = t.where(probe)
    assert seen == []  # lazy: nothing runs before a charged query reads the records
    kept.noisy_count(0.5)
    assert len(seen) == len(df) and len(refused) == 2 * len(df) and all(refused)
    pd.testing.assert_frame_equal(t._df, df)
    assert all(len(s[2]) == len(df.columns) for s in seen)
    assert [s[2]["pid"] for s in seen] == list(df["pid"])  # one record each, in order


def test_mutating_a_value_does_not_change_the_data():
    from dprivacy.tables import Queryable

    df = pd.DataFrame({"tags": [["a"], ["b"]]})
    t = Queryable(df, budget=10.0, noise_seed=0)
    t.where(lambda r: r["tags"].append("leak") or True).noisy_count(1.0)  # mutates a copy
    assert list(df["tags"]) == [["a"], ["b"]] and list(t._df["tags"]) == [["a"], ["b"]]


RELABEL_PROGRAMS = {
    "frame with the target's index label (old API)": lambda p: p.select_many(
        1, lambda d: d.loc[d["name"] == "target"].set_axis([0])).noisy_count(EPS),
    "list of dicts naming another pid": lambda p: p.select_many(
        2, lambda r: [{"pid": 0, "value": r["age"]}, {"index": 0}]).noisy_count(EPS),
    "a pandas Series indexed by other labels": lambda p: p.select_many(
        2, lambda r: pd.Series([r["age"]] * 2, index=[0, 1])).noisy_count(EPS),
    "outputs that look like another person": lambda p: p.select_many(
        2, lambda r: [("p0", 5)] * 2, columns=["name", "age"]).noisy_sum(EPS, "age", 0, 100),
    "select a pid column, then flat-map": lambda p: p.select(pid=lambda r: 0, a=lambda r: r["age"])
    .select_many(3, lambda r: [r["a"]] * 3).noisy_sum(EPS, "value", 0, 100),
    "per-record duplication": lambda p: p.select_many(
        3, lambda r: [r["age"]] * 3).noisy_sum(EPS, "value", 0, 100),
}


@pytest.mark.parametrize("name", list(RELABEL_PROGRAMS))
def test_select_many_cannot_relabel_a_broke_target_onto_payers(name):
    """The target has budget 0: whatever the flat-map returns, its outputs keep the target's id,
    so they are left out; the answers (same noise) and everybody else's budgets are identical."""
    a, b = proper_pair(RELABEL_PROGRAMS[name], target_budget=0.0)
    assert_indistinguishable(a, b, sensitivity=0.0)


def test_select_many_outputs_carry_the_parents_id():
    _, df = neighbours()
    from dprivacy.tables import ProPerTable

    p = ProPerTable(df, budget=1.0, id_column="pid")
    q = p.select_many(3, lambda r: [{"pid": 0}] * (3 if r["name"] == "target" else 1),
                      columns=["pid"])
    assert list(q._prov) == list(df["pid"][:-1]) + [99, 99, 99]
    q.noisy_count(0.1)
    assert p._ledger.remaining([99])[0] == pytest.approx(0.7)  # 3 outputs: 3 x 0.1
    assert p._ledger.remaining([0])[0] == pytest.approx(0.9)
