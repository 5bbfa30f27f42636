"""A heat map of a local randomiser: T[x, z] = Pr[report z | true value x]."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from dprivacy.plotting._mpl import figure, save

#: Tick labels are written only up to this many rows / columns.
MAX_LABELS = 30


def plot_randomiser(T: Any, inputs: Sequence[Any] | None = None,  # noqa: N803 (the paper's T)
                    outputs: Sequence[Any] | None = None, *, title: str | None = None,
                    path: str | os.PathLike | None = None) -> Any:
    """Heat map of a right-stochastic matrix ``T`` (rows: true inputs, columns: reports).

    ``T`` is an array or a :class:`~dprivacy.local.MatrixRandomiser` (whose labels are used).
    The title gives the randomiser's cost ln max_z max_x T[x,z] / min_x' T[x',z] (Paper IV
    Def. 3). Returns the ``matplotlib.figure.Figure`` (written to ``path`` when given). Needs the
    ``[plot]`` extra.

    Examples
    --------
    >>> fig = plot_randomiser([[0.75, 0.25], [0.25, 0.75]], ["yes", "no"], ["yes", "no"])  # doctest: +SKIP
    """
    from dprivacy.local.cost import cost as matrix_cost
    from dprivacy.local.cost import validate_stochastic

    if hasattr(T, "matrix"):
        inputs = T.inputs if inputs is None else inputs
        outputs = T.outputs if outputs is None else outputs
        T = T.matrix  # noqa: N806
    M = validate_stochastic(T)  # noqa: N806
    n_in, n_out = M.shape
    side = min(max(4.0, 0.35 * max(n_in, n_out) + 2), 10.0)
    fig, ax = figure(side + 1.2, side)
    im = ax.imshow(M, cmap="viridis", vmin=0, aspect="auto", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="Pr[report | true value]")
    for axis, n, labels, name in ((ax.yaxis, n_in, inputs, "true value x"),
                                  (ax.xaxis, n_out, outputs, "report z")):
        if n <= MAX_LABELS:
            axis.set_ticks(np.arange(n), [str(v) for v in (labels or range(n))], fontsize=8)
        axis.set_label_text(name)
    if n_in <= 12 and n_out <= 12:
        for x in range(n_in):
            for z in range(n_out):
                ax.text(z, x, f"{M[x, z]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if M[x, z] < 0.6 * M.max() else "black")
    cost = matrix_cost(M)
    ax.set_title(title or f"randomiser T ({n_in} x {n_out}), cost ln max ratio = {cost:.4g}",
                 fontsize=10)
    return save(fig, path)
