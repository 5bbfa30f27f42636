"""Release accounting: k releases through an accountant of budget K, refusals charge nothing, the
durable budget survives restarts and SIGKILL between the charge and the release."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics, noise
from dprivacy.errors import BudgetExceededError, ValidationError
from tests.sigkill import run_with_random_kills

ROOT = str(Path(__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": ROOT}


def line():
    U = dp.Universe.from_points(np.arange(4.0).reshape(-1, 1))
    return U, metrics.Euclidean(1.0), np.array([20, 10, 15, 5])


def mechanisms(scale: float = 1.0):
    """One mechanism of each kind, designed for d_X / scale and verified against d_X itself
    (so each release costs alpha = 1 / scale)."""
    U, M, x = line()
    Ms = metrics.Euclidean(1.0 / scale)
    W = dp.Workload.range_queries(4, [(0, 1), (1, 2), (2, 3)])
    d = dp.design(W, U, Ms, method="uniform")
    util = -np.abs(np.arange(4)[:, None] - np.arange(4)[None, :]).astype(float)
    ex = dp.DXExponential.optimal(util, U, Ms)
    sdb = dp.DXSmallDB.from_solver(W, U, Ms, n=400, size=3)
    mw = dp.DXMWEM.from_solver(W, U, Ms, n=400, T=2)
    return x, [dp.DXLaplace(W, d, universe=U, metric=M),
               dp.DXExponential(ex.workload, ex.design, universe=U, metric=M),
               dp.DXSmallDB(sdb.workload, sdb.design, size=3, universe=U, metric=M),
               dp.DXMWEM(mw.workload, mw.design, T=2, universe=U, metric=M)]


@pytest.mark.parametrize("scale, K", [(1.0, 3.0), (3.0, 1.0), (4.0, 2.5)])
def test_k_releases_then_the_next_is_refused_and_charges_nothing(scale, K, monkeypatch):
    x, mechs = mechanisms(scale)
    for mech in mechs:
        assert mech.release_cost == pytest.approx(1.0 / scale, rel=1e-8)
        acc = dp.Accountant(total=K)
        k = int(math.floor(K / mech.release_cost + 1e-6))
        for s in range(k):
            mech.release(x, rng=s, secure=False, accountant=acc)
        assert acc.releases == k and acc.spent <= K
        spent = acc.spent
        drawn: list[int] = []
        monkeypatch.setattr(noise, "add_laplace", lambda *a, d=drawn, **kw: d.append(1))
        monkeypatch.setattr(noise, "exponential_choice", lambda *a, d=drawn, **kw: d.append(1))
        with pytest.raises(BudgetExceededError, match="nothing was charged"):
            mech.release(x, rng=99, secure=False, accountant=acc)
        monkeypatch.undo()
        assert drawn == []  # refused before any noise was drawn
        assert acc.spent == spent and acc.releases == k  # the refusal charged nothing


def test_without_an_accountant_a_mechanism_releases_once():
    x, mechs = mechanisms()
    for mech in mechs:
        mech.release(x, rng=0, secure=False)
        with pytest.raises(BudgetExceededError, match="accountant="):
            mech.release(x, rng=1, secure=False)
        # an explicit accountant still works (the built-in budget is per mechanism)
        mech.release(x, rng=2, secure=False, accountant=dp.Accountant(total=1))


def test_bad_input_charges_nothing():
    x, mechs = mechanisms()
    acc = dp.Accountant(total=10)
    for mech in mechs:
        for bad in (np.array([1.0, -1.0, 0.0, 0.0]), np.zeros(3), np.array([np.nan, 0, 0, 1])):
            with pytest.raises(ValidationError):
                mech.release(bad, accountant=acc)
    assert acc.spent == 0 and acc.releases == 0
    with pytest.raises(ValidationError, match="expected a dprivacy.Accountant"):
        mechs[0].release(x, accountant=3.0)
    mechs[0].release(x, rng=0, secure=False)  # the built-in budget was not used up either


def test_amounts_are_exact_in_units():
    acc = dp.Accountant(total=1)
    acc.charge(1 - 1e-9)
    with pytest.raises(BudgetExceededError):
        acc.charge(2e-9)  # costs round up to the 1e-9 unit: never undercharged
    acc.charge(1e-9)
    acc = dp.Accountant(total=0.3)
    for _ in range(3):
        acc.charge(0.1)
    assert acc.remaining == 0
    for bad in (-1.0, math.nan, math.inf, "1", None, True):
        with pytest.raises(ValidationError):
            dp.Accountant(total=1).charge(bad)
    for bad in (-1.0, math.nan, "abc", None):
        with pytest.raises(ValidationError):
            dp.Accountant(total=bad)
    sim = dp.Accountant(total=math.inf)
    sim.charge(1e6)
    assert sim.remaining == math.inf and sim.spent == 1e6
    assert sim.can_afford(1e9) and not dp.Accountant(total=1).can_afford(1.5)


def test_durable_budget_persists_and_the_stored_total_wins(tmp_path):
    db = tmp_path / "budget.sqlite"
    x, mechs = mechanisms()
    mech = mechs[0]
    acc = dp.Accountant.durable(db, total=2.0)
    mech.release(x, rng=0, secure=False, accountant=acc)
    again = dp.Accountant.durable(db, total=2.0)  # another process / a restart
    assert again.spent == pytest.approx(mech.release_cost) and again.total == 2.0
    mech.release(x, rng=1, secure=False, accountant=again)
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        mech.release(x, rng=2, secure=False, accountant=acc)
    assert dp.Accountant.durable(db).spent == pytest.approx(2 * mech.release_cost)
    with pytest.raises(ValidationError, match="created with"):
        dp.Accountant.durable(db, total=10.0)  # a budget cannot be refreshed by reopening
    with pytest.raises(ValidationError, match="no release budget named"):
        dp.Accountant.durable(db, name="other")
    other = dp.Accountant.durable(db, total=1.0, name="other")
    assert other.remaining == 1.0
    with pytest.raises(ValidationError):
        dp.Accountant.durable(db, total=-1.0, name="neg")
    with pytest.raises(ValidationError, match=str(tmp_path)):
        dp.Accountant.durable(tmp_path, total=1.0)  # a directory, not a ledger file
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database" * 100)
    with pytest.raises(ValidationError, match="junk.sqlite"):
        dp.Accountant.durable(junk, total=1.0)
    with sqlite3.connect(db) as con:  # the ledger logs every release it paid for
        labels = [r[0] for r in con.execute("SELECT label FROM queries")]
    con.close()
    assert labels == ["laplace release (m=3, N=4)"] * 2


def _worker(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.accounting_worker", *args],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigkill_between_charge_and_release_keeps_the_charge(tmp_path):
    db, out = tmp_path / "b.sqlite", tmp_path / "released.txt"
    proc = _worker("hang", str(db), str(out))
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "charged"  # inside release, before the noise
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert not out.exists()  # nothing was released ...
    acc = dp.Accountant.durable(db)
    cost = mechanisms()[1][0].release_cost
    assert acc.spent == pytest.approx(cost, rel=1e-9)  # ... but the charge is on disk
    assert acc.remaining == pytest.approx(5.0 - cost, rel=1e-9)


@pytest.mark.slow
def test_random_sigkills_never_release_uncharged(tmp_path):
    db, out = tmp_path / "b.sqlite", tmp_path / "released.txt"
    n = 40
    run_with_random_kills(lambda done: _worker("loop", str(db), str(out), str(done), str(n)),
                          out, n, kills_wanted=3, max_wait=0.03, seed=0, max_kills=200,
                          final_timeout=120)
    released = out.read_text().splitlines()
    assert [r.split()[0] for r in released] == [f"q{i}" for i in range(n)]
    cost = mechanisms()[1][0].release_cost
    charged = dp.Accountant.durable(db).spent / cost
    # every released answer was charged; a kill after a charge may have lost budget, never more
    assert round(charged) >= n and charged == pytest.approx(round(charged), abs=1e-6)


def test_one_accountant_counts_multiples_of_one_metric(tmp_path):
    """Multiples of two metrics do not add up: the first release binds the accountant to the
    metric (and universe) its mechanism was verified against; another one is refused."""
    U, M, x = line()
    W = dp.Workload([[0.0, 1.0, 2.0, 3.0]])
    M2 = metrics.Euclidean(3.0)
    m1 = dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"), universe=U, metric=M)
    m2 = dp.DXLaplace(W, dp.design(W, U, M2, method="closed_form"), universe=U, metric=M2)
    # no metric given: the unit is the one the design was solved for (M2), so it is refused too
    via_design = dp.DXLaplace(W, dp.design(W, U, M2, method="closed_form"))
    d2 = dp.design(W, U, M2, method="closed_form")
    unitless = dp.DXLaplace(W, dp.Design(d2.w, d2.beta, constraints=d2.constraints))
    for acc in (dp.Accountant(total=5), dp.Accountant.durable(tmp_path / "b.sqlite", total=5)):
        m1.release(x, rng=0, secure=False, accountant=acc)
        with pytest.raises(ValidationError, match="another metric"):
            m2.release(x, rng=0, secure=False, accountant=acc)
        with pytest.raises(ValidationError, match="another metric"):
            via_design.release(x, rng=0, secure=False, accountant=acc)
        with pytest.raises(ValidationError, match="without its universe and metric"):
            unitless.release(x, rng=0, secure=False, accountant=acc)  # no unit: refused
        assert acc.spent == pytest.approx(m1.release_cost)
        m1.release(x, rng=1, secure=False, accountant=acc)
    reopened = dp.Accountant.durable(tmp_path / "b.sqlite")  # the binding is in the file
    with pytest.raises(ValidationError, match="another metric"):
        m2.release(x, rng=0, secure=False, accountant=reopened)
    m1.release(x, rng=2, secure=False, accountant=reopened)


def test_budget_left_reads_the_same_in_python_and_in_the_cli(tmp_path) -> None:
    """A design verified to the 1e-9 tolerance leaves 1e-9 of a budget of 1: the refusal says
    "0 of 1 left", as the CLI does (it said "1e-09 of 1 left" in Python, "0 of 1" in the CLI)."""
    import shutil
    from pathlib import Path

    import pytest

    from dprivacy.accounting import Accountant, format_amount
    from dprivacy.cli import main
    from dprivacy.errors import BudgetExceededError

    acc = Accountant(total=1)
    acc.charge(0.999999999)
    assert acc.remaining == pytest.approx(1e-9)
    with pytest.raises(BudgetExceededError, match=r"\(0 of 1 left\)"):
        acc.charge(0.5)
    assert "spent 1 of 1" in repr(acc)
    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "examples", tmp_path / "examples")
    inputs = ["--universe", str(tmp_path / "examples/cities.csv"), "--metric", "geodesic",
              "--param", "eps_per_km=0.05", "--queries", str(tmp_path / "examples/queries_named.csv")]
    assert main(["design", *inputs, "--out", str(tmp_path / "c.json")]) == 0
    ledger = ["--ledger", str(tmp_path / "b.sqlite")]
    assert main(["release", str(tmp_path / "c.json"), "--records",
                 str(tmp_path / "examples/records.csv"), "--out", str(tmp_path / "a.csv"),
                 *ledger, "--budget", "1", *inputs]) == 0
    assert main(["release", str(tmp_path / "c.json"), "--records",
                 str(tmp_path / "examples/records.csv"), "--out", str(tmp_path / "a2.csv"),
                 *ledger, *inputs]) == 5
    durable = Accountant.durable(str(tmp_path / "b.sqlite"))
    with pytest.raises(BudgetExceededError) as python_err:
        durable.charge(1.0)
    left = f"({format_amount(durable.remaining)} of 1 left)"
    assert left in str(python_err.value)
    assert format_amount(durable.remaining) in ("0", "1e-09") and format_amount(1e-9) == "0"
