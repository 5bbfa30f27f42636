"""Error against ε: the d_X designs and the ε_min-DP baseline on the US cities.

The universe is the shipped US cities (--quick: the first 150) under the geodesic metric
eps_ij = a x distance in km, for budgets a (``eps_per_km``) from 0.01 to 1; the workload is
five random U[0, 1] queries plus the elevation query (km). For each a the script designs with
Strategy 1 (equal split), Strategy 3 (budget sharing) and the exact convex program, and reports
the root-mean-square error over the queries, sqrt(mean_k 2 / beta_k^2) (the exact expectation of
Laplace noise of scale 1/beta_k), against the ε_min-DP Laplace baseline (scale ΔF/ε_min on
every query, Definition 4). A sampled RMSE of the exact design (released 200 times on the cities'
populations, seeded) checks the analytic one. Every curve falls as 1/a (slope -1 on log-log
axes): doubling the budget per km halves the noise; the vertical gap to the baseline is the
improvement factor, the same at every a. Privacy condition of every design: Theorem 1,
sum_k beta_k w_k |F_ki - F_kj| <= eps_ij for every pair of cities.

Run:  python -m experiments.error_vs_eps [--quick] [--seed S]
Output columns: eps_per_km, method, rmse, sampled.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.plotting import plot_error_curves
from experiments import _common as C

NAME = "error_vs_eps"
COLUMNS = ["eps_per_km", "method", "rmse", "sampled"]
METHODS = {"equal_split": "Strategy 1 (equal split)", "budget_sharing": "Strategy 3",
           "exact": "exact design"}
BASELINE = "eps_min-DP baseline"


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """RMSE of each design and of the baseline at every budget per km."""
    U, cities = C.cities_universe()
    if quick:
        cities = cities.head(150).reset_index(drop=True)
        U = dp.Universe.from_points(cities[["latitude", "longitude"]].to_numpy())
    rng = np.random.default_rng(seed)
    F = np.vstack([rng.uniform(0, 1, size=(5, U.N)), cities["elevation"].to_numpy() / 1000])
    W = dp.Workload(F)
    x = cities["population"].to_numpy(dtype=np.int64)
    grid = [0.01, 0.1, 1.0] if quick else [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
    rows = []
    for a in C.progress(grid, "eps per km"):
        M = dp.metrics.Geodesic(eps_per_km=a)
        base = W.sensitivity() / M.eps_min(U)
        rows.append({"eps_per_km": a, "method": BASELINE, "rmse": float(np.sqrt(2) * base),
                     "sampled": np.nan})
        for method, label in METHODS.items():
            d = dp.design(W, U, M, method=method)
            rmse = float(np.sqrt(np.mean(2 * d.noise_scale ** 2)))
            sampled = np.nan
            if method == "exact":
                mech = dp.DXLaplace(W, d, universe=U, metric=M)
                acc = dp.Accountant(total=np.inf)
                draws = np.array([mech.release(x, secure=False, rng=seed + r, accountant=acc)
                                  for r in range(200)])
                sampled = float(np.sqrt(np.mean((draws - W.answer(x)) ** 2)))
            rows.append({"eps_per_km": a, "method": label, "rmse": rmse, "sampled": sampled})
    df = pd.DataFrame(rows, columns=COLUMNS)
    C.write_csv(df, outdir, NAME)
    outdir.mkdir(parents=True, exist_ok=True)
    plot_error_curves(df, x="eps_per_km", y="rmse", by="method", xlabel="budget per km, a "
                      "(eps_ij = a x distance in km)", ylabel="RMSE over the 6 queries (log)",
                      title=f"Error against the budget: {U.N} US cities, geodesic metric",
                      path=outdir / f"{NAME}.png")
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df.pivot(index="eps_per_km", columns="method", values="rmse").reset_index()


def main(argv: list[str] | None = None) -> pd.DataFrame:
    return C.main(NAME, __doc__, run, summarize, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
