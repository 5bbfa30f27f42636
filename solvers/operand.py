"""The query matrix F as the scans see it: dense (m, N) float, or scipy.sparse CSC kept sparse.

Large sparse workloads (range counts, marginals over N = 10^6 elements) are never densified as a
whole: scans gather only the columns of the pairs they look at (:func:`take`). Privacy condition
the scans check (Theorem 1): ``sum_k u_k |F_ki - F_kj| <= eps_ij``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np
import scipy.sparse as sp

from solvers.errors import SolverError

if TYPE_CHECKING:
    from scipy.sparse._base import _spbase

#: The query matrix as solvers take it: dense (m, N) or CSC.
QueryMatrix: TypeAlias = "np.ndarray | sp.csc_array"
#: Sparse workloads with at most this many cells are densified (cheaper to scan dense).
DENSIFY_CELLS = 2**22


def as_operand(F: object, N: int | None = None, *, densify_cells: int = DENSIFY_CELLS
               ) -> np.ndarray | sp.csc_array:
    """F as a finite float dense (m, N) array, or a CSC array when sparse and larger than
    ``densify_cells`` cells. Raises SolverError on bad shapes or non-finite entries.

    Examples
    --------
    >>> as_operand([1.0, 2.0]).shape
    (1, 2)
    """
    if sp.issparse(F):
        S = cast("_spbase", F)
        if S.ndim != 2:
            raise SolverError(f"F must be 2-D (m, N), got shape {S.shape}")
        if S.shape[0] * S.shape[1] > densify_cells:
            C = sp.csc_array(S, dtype=float, copy=True)  # our own: sum_duplicates is in place
            _check_shape(C.shape, N)
            if not np.isfinite(C.data).all():
                raise SolverError("F contains NaN or infinite entries")
            C.sum_duplicates()
            return C
        F = S.toarray()
    try:
        A = np.asarray(F, dtype=float)
    except (TypeError, ValueError) as exc:
        raise SolverError(f"F must be a numeric (m, N) array: {exc}") from exc
    if A.ndim == 1:
        A = A[None, :]
    if A.ndim != 2:
        raise SolverError(f"F must be 2-D (m, N), got shape {A.shape}")
    _check_shape(A.shape, N)
    if not np.isfinite(A).all():
        raise SolverError("F contains NaN or infinite entries")
    return A


def _check_shape(shape: tuple[int, ...], N: int | None) -> None:
    if N is not None and shape[1] != N:
        raise SolverError(f"F has {shape[1]} columns but the constraint set has N = {N}")
    if shape[0] == 0:
        raise SolverError("F has no rows (m = 0)")


def take(F: np.ndarray | sp.csc_array, idx: np.ndarray) -> np.ndarray:
    """Dense columns ``F[:, idx]`` of shape (m, len(idx))."""
    if isinstance(F, np.ndarray):
        return F[:, idx]
    return F[:, np.asarray(idx, dtype=np.int64)].toarray()


def take_range(F: np.ndarray | sp.csc_array, r0: int, r1: int) -> np.ndarray:
    """Dense column range ``F[:, r0:r1]``."""
    if isinstance(F, np.ndarray):
        return F[:, r0:r1]
    return F[:, r0:r1].toarray()


def rows(F: np.ndarray | sp.csc_array, sel: np.ndarray) -> np.ndarray | sp.csc_array:
    """The query rows ``F[sel]`` (same kind)."""
    if isinstance(F, np.ndarray):
        return F[sel]
    return sp.csc_array(F.tocsr()[np.asarray(sel)])


def row_absmax(F: np.ndarray | sp.csc_array) -> np.ndarray:
    """``||F_k||_inf`` per row, shape (m,)."""
    if isinstance(F, np.ndarray):
        return np.abs(F).max(axis=1)
    return np.asarray(abs(F).max(axis=1).toarray()).ravel()


def segment_minmax(F: np.ndarray | sp.csc_array, perm: np.ndarray, starts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, min and max of F over the column segments ``perm[starts[s]:starts[s+1]]``
    (the last one runs to the end); shapes (m, S). Sparse F: implicit zeros count."""
    m, N = F.shape
    if isinstance(F, np.ndarray):  # one row at a time: O(N) temporaries, not a copy of F
        lo = np.empty((m, starts.size), F.dtype)
        hi = np.empty((m, starts.size), F.dtype)
        for k in range(m):
            rp = F[k][perm]
            lo[k] = np.minimum.reduceat(rp, starts)
            hi[k] = np.maximum.reduceat(rp, starts)
        return lo, hi
    R = sp.csr_array(F)
    lo = np.empty((m, starts.size))
    hi = np.empty((m, starts.size))
    row = np.zeros(N)
    for k in range(m):  # one dense row at a time: O(N) memory, never the (m, N) matrix
        a, b = R.indptr[k], R.indptr[k + 1]
        row[R.indices[a:b]] = R.data[a:b]
        rp = row[perm]
        lo[k] = np.minimum.reduceat(rp, starts)
        hi[k] = np.maximum.reduceat(rp, starts)
        row[R.indices[a:b]] = 0.0
    return lo, hi
