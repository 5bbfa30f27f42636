"""experiments/local_optimal_scale.py on small sizes: columns, certificates, privacy, baselines."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("TQDM_DISABLE", "1")


def test_small_run(tmp_path: Path) -> None:
    from experiments import local_optimal_scale as ex

    df = ex.run(quick=True, seed=0, outdir=tmp_path, grids=[4], cities=[12], losses=["squared"],
                gap=1e-3)
    assert list(df.columns) == ex.COLUMNS and len(df) == 2 * 2 + 2  # grid: 2 metrics x 2 priors
    assert df.private.all()
    assert (df.gap <= 1e-3 + 1e-12).all() and (df.lower_bound <= df.expected_loss).all()
    done = df[np.isfinite(df.plain_loss)]
    assert len(done) == len(df)  # N <= 25: the plain LP finishes
    assert (done.lower_bound <= done.plain_loss * (1 + 1e-9)).all()  # a bound on the optimum
    assert (done.expected_loss >= done.plain_loss * (1 - 1e-9)).all()
    assert (done.expected_loss <= done.plain_loss * (1 + 1e-3 + 1e-9)).all()
    assert (df.expected_loss <= df.planar_loss + 3 * df.planar_se).all()
    uniform_grid = df[(df.setting == "grid 4x4") & (df.prior == "uniform")]
    assert (uniform_grid.group_order == 8).all()
    assert df[df.metric == "manhattan"].graph_edges.all()
    assert not df[df.metric == "euclidean"].graph_edges.any()
    assert list(pd.read_csv(tmp_path / f"{ex.NAME}.csv").columns) == ex.COLUMNS
    # appending keeps the earlier rows
    df2 = ex.run(quick=True, seed=0, outdir=tmp_path, grids=[3], cities=[], losses=["distance"],
                 metrics=["manhattan"], priors=["uniform"], append=True)
    assert len(df2) == len(df) + 1


def test_warm_start_row(tmp_path: Path) -> None:
    """A grid started from a smaller one: the warm-start columns are filled, the time includes
    the smaller solve, the bound is valid and the randomiser private."""
    from experiments import local_optimal_scale as ex

    df = ex.run(quick=True, seed=0, outdir=tmp_path, grids=[5], cities=[], losses=["distance"],
                metrics=["euclidean", "manhattan"], priors=["uniform"], gap=1e-3, warm_from=3,
                plain_max=25)
    assert df.private.all() and (df.warm_from == 3).all()
    assert (df.warm_seconds <= df.seconds).all() and np.isfinite(df.first_bound).all()
    assert (df.lower_bound <= df.plain_loss * (1 + 1e-9)).all()
    assert (df.gap <= 1e-3 + 1e-12).all()
