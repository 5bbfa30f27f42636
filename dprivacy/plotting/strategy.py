"""A picture of a strategy design: the standard deviation of every answer, and the strategy.

Left: each query's standard deviation, sorted (the worst queries on the right), with the total
expected squared error and, when known, the certified lower bound in the title. Right: the
strategy matrix A (p measurements x N elements) as a heat map, when it is small enough to draw
(at most :data:`MAX_CELLS` entries), else the l1 norm of each of its columns (every column is
held to the budget by the pair constraints ||A (e_i - e_j)||_1 <= eps_ij).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dprivacy.plotting._mpl import figure, save

#: Strategies with at most this many entries are drawn as a heat map.
MAX_CELLS = 250_000


def plot_strategy(design: Any, workload: Any, *, path: str | os.PathLike | None = None) -> Any:
    """The figure of a :class:`~dprivacy.StrategyDesign` for ``workload`` (module doc); written
    to ``path`` if given. Needs the ``[plot]`` extra."""
    std = np.sqrt(np.maximum(np.asarray(design.query_variances(), dtype=float), 0.0))
    fig, (ax_std, ax_a) = figure(12, 4.8, ncols=2)
    order = np.sort(std)
    ax_std.plot(np.arange(order.size), order, lw=1.2, color="tab:blue")
    ax_std.set_xlabel(f"query (sorted by standard deviation; m = {workload.m})")
    ax_std.set_ylabel("standard deviation of the answer")
    title = f"expected total squared error {float(np.sum(std ** 2)):.4g}"
    if design.lower_bound:
        title += f"\ncertified lower bound {design.lower_bound:.4g}"
    ax_std.set_title(title, fontsize=10)
    C = design.C
    p, K = C.shape
    if p * K <= MAX_CELLS:
        A = np.asarray(design.strategy)
        im = ax_a.imshow(A, aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(im, ax=ax_a, fraction=0.046)
        ax_a.set_xlabel(f"element (N = {A.shape[1]})")
        ax_a.set_ylabel(f"measurement (p = {A.shape[0]})")
        ax_a.set_title(f"strategy A ({design.basis.kind} basis)", fontsize=10)
    else:
        col = np.asarray(abs(C).sum(axis=0)).ravel()
        ax_a.plot(np.arange(col.size), col, lw=0.8, color="tab:green")
        ax_a.set_xlabel(f"coordinate ({design.basis.kind} basis, K = {K})")
        ax_a.set_ylabel("l1 norm of the strategy's column")
        ax_a.set_title(f"strategy: {p} measurements", fontsize=10)
    return save(fig, path)
