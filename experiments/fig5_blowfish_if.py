"""Fig 5: distribution of the improvement factor under the Blowfish threshold metrics (§4.4).

Per query: IF = (Delta f / eps') / (1 / beta*) for the d_X Laplace mechanism with the closed-form
beta* (paper §4.1), for both threshold readings A and B, d_theta^1 and d_theta^2, several theta
and two eps, against two baselines (column ``baseline``, see experiments/_blowfish.py):
"eps_min" (eps' = eps_min of the metric: the d_X-private eps'-DP Laplace; IF >= 1 always) and
"eps" (eps' = the Blowfish eps: a comparison scale, not d_X-private for d^2 when eps_min < eps;
IF < 1 is possible).  IF does not depend on eps under either baseline (both metrics, and both
eps', scale linearly in eps).  Paper (§4.4, symbols stripped): "Then we fix [ ], and for each
random query ([ ] in total), we compute the improvement factor ... for higher threshold values the
distributions under both metrics are roughly similar, but for lower threshold values (e.g. [ ]),
the improvement factor under [ ] is better than under [ ]."
Target T9 (docs/reproduction.md): IF similar at high theta; at low theta IF under d^1 > IF under d^2.
Privacy condition of every design: beta* |f_i - f_j| <= d_theta(i, j) for every constrained pair.

Run:  python -m experiments.fig5_blowfish_if [--quick] [--seed S]
Output columns: rule, metric, baseline, theta, eps, query, IF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from experiments import _blowfish as B
from experiments import _common as C

NAME = "fig5_blowfish_if"
COLUMNS = ["rule", "metric", "baseline", "theta", "eps", "query", "IF"]
_YTICKS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50, 100)
_YTICKS_DECADES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
_TITLES = {"eps_min": "baseline eps_min-DP Laplace (d_X-private)",
           "eps": "baseline eps-DP Laplace (Blowfish eps; not d_X-private for d2)"}


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """Per-query IF for every (rule, metric, baseline, theta, eps)."""
    df = B.table(quick, seed)[COLUMNS]
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir)
    return df


def _plot(df: pd.DataFrame, outdir: Path) -> None:
    """Rows: readings A, B; columns: the two baselines; boxes per theta, d1 blue, d2 red."""
    d = df[df.eps == df.eps.min()]
    thetas = sorted(d.theta.unique())
    fig, axes = plt.subplots(2, len(B.BASELINES), figsize=(11, 7.8), sharey="col",
                             layout="constrained")
    for r, rule in enumerate(("A", "B")):
        for c, base in enumerate(B.BASELINES):
            ax = axes[r][c]
            for off, (metric, color) in zip((-0.18, 0.18), (("d1", "#3a6ea5"), ("d2", "#c0392b")),
                                            strict=True):
                sel = d[(d.rule == rule) & (d.metric == metric) & (d.baseline == base)]
                data = [sel[sel.theta == th].IF for th in thetas]
                pos = [k + off for k in range(len(thetas))]
                bp = ax.boxplot(data, positions=pos, widths=0.3, patch_artist=True,
                                showfliers=False, medianprops={"color": "black"})
                for box in bp["boxes"]:
                    box.set_facecolor(color)
                ax.plot([], [], color=color, lw=6, label=metric)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_xticks(range(len(thetas)), [f"{t:g}" for t in thetas])
            ax.set_xlabel("theta (grid units)")
            ax.set_ylabel("improvement factor IF (log)")
            ax.set_title(f"reading {rule}: {_TITLES[base]}", fontsize=8.5)
    for ax in axes.ravel():  # plain numbers on the log axis, at readable values
        lo, hi = ax.get_ylim()
        ticks = _YTICKS if hi / lo < 10 else _YTICKS_DECADES
        ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if lo <= t <= hi]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    C.legend_outside(fig, axes[0][0], ncols=2)
    fig.suptitle(f"Fig 5: IF per random query (eps = {d.eps.min():g}; IF is eps-invariant)",
                 fontsize=10)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df.eps == df.eps.min()]
    return (d.groupby(["rule", "metric", "baseline", "theta"], sort=False).IF
            .agg(["mean", "median", "min", "max"]).add_suffix("_IF").reset_index())


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
