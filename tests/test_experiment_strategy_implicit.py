"""experiments/strategy_implicit.py --quick: every strategy private (checked independently), the
implicit answers' variances summing to the error, and the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments import strategy_implicit as e


def test_quick_run(tmp_path: Path) -> None:
    df = e.run(quick=True, seed=1, outdir=tmp_path)
    for name in ("strategy_implicit.csv", "strategy_implicit.md", "strategy_implicit.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(df) == 3
    assert np.all(df["max_ratio"] <= 1 + 1e-9) and np.all(df["max_ratio"] > 0.5)
    assert np.all(df["lower_bound"] <= df["strategy_error"] * (1 + 1e-9))
    lines = df[df["workload"].str.startswith("line")]
    # all ranges from the prefix strategy: far below measuring every cell (the gap grows with N)
    assert np.all(lines["identity_error"] > 10 * lines["strategy_error"])
    assert df["explicit_entries"].iloc[1] == 256 * 257 * 258 // 6
    assert "| workload |" in (tmp_path / "strategy_implicit.md").read_text()
