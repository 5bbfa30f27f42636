"""Error against ε: one line per method, log-log (the experiments' error curves)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dprivacy.plotting._mpl import figure, save


def plot_error_curves(table: Any, *, x: str = "eps", y: str = "rmse", by: str = "method",
                      xlabel: str = "ε", ylabel: str = "RMSE", title: str | None = None,
                      path: str | os.PathLike | None = None) -> Any:
    """Error against ε from a long table (a pandas DataFrame with columns ``x``, ``y``, ``by``):
    one line with markers per value of ``by``, log-log axes (Laplace error is ∝ 1/ε, a line of
    slope -1). Returns the ``matplotlib.figure.Figure`` (written to ``path`` when given).

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"eps": [0.1, 1, 0.1, 1], "rmse": [14.1, 1.41, 5.0, 0.5],
    ...                   "method": ["baseline", "baseline", "exact", "exact"]})
    >>> fig = plot_error_curves(t)   # doctest: +SKIP
    """
    fig, ax = figure(6.4, 4.4)
    for name, part in table.groupby(by, sort=False):
        part = part.sort_values(x)
        ax.plot(np.asarray(part[x], float), np.asarray(part[y], float), marker="o", label=str(name))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save(fig, path)
