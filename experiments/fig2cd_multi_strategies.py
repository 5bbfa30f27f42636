"""Fig 2c/2d: geometric-mean IF of m random linear queries answered together (paper §4.2).

Same points and metric as Fig 2b (N = 1000 points on the grid {1..1000}², eps_ij = eps *
||p_i - p_j||_2).  For each m and matrix type (i.i.d. U[0, 1] entries = Fig 2c, i.i.d. {0, 1}
entries = Fig 2d) random matrices are designed by:

* Strategy 1 ``equal_split``   — beta_k = (1/m) min_ij eps_ij / |F_ki - F_kj| (paper §4.2);
* Strategy 2 ``uniform``       — one beta for all, min_ij eps_ij / Delta_ij F;
* Strategy 3 ``budget_sharing`` — Algorithm 3 (paper §4.2);
* ``exact`` with loss="log"    — the convex optimum of max sum_k log beta_k (docs/theory.md: the
  design problem is convex in u = w·beta), i.e. the best achievable geometric-mean IF; every
  strategy must stay at or below it.

IF(F) = (Delta F / eps_min) * (prod_k beta_k)^(1/m) (paper §4.2); averaged over the matrices.
Privacy condition of every design (Theorem 1): sum_k beta_k |F_ki - F_kj| <= eps_ij for all pairs.
Settings (P6 of docs/reproduction.md): m = 1..10; the full run uses 10 matrices per (type, m) instead of the
placeholder's 100 to keep ``run_all`` under ten minutes (quick: N = 120, m in {1, 2, 4}, 2 matrices).

Run:  python -m experiments.fig2cd_multi_strategies [--quick] [--seed S]
Output columns: matrix, m, rep, eps, method, IF.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.data import synthetic_points
from experiments import _common as C

NAME = "fig2cd_multi_strategies"
COLUMNS = ["matrix", "m", "rep", "eps", "method", "IF"]
METHODS = ("equal_split", "uniform", "budget_sharing", "exact")
LABELS = {"equal_split": "Strategy 1 (equal split)", "uniform": "Strategy 2 (uniform)",
          "budget_sharing": "Strategy 3 (Algorithm 3)", "exact": "exact optimum (log loss)"}


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR,
        eps: Sequence[float] | None = None) -> pd.DataFrame:
    """Geometric-mean IF per (matrix type, m, repetition, eps, method)."""
    if quick:
        N, ms, reps, eps = 120, (1, 2, 4), 2, eps or (0.1, 1.0)
    else:
        N, ms, reps, eps = 1000, tuple(range(1, 11)), 10, eps or (1.0,)
    rng = np.random.default_rng(seed)
    U = dp.Universe.from_points(synthetic_points(N, 1000, rng=rng))
    metrics = {float(e): dp.metrics.Euclidean(eps_per_unit=float(e)) for e in eps}
    cells = [(kind, m, r) for kind in ("uniform", "binary") for m in ms for r in range(reps)]
    rows = []
    for kind, m, r in C.progress(cells, "fig2cd matrices"):
        W = (dp.Workload.random_uniform(m, N, rng=rng) if kind == "uniform"
             else dp.Workload.random_binary(m, N, rng=rng))
        for e, M in metrics.items():
            for method in METHODS:
                d = dp.design(W, U, M, method=method, loss="log")
                rows.append({"matrix": kind, "m": m, "rep": r, "eps": e, "method": method,
                             "IF": float(dp.improvement_factor(W, U, M, d))})
    df = pd.DataFrame(rows, columns=COLUMNS)
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir, N)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean geometric-mean IF per (matrix, m), one column per method (first eps)."""
    d = df[df.eps == df.eps.iloc[0]]
    t = d.pivot_table(index=["matrix", "m"], columns="method", values="IF", aggfunc="mean")
    return t[list(METHODS)].reset_index().sort_values(["matrix", "m"], ascending=[False, True])


def _plot(df: pd.DataFrame, outdir: Path, N: int) -> None:
    t = summarize(df)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True, layout="constrained")
    for ax, kind, title in zip(axes, ("uniform", "binary"), ("Fig 2c: U[0,1] entries",
                                                               "Fig 2d: {0,1} entries"), strict=True):
        s = t[t.matrix == kind]
        for method, marker in zip(METHODS, "os^D", strict=True):
            ax.plot(s.m, s[method], marker=marker, label=LABELS[method])
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("number of queries m")
        C.integer_ticks(ax.xaxis)
        ax.set_title(f"{title} (N = {N})", fontsize=10)
    axes[0].set_ylabel("mean geometric-mean IF")
    C.legend_outside(fig, axes[1], ncols=4)
    C.save_figure(fig, outdir, NAME)


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
