"""Fig 2b: improvement factor of random single linear queries on synthetic points (paper §4.1).

Setup (paper §4.1; settings P1-P7 of docs/reproduction.md): N = 1000 distinct points drawn from the grid
{1..1000}², metric eps_ij = eps * ||p_i - p_j||_2, 1000 random queries with i.i.d. U[0, 1]
coefficients, w = 1 and the closed-form beta* of paper §4.1, for eps in {0.1, 1}.
IF = (Delta f / eps_min) / (1 / beta*) (paper §4.1); it must be >= 1 and independent of eps (T5).
Privacy condition of every design: beta* |f_i - f_j| <= eps_ij for all pairs.

Run:  python -m experiments.fig2b_single_synthetic [--quick] [--seed S]
Output columns: eps, query, noise_scale, baseline_scale, IF.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.data import synthetic_points
from experiments import _common as C

NAME = "fig2b_single_synthetic"
COLUMNS = ["eps", "query", "noise_scale", "baseline_scale", "IF"]


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR,
        eps: Sequence[float] = (0.1, 1.0)) -> pd.DataFrame:
    """IF of each random query for every eps in ``eps`` (same points and queries for each)."""
    N, queries = (200, 100) if quick else (1000, 1000)
    rng = np.random.default_rng(seed)
    pts = synthetic_points(N, 1000, rng=rng)
    U = dp.Universe.from_points(pts)
    F = dp.Workload.random_uniform(queries, N, rng=rng).dense()
    parts = []
    for e in C.progress(eps, "fig2b eps"):
        M = dp.metrics.Euclidean(eps_per_unit=float(e))
        t = C.single_query_if(F, U, M)
        C.check_against_design(F, U, M, t)
        t.insert(0, "eps", float(e))
        parts.append(t)
    df = pd.concat(parts, ignore_index=True)[COLUMNS]
    C.write_csv(df, outdir, NAME)
    first = df[df.eps == df.eps.iloc[0]]
    C.if_histogram(first.IF.to_numpy(), f"Fig 2b: {queries} random queries, N = {N} points "
                   f"on a 1000² grid", outdir, NAME)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{"eps": e, **C.if_stats(g.IF.to_numpy())} for e, g in df.groupby("eps")])


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
