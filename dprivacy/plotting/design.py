"""A picture of a design: noise per query against the ε_min baseline, and its binding pairs.

The privacy condition of a d_X Laplace design is Theorem 1: sum_k u_k |F_ki - F_kj| <= eps_ij
for every constrained pair. The pairs where it holds with equality *bind*: they are the moves
that limit the noise, so they are where a design is worth looking at (for city data: the
closest cities with the most different query coefficients).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dprivacy.plotting._mpl import figure, save

if TYPE_CHECKING:
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe
    from dprivacy.workload import Workload


class DesignLike(Protocol):
    """What a picture reads of a :class:`dprivacy.Design` (the design module calls this one
    from ``Design.plot``, so this one does not import it)."""

    @property
    def beta(self) -> np.ndarray: ...

    @property
    def method(self) -> str: ...

    @property
    def loss(self) -> str: ...

    @property
    def u(self) -> np.ndarray: ...

    @property
    def noise_scale(self) -> np.ndarray: ...


#: A pair binds when its loss is at least this fraction of its budget.
BINDING = 1 - 1e-6
#: Pairs whose loss is at least this fraction of their budget are drawn (shaded by the fraction).
NEAR = 0.5
#: The binding pairs (at most this many) are named on the picture.
ANNOTATED = 3
#: At most this many queries are drawn as bars (the rest are summarised in the title).
MAX_BARS = 40


def binding_pairs(design: DesignLike, workload: Workload, universe: Universe, metric: Metric, *,
                  max_pairs: int = 200, threshold: float = BINDING
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (i, j) whose privacy constraint binds, loss >= ``threshold`` x eps_ij (default
    1 - 1e-6), with their ratio loss / eps_ij, largest first: at most ``max_pairs`` of them, from
    one scan of every constrained pair. A lower ``threshold`` (e.g. 0.5) also returns the pairs
    that come close.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> i, j, r = binding_pairs(dp.design(W, U, M), W, U, M)
    >>> sorted(zip(i.tolist(), j.tolist()))
    [(0, 1)]
    """
    cs = metric.constraint_set(universe)
    res = cs.scan(workload.F, design.u, k=max(int(max_pairs), 1))
    i, j, ratio = (np.asarray(a) for a in res.top)
    keep = ratio >= threshold
    return i[keep].astype(int), j[keep].astype(int), ratio[keep].astype(float)


def _positions(universe: Universe, metric: Metric) -> tuple[np.ndarray, str, str]:
    """2-D positions of the elements and the axis labels: lon/lat for a geodesic metric, the
    first two coordinates of a point universe, else a circle in element order."""
    from dprivacy.metrics.geometric import Geodesic

    xy = universe.coords
    if xy is not None and isinstance(metric, Geodesic):
        return np.c_[xy[:, 1], xy[:, 0]], "longitude (degrees)", "latitude (degrees)"
    if xy is not None and xy.shape[1] >= 2:
        return xy[:, :2], "coordinate 0", "coordinate 1"
    if xy is not None:
        return np.c_[xy[:, 0], np.zeros(universe.N)], "coordinate", ""
    angle = 2 * np.pi * np.arange(universe.N) / max(universe.N, 1)
    return np.c_[np.cos(angle), np.sin(angle)], "", ""


def plot_design(design: DesignLike, workload: Workload, universe: Universe, metric: Metric, *,
                path: str | os.PathLike | None = None, max_pairs: int = 200) -> Any:
    """Two panels: the Laplace noise scale of every query, designed (1/β_k) against the ε_min-DP
    baseline (ΔF/ε_min, log scale, annotated with IF_k), and the universe's elements with the
    pairs whose privacy constraint binds drawn between them (a lon/lat map for a geodesic
    metric; elements on a circle when the universe has no coordinates).

    Returns the ``matplotlib.figure.Figure`` (written to ``path`` when given). Needs the
    ``[plot]`` extra.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]]), dp.metrics.Euclidean(1.0)
    >>> fig = plot_design(dp.design(W, U, M), W, U, M)   # doctest: +SKIP
    """
    workload.check_universe(universe)
    fig, (ax_noise, ax_pairs) = figure(12, 5.2, ncols=2, width_ratios=[1, 1.25])
    _noise_panel(ax_noise, design, workload, universe, metric)
    _pairs_panel(ax_pairs, design, workload, universe, metric, max_pairs)
    fig.suptitle(f"d_X design ({design.method}, {design.loss} loss): N = {universe.N}, "
                 f"m = {workload.m}, {metric!r}", fontsize=10)
    return save(fig, path)


def _noise_panel(ax: Any, design: DesignLike, workload: Workload, universe: Universe,
                 metric: Metric) -> None:
    eps_min, dF = metric.eps_min(universe), workload.sensitivity()
    baseline = dF / eps_min
    names = workload.query_names()[:MAX_BARS]
    designed = design.noise_scale[:MAX_BARS]
    y = np.arange(len(names))[::-1]
    exact = np.isinf(design.beta[:MAX_BARS])
    ax.barh(y + 0.2, np.full(len(names), baseline), height=0.38, color="0.7",
            label=f"ε_min-DP baseline ΔF/ε_min = {baseline:.3g}")
    ax.barh(y[~exact] - 0.2, designed[~exact], height=0.38, color="tab:blue",
            label="d_X design 1/β_k")
    for yk, noise, is_exact in zip(y, designed, exact, strict=True):
        text = "exact (no noise)" if is_exact else f"{noise:.3g}: IF {baseline / noise:.3g}"
        ax.text(baseline * 1.05, yk - 0.2, text, va="center", fontsize=8)
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap within a decade
    shown = designed[~exact & (designed > 0)]
    ax.set_xlim(min(shown.min(), baseline) / 2 if shown.size else baseline / 10, baseline * 5)
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlabel("Laplace noise scale (log)")
    more = f" (first {MAX_BARS} of {workload.m})" if workload.m > MAX_BARS else ""
    ax.set_title(f"noise per query{more}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, ncol=2)


def _pairs_panel(ax: Any, design: DesignLike, workload: Workload, universe: Universe,
                 metric: Metric, max_pairs: int) -> None:
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    pos, xlabel, ylabel = _positions(universe, metric)
    i, j, ratio = binding_pairs(design, workload, universe, metric, max_pairs=max_pairs,
                                threshold=NEAR)
    ax.scatter(pos[:, 0], pos[:, 1], s=6, color="0.7", zorder=1, label=f"{universe.N} elements")
    order = np.argsort(ratio)  # the binding pairs are drawn last, on top
    i, j, ratio = i[order], j[order], ratio[order]
    if i.size:
        segs = np.stack([pos[i], pos[j]], axis=1)
        if universe.coords is not None and universe.coords.shape[1] == 1:  # arcs over a line
            t = np.linspace(0, np.pi, 24)
            mid, half = (segs[:, 0, 0] + segs[:, 1, 0]) / 2, np.abs(segs[:, 1, 0] - segs[:, 0, 0]) / 2
            segs = np.stack([mid[:, None] - half[:, None] * np.cos(t),
                             half[:, None] * np.sin(t)], axis=2)
        binding = ratio >= BINDING
        norm = Normalize(NEAR, 1.0)
        ax.add_collection(LineCollection(list(segs), cmap="Reds", norm=norm, array=ratio, zorder=2,
                                         linewidths=np.where(binding, 2.0, 0.8)))
        mid = (pos[i] + pos[j]) / 2  # a marker per pair: short pairs stay visible on a map
        dots = ax.scatter(mid[:, 0], mid[:, 1], c=ratio, cmap="Reds", norm=norm, s=18,
                          edgecolors="0.3", linewidths=0.3, zorder=3,
                          label=f"{i.size} pairs (marker at the middle)")
        ax.figure.colorbar(dots, ax=ax, shrink=0.8, label="loss / ε_ij of the pair")
        ax.scatter(mid[binding, 0], mid[binding, 1], s=90, facecolors="none",
                   edgecolors="darkred", linewidths=1.5, zorder=4,
                   label=f"{int(binding.sum())} binding (loss = ε_ij)")
        labels = universe.labels()
        named = universe.coords is not None or universe.N > 30  # else every element is named
        for a, b, c in list(zip(i[binding][::-1], j[binding][::-1], mid[binding][::-1],
                                strict=True))[:ANNOTATED if named else 0]:
            ax.annotate(f"{labels[a]} – {labels[b]}", c, fontsize=7, xytext=(8, -12),
                        textcoords="offset points", color="darkred")
    if universe.coords is None:  # a circle in element order: positions mean nothing
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_aspect("equal", adjustable="datalim")
    if universe.coords is None and universe.N <= 30:
        for k, label in enumerate(universe.labels()):
            ax.annotate(label, pos[k], fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    from dprivacy.metrics.geometric import Geodesic

    if universe.coords is not None and isinstance(metric, Geodesic):  # a map: km look alike
        ax.set_aspect(1 / max(np.cos(np.radians(np.mean(universe.coords[:, 0]))), 0.05),
                      adjustable="datalim")
    elif universe.coords is not None and universe.coords.shape[1] >= 2:
        ax.set_aspect("equal", adjustable="datalim")
    capped = f", the {max_pairs} largest" if i.size >= max_pairs else ""
    ax.set_title(f"pairs with loss >= {NEAR:g} ε_ij{capped}: the moves that limit the noise",
                 fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13 if xlabel else -0.02), fontsize=8,
              ncol=3)
