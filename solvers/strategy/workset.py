"""Working sets of constraint pairs for the polishing of a strategy over many elements.

With N elements there are N (N - 1) / 2 pair constraints; a gradient step over all of them costs
p N^2 / 2.  For a metric of points the binding pairs of a good strategy are close pairs (on a
grid: the unit neighbours and the diagonals), so the polishing works on the pairs within a small
radius plus the most loaded pairs that an exact scan over ALL pairs finds after every round
(:func:`solvers.strategy.optimize.polish`); the scale of every returned iterate is the exact
maximum over all pairs, so the working set only steers the optimisation, never the privacy.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from solvers.constraints import ConstraintSet
from solvers.errors import SolverError
from solvers.strategy.constraint import PairSet


def near_pairs(coords: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Every pair i < j of points at Euclidean distance <= radius (coordinates as given)."""
    pts = np.asarray(coords, dtype=np.float64).reshape(len(coords), -1)
    P = cKDTree(pts).query_pairs(float(radius) * (1 + 1e-9), output_type="ndarray")
    if P.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    I, J = np.minimum(P[:, 0], P[:, 1]), np.maximum(P[:, 0], P[:, 1])  # noqa: N806, E741
    return I.astype(np.int64), J.astype(np.int64)


def near_working_set(cs: ConstraintSet, coords: np.ndarray, radius: float) -> PairSet:
    """The constrained pairs of ``cs`` among the points within ``radius`` of each other."""
    I, J = near_pairs(coords, radius)  # noqa: N806, E741
    E = cs.pair_eps(I, J)  # noqa: N806
    keep = np.isfinite(E)
    if not keep.any():
        raise SolverError(f"no constrained pair within distance {radius}")
    return PairSet(I[keep], J[keep], E[keep])
