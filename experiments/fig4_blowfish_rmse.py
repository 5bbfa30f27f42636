"""Fig 4: average RMSE of random single queries under the Blowfish threshold metrics (§4.4).

For both threshold readings (A: secret graph within theta + closure; B: eps * max(1, delta/theta)
and eps * delta/theta), for d_theta^1 and d_theta^2, several theta (grid units) and eps: the mean
over random U[0, 1] queries of the RMSE of the d_X Laplace mechanism, sqrt(2) / beta*, and of two
baselines (column ``baseline``, see experiments/_blowfish.py): "eps_min", the eps_min-DP Laplace
(sqrt(2) Delta f / eps_min; the only eps'-DP Laplace that is d_X-private for the metric), and
"eps", the eps-DP Laplace with the Blowfish eps (sqrt(2) Delta f / eps; a comparison scale that is
NOT d_X-private for d^2 when eps_min < eps).  The paper (§4.4) says only "Our base method for
comparison is the [symbol stripped]-differentially private Laplace mechanism".  All RMSEs are
analytic (exact expectations of Laplace noise, no bias at w = 1), not simulated; ``rmse_dx`` does
not depend on the baseline.
Target T8 (docs/reproduction.md): RMSE rises with theta; d^2 gives a higher error than d^1 at equal theta;
"the results under both metrics are roughly the same".
Privacy condition of every design: beta* |f_i - f_j| <= d_theta(i, j) for every constrained pair.

Run:  python -m experiments.fig4_blowfish_rmse [--quick] [--seed S]
Output columns: rule, metric, baseline, theta, eps, eps_min, queries, rmse_dx, rmse_baseline,
mean_IF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import NullFormatter

from experiments import _blowfish as B
from experiments import _common as C

NAME = "fig4_blowfish_rmse"
COLUMNS = ["rule", "metric", "baseline", "theta", "eps", "eps_min", "queries", "rmse_dx",
           "rmse_baseline", "mean_IF"]
_COLORS = {"d1": "#3a6ea5", "d2": "#c0392b"}
_TITLES = {"eps_min": "baseline eps_min-DP Laplace (d_X-private)",
           "eps": "baseline eps-DP Laplace (Blowfish eps; not d_X-private for d2)"}


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """Mean RMSE per (rule, metric, baseline, theta, eps) over the random queries."""
    t = B.table(quick, seed)
    df = (t.groupby(["rule", "metric", "baseline", "theta", "eps"], sort=False)
          .agg(eps_min=("eps_min", "first"), queries=("query", "size"),
               rmse_dx=("rmse_dx", "mean"), rmse_baseline=("rmse_baseline", "mean"),
               mean_IF=("IF", "mean"))
          .reset_index()[COLUMNS])
    order = {b: k for k, b in enumerate(B.BASELINES)}
    df = (df.sort_values(["rule", "metric", "baseline", "theta", "eps"],
                         key=lambda c: c.map(order) if c.name == "baseline" else c)
          .reset_index(drop=True))
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir)
    return df


def _plot(df: pd.DataFrame, outdir: Path) -> None:
    """Rows: readings A, B; columns: the two baselines; solid = d_X Laplace, dashed = baseline."""
    eps_list = sorted(df.eps.unique())
    fig, axes = plt.subplots(2, len(B.BASELINES), figsize=(11, 8), sharex=True, sharey="row",
                             layout="constrained")
    thetas = sorted(df.theta.unique())
    for r, rule in enumerate(("A", "B")):
        for c, base in enumerate(B.BASELINES):
            ax = axes[r][c]
            for metric, color in _COLORS.items():
                for k, eps in enumerate(eps_list):
                    s = df[(df.rule == rule) & (df.metric == metric) & (df.baseline == base)
                           & (df.eps == eps)]
                    alpha = 1.0 if k == 0 else 0.45
                    ax.plot(s.theta, s.rmse_dx, "o-", color=color, alpha=alpha,
                            label=f"d_X Laplace, {metric}, eps={eps:g}")
                    ax.plot(s.theta, s.rmse_baseline, "x--", color=color, alpha=alpha,
                            label=f"baseline for {metric}, eps={eps:g}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(thetas, [f"{t:g}" for t in thetas])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("theta (grid units)")
            ax.set_ylabel("mean RMSE")
            ax.set_title(f"reading {rule}: {_TITLES[base]}", fontsize=8.5)
    C.legend_outside(fig, axes[0][0], ncols=4)
    fig.suptitle("Fig 4: mean RMSE of random single queries (analytic), Blowfish threshold metrics",
                 fontsize=10)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
