"""Fig 5: distribution of the improvement factor under the Blowfish threshold metrics (§4.4).

Per query: IF = (Delta f / eps_min) / (1 / beta*) for the d_X Laplace mechanism with the closed-form
beta* (spec §3.8-§3.9), for both threshold readings A and B, d_theta^1 and d_theta^2, several theta
and two eps (IF must not depend on eps: both metrics scale linearly in eps).
Target T9 (spec §7.2): IF similar at high theta; at low theta IF under d^1 > IF under d^2.
Privacy condition of every design: beta* |f_i - f_j| <= d_theta(i, j) for every constrained pair.

Run:  python -m experiments.fig5_blowfish_if [--quick] [--seed S]
Output columns: rule, metric, theta, eps, query, IF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments import _blowfish as B
from experiments import _common as C

NAME = "fig5_blowfish_if"
COLUMNS = ["rule", "metric", "theta", "eps", "query", "IF"]


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    """Per-query IF for every (rule, metric, theta, eps)."""
    df = B.table(quick, seed)[COLUMNS]
    C.write_csv(df, outdir, NAME)
    _plot(df, outdir)
    return df


def _plot(df: pd.DataFrame, outdir: Path) -> None:
    d = df[df.eps == df.eps.min()]
    thetas = sorted(d.theta.unique())
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, rule in zip(axes, ("A", "B"), strict=True):
        for off, (metric, color) in zip((-0.18, 0.18), (("d1", "#3a6ea5"), ("d2", "#c0392b")),
                                        strict=True):
            data = [d[(d.rule == rule) & (d.metric == metric) & (d.theta == th)].IF for th in thetas]
            pos = [k + off for k in range(len(thetas))]
            bp = ax.boxplot(data, positions=pos, widths=0.3, patch_artist=True, showfliers=False)
            for box in bp["boxes"]:
                box.set_facecolor(color)
            ax.plot([], [], color=color, lw=6, label=metric)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(range(len(thetas)), [f"{t:g}" for t in thetas])
        ax.set_xlabel("theta (grid units)")
        ax.set_title(f"Fig 5: IF per query, reading {rule}", fontsize=10)
    axes[0].set_ylabel("improvement factor IF")
    axes[1].legend(fontsize=8)
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df.eps == df.eps.min()]
    return (d.groupby(["rule", "metric", "theta"]).IF
            .agg(["mean", "median", "min", "max"]).add_suffix("_IF").reset_index())


if __name__ == "__main__":
    C.main(NAME, __doc__, run, summarize, sys.argv[1:])
