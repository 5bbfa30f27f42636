"""experiments/local_optimal_vs_planar.py --quick: columns, files, and its qualitative target."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

os.environ.setdefault("TQDM_DISABLE", "1")


def test_quick_run(tmp_path: Path) -> None:
    from experiments import local_optimal_vs_planar as ex

    df = ex.run(quick=True, seed=0, outdir=tmp_path)
    assert list(df.columns) == ex.COLUMNS and len(df) >= 4
    assert df.private.all()
    # the LP is at least as good as both baselines at the same privacy (up to Monte Carlo error)
    assert (df.expected_loss <= df.planar_loss + 3 * df.planar_se).all()
    assert (df.expected_loss <= df.exponential_loss * (1 + 1e-9)).all()
    assert list(pd.read_csv(tmp_path / f"{ex.NAME}.csv").columns) == ex.COLUMNS
    assert (tmp_path / f"{ex.NAME}.png").stat().st_size > 1000
