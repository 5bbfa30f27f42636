"""experiments/strategy_vs_scaling.py --quick: every strategy private (checked independently),
never worse than the (w, beta) design it starts from, the prefix sums on lines, and the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import strategy_vs_scaling as e


@pytest.mark.slow
def test_quick_run(tmp_path: Path) -> None:
    df = e.run(quick=True, seed=1, outdir=tmp_path)
    for name in ("strategy.csv", "strategy_vs_n.csv", "strategy.png", "strategy.md"):
        assert (tmp_path / name).stat().st_size > 0
    s = e.summarize(df)
    assert len(s) == 7
    st = df[df["method"] == e.STRAT]
    assert np.all(st["max_ratio"] <= 1 + 1e-9) and np.all(st["max_ratio"] > 0.5)
    assert np.all(s[e.STRAT] <= s[e.WB] * (1 + 1e-9))
    lines = s[s["workload"].str.startswith("line")]
    assert np.all(lines[e.STRAT] <= lines[e.PREFIX] * (1 + 1e-9))
    assert lines[e.WB].iloc[0] > 100 * lines[e.STRAT].iloc[0]  # all ranges: the gap is large
    lb = st["lower_bound"].dropna()
    assert np.all(lb.to_numpy() <= st.loc[lb.index, "error"].to_numpy() * (1 + 1e-9))
    vs_n = (tmp_path / "strategy_vs_n.csv").read_text()
    assert vs_n.count("\n") == 1 + 3 * 3
    assert "| workload |" in (tmp_path / "strategy.md").read_text()
    seeds = pd.read_csv(tmp_path / "strategy_points_seeds.csv")
    assert len(seeds) == 5 and np.all(seeds["max_ratio"] <= 1 + 1e-9)
    assert np.all(seeds["ratio"] >= 1 - 1e-9)  # never worse than the (w, beta) design
    assert np.all(seeds["lower_bound"] <= seeds[e.STRAT] * (1 + 1e-9))
    assert "| seed |" in (tmp_path / "strategy.md").read_text()


def test_only_runs_the_chosen_workloads(tmp_path: Path) -> None:
    df = e.main(["--quick", "--only", "random points", "--outdir", str(tmp_path)])
    assert set(df["workload"]) == {"40 random points, 10 dense queries"}
    st = df[df["method"] == e.STRAT].iloc[0]
    wb = df[df["method"] == e.WB].iloc[0]
    assert st["max_ratio"] <= 1 + 1e-9 and st["error"] < wb["error"]
    assert st["lower_bound"] <= st["error"] * (1 + 1e-9)
    assert (tmp_path / "strategy_only.md").exists() and not (tmp_path / "strategy.md").exists()
