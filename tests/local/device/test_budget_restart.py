"""Per-event budgets need a total; answered query ids survive restarts (no second charge or answer)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dprivacy.errors import ValidationError
from dprivacy.local import MatrixRandomiser, PersonalBudget, UserAgent
from dprivacy.local.case_studies import rr_matrix, warner_query
from dprivacy.tables import Ledger


def test_per_event_budget_alone_is_refused() -> None:
    with pytest.raises(ValidationError, match="per-event budget needs a total"):
        PersonalBudget(":memory:", "u", per_event=1.0)
    with pytest.raises(ValidationError, match="per-event budget needs a total"):
        PersonalBudget(":memory:", "u", per_field={"x": 1.0}, per_event=1.0)


def test_fresh_event_labels_do_not_buy_fresh_budget(tmp_path: Path) -> None:
    """The issue's attack: 400 queries, each about a new event the analyst made up."""
    total, eps = 2.0, 0.5
    a = UserAgent("u", {"v": "b"}, PersonalBudget(tmp_path / "l.sqlite", "u", total=total, per_event=1.0),
                  sandbox=None, pad=False, rng=0)
    T = MatrixRandomiser(rr_matrix(eps, 2), inputs=["a", "b"], outputs=["a", "b"])  # noqa: N806
    from dprivacy.local import Code, Query
    answered = sum(a.handle(Query(f"q{k}", T, Code.builtin("field"), fields=("v",), event=f"ev{k}"))
                   ["status"] == "ok" for k in range(400))
    assert answered == math.floor(total / eps + 1e-9) == 4
    assert a.remaining()["total"] == pytest.approx(0.0, abs=1e-9)


def _charges(path: Path) -> int:
    return Ledger(path)._db().execute("SELECT COUNT(*) FROM queries").fetchone()[0]


def test_restarted_agent_replays_and_does_not_charge_again(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    q = warner_query("w1", 1.0, "smoker", ["yes", "no"])
    first = UserAgent("u", {"smoker": "no"}, PersonalBudget(path, "u", total=3.0), sandbox=None,
                      pad=False, rng=1).handle(q)
    assert first["status"] == "ok" and _charges(path) == 1
    for seed in (2, 3):  # two restarts on the same ledger file, fresh randomness each time
        again = UserAgent("u", {"smoker": "no"}, PersonalBudget(path, "u", total=3.0), sandbox=None,
                          pad=False, rng=seed).handle(q)
        assert again == first
    assert _charges(path) == 1
    assert PersonalBudget(path, "u", total=3.0).remaining()["total"] == pytest.approx(2.0)
    # another user on the same ledger is a different query id space
    other = UserAgent("v", {"smoker": "yes"}, PersonalBudget(path, "v", total=3.0), sandbox=None,
                      pad=False, rng=1).handle(q)
    assert other["status"] == "ok" and _charges(path) == 2


def test_a_reply_lost_in_a_crash_is_never_answered_again(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    q = warner_query("w1", 1.0, "smoker", ["yes", "no"])
    b = PersonalBudget(path, "u", total=3.0)
    # the agent charged the query and stopped before storing its reply
    assert b.charge_query(q.id, q.T.cost(), fields=q.fields) == "charged"
    r = UserAgent("u", {"smoker": "no"}, PersonalBudget(path, "u", total=3.0), sandbox=None,
                  pad=False).handle(q)
    assert r["status"] == "rejected" and "already answered" in r["reason"] and r["result"] is None
    assert _charges(path) == 1 and b.charge_query(q.id, 1.0, fields=q.fields) == "answered"


_CHILD = """
import json, sys
from dprivacy.local import PersonalBudget, UserAgent
from dprivacy.local.case_studies import warner_query
agent = UserAgent("u", {"smoker": "yes"}, PersonalBudget(sys.argv[1], "u", total=2.5), sandbox=None,
                  pad=False)
print(json.dumps([agent.handle(warner_query(q, 1.0, "smoker", ["yes", "no"])) for q in sys.argv[2:]]))
"""


def test_agent_processes_restarted_on_one_ledger(tmp_path: Path) -> None:
    path = str(tmp_path / "l.sqlite")

    def run(*qids: str) -> list[dict]:
        out = subprocess.run([sys.executable, "-c", _CHILD, path, *qids], capture_output=True, text=True,
                             timeout=120, check=True)
        return json.loads(out.stdout)

    (a,) = run("q1")
    b1, b2 = run("q1", "q2")  # a new process: q1 is replayed, q2 charged
    assert b1 == a and b2["status"] == "ok"
    c1, c2, c3 = run("q1", "q2", "q3")  # 2 x 1.0 spent: q3 is refused, the others replayed
    assert (c1, c2) == (a, b2) and c3["status"] == "rejected"
    assert _charges(Path(path)) == 2
