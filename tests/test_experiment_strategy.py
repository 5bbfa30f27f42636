"""experiments/strategy_vs_scaling.py --quick: every strategy private (checked independently),
never worse than the (w, beta) design it starts from, the prefix sums on lines, and the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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
