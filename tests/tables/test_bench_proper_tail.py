"""experiments.bench_proper_tail runs tiny: both compaction modes, every query timed, files."""

from __future__ import annotations

import pandas as pd

from experiments import bench_proper_tail


def test_the_tail_benchmark_runs_both_modes(tmp_path):
    table = bench_proper_tail.main(["--rows", "20000", "--queries", "6", "--out", str(tmp_path)])
    res = pd.read_csv(tmp_path / "bench_proper_tail.csv")
    assert len(res) == 12 and set(res["compaction"]) == {"background", "on the query path"}
    assert (res["time_s"] > 0).all() and (res["exact_s"] > 0).all()
    assert list(table["compaction"]) == ["on the query path", "background"]
    assert (table["max_over_median"] >= 1).all()
    assert "| compaction |" in (tmp_path / "bench_proper_tail.md").read_text()
