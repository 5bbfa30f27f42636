"""The "average elevation of a US resident's house" query on the US cities (paper §4.3).

Query coefficients are the city elevations (metres): f(x) = sum_i elev_i x_i, divided by the public
n for the average (dividing by n changes neither the design nor IF; docs/theory.md). x_i is the
population of city i (the paper's §4.3 does not say; this project's reading). The design is the
closed form of paper §4.1: beta* = min_ij eps_ij / |elev_i - elev_j|; IF = beta* * range(elev) /
eps_min. Elevation varies smoothly in space, so IF is large (T4: "particularly well"; tens
expected). For context the same table gives the IF of random U[0, 1] queries on the same universe
and the query's percentile.
Privacy condition: beta* |elev_i - elev_j| <= eps_ij for every pair of cities.

Run:  python -m experiments.elevation_query [--quick] [--seed S]
Output columns: metric, eps, IF, noise_scale, baseline_scale, tight_pair, random_mean_IF,
random_max_IF, percentile, true_average_m, noisy_average_m.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import dprivacy as dp
from experiments import _common as C

NAME = "elevation_query"
COLUMNS = ["metric", "eps", "IF", "noise_scale", "baseline_scale", "tight_pair", "random_mean_IF",
           "random_max_IF", "percentile", "true_average_m", "noisy_average_m"]


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """IF of the elevation query under each city metric, next to random queries."""
    U, cities = C.cities_universe()
    elev = cities["elevation"].to_numpy(dtype=float)
    x = cities["population"].to_numpy(dtype=np.int64)
    n = int(x.sum())
    W = dp.Workload(elev[None, :], names=("elevation",))
    F_rand = dp.Workload.random_uniform(40 if quick else 300, U.N,
                                        rng=np.random.default_rng(seed)).dense()
    rows, rand_if = [], {}
    for name, eps, M in C.progress(C.city_metrics(), "elevation metrics"):
        d = dp.design(W, U, M, method="closed_form")
        IF = float(dp.improvement_factor(W, U, M, d))
        c, bi, bj = M.constraint_set(U).row_lipschitz(W.F, memory_bytes=C.SCAN_BYTES)
        labels = U.labels()
        rnd = C.single_query_if(F_rand, U, M).IF.to_numpy()
        rand_if[(name, eps)] = rnd
        noisy = dp.DXLaplace(W, d).release(x, rng=seed, secure=False)[0] / n
        rows.append({
            "metric": name, "eps": eps, "IF": IF, "noise_scale": float(d.noise_scale[0]),
            "baseline_scale": float(W.sensitivity() / M.eps_min(U)),
            "tight_pair": f"{labels[bi[0]]} - {labels[bj[0]]}",
            "random_mean_IF": float(rnd.mean()), "random_max_IF": float(rnd.max()),
            "percentile": float(100 * np.mean(rnd < IF)),
            "true_average_m": float(elev @ x / n), "noisy_average_m": float(noisy)})
    df = pd.DataFrame(rows, columns=COLUMNS)
    C.write_csv(df, outdir, NAME)
    _plot(df, rand_if, outdir)
    return df


def _plot(df: pd.DataFrame, rand_if: dict, outdir: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.9), layout="constrained")
    r = df.iloc[0]
    v = rand_if[(r.metric, r.eps)]
    bins = np.geomspace(v.min(), v.max(), 31)  # equal widths on the log axis
    ax.hist(v, bins=bins, color="#3a6ea5", edgecolor="white", label="random U[0,1] queries")
    ax.axvline(r.IF, color="#c0392b", lw=2, label=f"elevation query, IF = {r.IF:.1f}")
    ax.set_xscale("log")
    ax.set_xlabel("improvement factor IF (log scale)")
    ax.set_ylabel("number of queries")
    C.integer_ticks(ax.yaxis)
    ax.set_title(f"Elevation query vs random queries ({r.metric} metric)", fontsize=10)
    C.legend_outside(fig, ax)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df[["metric", "eps", "IF", "noise_scale", "baseline_scale", "random_mean_IF",
               "percentile", "tight_pair"]]


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
