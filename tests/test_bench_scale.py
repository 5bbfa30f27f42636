"""experiments.bench_scale --quick runs end to end: CSV, PNG, and the correctness targets."""

from __future__ import annotations

import pandas as pd

from experiments import bench_scale


def test_bench_scale_quick(tmp_path, capsys):
    assert bench_scale.main(["--quick", "--metrics", "euclid", "--ms", "10",
                             "--outdir", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "bench_scale.csv")
    assert (tmp_path / "bench_scale.png").stat().st_size > 0
    assert set(df.cell) == {"design", "versus", "kernel"}
    assert "status" not in df or not df.status.astype(str).str.startswith("failed").any()
    des = df[df.cell == "design"].iloc[0]
    assert des.pruned_passes == des.passes >= 3 and des.max_ratio <= 1 + 1e-12
    assert abs(des.max_ratio / des.full_max_ratio - 1) <= 1e-12  # pruned = full scan
    vs = df[df.cell == "versus"].iloc[0]
    assert vs.objective_rel_gap <= 1e-9  # the same optimum as the full-scan path
    k = df[df.cell == "kernel"]
    assert (k.max_ratio_rel_diff <= 1e-12).all()  # every scan formulation finds the same max
    tg = pd.read_csv(tmp_path / "bench_scale_targets.csv")
    row = tg[tg.target.str.startswith("pruned max ratio")]
    assert len(row) == 1 and row.verdict.iloc[0] == "met"
    assert "targets" in capsys.readouterr().out
