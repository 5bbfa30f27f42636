"""``dprivacy budgets``: the data owner's view of a served configuration's budgets, equal to
the ledgers, printed and exported; nothing of it is served over HTTP."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.cli.app import main
from dprivacy.remote import connect
from tests.service.conftest import KEYS, people


def _spend(srv):
    alice = connect(srv.url, key=KEYS["alice"])
    v = alice.table("visits")
    v.noisy_count(0.25)
    v.count_by(["x", "y"], "city", eps=0.1)
    p = alice.table("people")
    p.where(_.age < 30).noisy_count(0.5)                 # these people keep 0.5 of 1.0
    p.where(_.pid == 3).noisy_count(0.5)                 # pid 3 (age 21): exhausted
    return v.remaining_budget()


def test_budgets_of_a_served_configuration_equal_the_ledgers(start, tmp_path, capsys):
    srv = start("svc", query_seconds=1.0)
    left = _spend(srv)
    assert left == pytest.approx(0.65)
    cfg = str(tmp_path / "svc" / "service.toml")
    capsys.readouterr()
    # while the service is serving: both stores are shared by processes, only read here
    assert main(["budgets", "--config", cfg, "--out", str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    lines = [ln.split() for ln in out.splitlines()]
    assert ["alice", "1", "0.35", "0.65", "2"] in lines
    assert ["bob", "1", "0", "1", "0"] in lines
    truth = srv.runner.owner.budgets["people"].remaining(np.arange(200))
    young = people()["age"].to_numpy() < 30
    expected = {"none (exhausted)": 1, "(25%, 50%]": int(young.sum()) - 1,
                "all (untouched)": int((~young).sum()), "(0%, 25%]": 0, "(50%, 75%]": 0,
                "(75%, 100%)": 0}
    assert int((truth == 0).sum()) == 1 and int((truth == 1.0).sum()) == (~young).sum()
    for label, n in expected.items():
        assert any(ln.startswith(f"  {label}") and ln.split()[-1] == str(n)
                   for ln in out.splitlines()), (label, out)
    assert "200 people, 2 queries committed" in out
    table = pd.read_csv(tmp_path / "b.csv")
    assert set(table.unit) == {"eps"}
    pinq = table[table.kind == "pinq"].set_index("analyst")
    assert pinq.loc["alice", "remaining"] == pytest.approx(left)
    assert pinq.loc["alice", "charges"] == 2 and pinq.loc["bob", "spent"] == 0
    proper = table[table.kind == "proper"].set_index("left")
    assert proper["people"].sum() == 200
    assert proper["remaining"].sum() == pytest.approx(truth.sum())
    assert proper.loc["(25%, 50%]", "people"] == expected["(25%, 50%]"]
    assert main(["budgets", "--config", cfg, "--source", "visits",
                 "--out", str(tmp_path / "b.parquet")]) == 0
    pq = pd.read_parquet(tmp_path / "b.parquet")
    assert set(pq.kind) == {"pinq"} and len(pq) == 2


def test_nothing_of_it_is_served(start):
    """No route lists budgets: the only budget endpoint answers an analyst's own PINQ budget,
    and a ProPer source's budgets are refused."""
    srv = start("svc2", query_seconds=0.05)
    paths = {getattr(r, "path", "") for r in srv.app.routes}
    assert "/v1/budget" in paths
    assert not any("budgets" in p for p in paths)
    p = connect(srv.url, key=KEYS["alice"]).table("people")
    from dprivacy.errors import UnsupportedOperationError

    with pytest.raises(UnsupportedOperationError):
        p.remaining_budget()


def test_errors_are_one_line(tmp_path, capsys):
    from tests.service.conftest import write_service

    cfg = write_service(tmp_path / "never", people())
    assert main(["budgets", "--config", str(cfg)]) == 0       # never served: nothing created
    out = capsys.readouterr().out
    assert "no budget store yet" in out and "alice" in out
    assert not (tmp_path / "never" / "service.state").exists()
    assert main(["budgets", "--config", str(cfg), "--source", "nope"]) == 2
    assert main(["budgets", "--config", str(tmp_path / "missing.toml")]) == 3
    assert main(["budgets", "--config", str(cfg), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert all(line.startswith("dprivacy budgets: error:") for line in err.splitlines() if line)
