"""Fig 4: average RMSE of random single queries under the Blowfish threshold metrics (§4.4).

For both threshold readings (A: secret graph within theta + closure; B: eps * max(1, delta/theta)
and eps * delta/theta), for d_theta^1 and d_theta^2, several theta (grid units) and eps: the mean
over random U[0, 1] queries of the RMSE of the d_X Laplace mechanism, sqrt(2) / beta*, and of the
eps-DP baseline at eps_min, sqrt(2) Delta f / eps_min.  Both RMSEs are analytic (exact expectations
of Laplace noise, no bias at w = 1), not simulated; see experiments/_blowfish.py.
Target T8 (spec §7.2): RMSE rises with theta; d^2 gives a higher error than d^1 at equal theta.
Privacy condition of every design: beta* |f_i - f_j| <= d_theta(i, j) for every constrained pair.

Run:  python -m experiments.fig4_blowfish_rmse [--quick] [--seed S]
Output columns: rule, metric, theta, eps, queries, rmse_dx, rmse_baseline, mean_IF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments import _blowfish as B
from experiments import _common as C

NAME = "fig4_blowfish_rmse"
COLUMNS = ["rule", "metric", "theta", "eps", "queries", "rmse_dx", "rmse_baseline", "mean_IF"]


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """Mean RMSE per (rule, metric, theta, eps) over the random queries."""
    t = B.table(quick, seed)
    df = (t.groupby(["rule", "metric", "theta", "eps"], sort=True)
          .agg(queries=("query", "size"), rmse_dx=("rmse_dx", "mean"),
               rmse_baseline=("rmse_baseline", "mean"), mean_IF=("IF", "mean"))
          .reset_index()[COLUMNS])
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir)
    return df


def _plot(df: pd.DataFrame, outdir: Path) -> None:
    eps_list = sorted(df.eps.unique())
    fig, axes = plt.subplots(len(eps_list), 2, figsize=(10, 3.4 * len(eps_list)), squeeze=False)
    for r, eps in enumerate(eps_list):
        for c, rule in enumerate(("A", "B")):
            ax = axes[r][c]
            for metric, color in (("d1", "#3a6ea5"), ("d2", "#c0392b")):
                s = df[(df.rule == rule) & (df.metric == metric) & (df.eps == eps)]
                ax.plot(s.theta, s.rmse_dx, "o-", color=color, label=f"d_X Laplace, {metric}")
                ax.plot(s.theta, s.rmse_baseline, "x--", color=color,
                        label=f"eps_min-DP baseline, {metric}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("theta (grid units)")
            ax.set_ylabel("mean RMSE")
            ax.set_title(f"Fig 4: reading {rule}, eps = {eps:g}", fontsize=10)
    axes[0][1].legend(fontsize=7)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
