"""experiments.bench_service_load --quick runs end to end: a served config under load, a flood,
a kill -9 and a restart; every answer paid for and the ledgers agree with the answers."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import bench_service_load

pytestmark = pytest.mark.slow


def test_bench_service_load_quick(tmp_path):
    out = bench_service_load.main(["--quick", "--results", str(tmp_path), "--tmp",
                                   str(tmp_path)])
    summary = pd.read_csv(tmp_path / "bench_service_load_quick.csv")
    assert set(summary.phase) == {"warm-up", "steady", "flood"}
    steady = summary[summary.phase == "steady"]
    assert sorted(steady.analyst) == ["a0", "a1", "a2", "others (not a0)"]
    assert (steady.answers >= 1).all()
    pooled = steady[steady.analyst == "others (not a0)"].iloc[0]
    assert pooled.answers == steady[steady.analyst.isin(["a1", "a2"])].answers.sum()
    assert (steady.admission_refusals == 0).all() and (steady.other_errors == 0).all()
    assert "flood" in set(summary[summary.phase == "flood"].role)
    records = out["records"]
    assert set(records.kind) == set(bench_service_load.KINDS)
    assert out["meta"]["phases"]["flood"]["restart_s"] > 0      # the server was killed
    aud = out["audit"]
    assert aud.charges_match.all(), aud.to_string()
    assert (aud[aud.source == "pinq"].ledger_spent > 0).all()
    assert (tmp_path / "bench_service_load_quick.md").read_text().count("| a0 |") >= 2
    # the service's trace says when each response's bytes were written, after its release
    parts = out["stages"]
    respond = parts[parts.component == "respond"]
    assert len(respond) and (respond.n > 0).all() and (respond.median_ms >= 0).all()
    # the idle stall probe ran through both phases and its worst wake-up is reported per answer
    probe = out["meta"]["stall_probe"]
    assert probe["wakeups"] > 1000 and probe["max_ms"] >= 0
    assert "machine_stall" in set(parts.component)
