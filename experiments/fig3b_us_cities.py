"""Fig 3b: improvement factor of random single queries on the US cities (paper §4.3).

The universe is the shipped list of 810 US cities above 50 000 inhabitants (GeoNames; the paper
used 741 simplemaps cities, so the numbers differ: see datasets/README.md).  Metrics: the geodesic
distance eps_ij = eps_per_km * dist_km(i, j) (sphere model) at eps_per_km in {0.01, 0.1}, and the
paper's reading, eps_ij = ||(lon, lat)_i - (lon, lat)_j||_2 in degrees (paper §4.3).  1000 random
queries with i.i.d. U[0, 1] coefficients; w = 1 and the closed-form beta* (paper §4.1).
Targets (docs/reproduction.md): T2 mean IF between 2 and 3, T3 max IF > 7.5, T5 IF >= 1 and eps-invariant.
Privacy condition of every design: beta* |f_i - f_j| <= eps_ij for all pairs of cities.

Run:  python -m experiments.fig3b_us_cities [--quick] [--seed S]
Output columns: metric, eps, query, noise_scale, baseline_scale, IF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from experiments import _common as C

NAME = "fig3b_us_cities"
COLUMNS = ["metric", "eps", "query", "noise_scale", "baseline_scale", "IF"]


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """IF of each random query under each metric of :func:`experiments._common.city_metrics`."""
    queries = 60 if quick else 1000
    U, _ = C.cities_universe()
    F = dp.Workload.random_uniform(queries, U.N, rng=np.random.default_rng(seed)).dense()
    parts = []
    for name, eps, M in C.progress(C.city_metrics(), "fig3b metrics"):
        t = C.single_query_if(F, U, M)
        C.check_against_design(F, U, M, t)
        t.insert(0, "eps", eps)
        t.insert(0, "metric", name)
        parts.append(t)
    df = pd.concat(parts, ignore_index=True)[COLUMNS]
    C.write_csv(df, outdir, NAME)
    geo = df[(df.metric == "geodesic") & (df.eps == df.eps[df.metric == "geodesic"].iloc[0])]
    C.if_histogram(geo.IF.to_numpy(), f"Fig 3b: {queries} random queries, {U.N} US cities, "
                   "geodesic metric", outdir, NAME)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{"metric": k[0], "eps": k[1], **C.if_stats(g.IF.to_numpy())}
                         for k, g in df.groupby(["metric", "eps"], sort=False)])


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
