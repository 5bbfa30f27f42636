"""Integer d_X releases: when every coefficient w_k F_ki is an integer, answers are exact integers
and the noise is discrete Laplace (:mod:`dprivacy.discrete_noise`).

Adding a record at element i changes answer k by w_k F_ki, an integer; discrete Laplace noise of
scale 1/β_k on an integer answer loses at most β_k |w_k F_ki| = u_k |F_ki| (the ratio bound of
:mod:`dprivacy.discrete_noise`), exactly as continuous Laplace noise does, so Theorem 1's
condition ``u_k |F_ki - F_kj| <= eps_ij`` and the per-record costs c_i = Σ_k u_k |F_ki| of
:mod:`dprivacy.tables.dx` are unchanged. Which form a release takes depends only on public
numbers (w, F and the scales), never on the records. The answers are computed in int64
(coefficients are at most 2^20 in magnitude, so sums stay below 2^61 for fewer than 2^41
records) or else with Python integers: exactly in both cases.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from dprivacy.discrete_noise import MAX_SCALE, add_integer_noise, integer_coefficients

__all__ = ["integer_matrix", "integer_release"]

_LIMIT = 2**20  # largest |w_k F_ki| of the integer form
_RECORDS = 2**41  # int64 sums are exact below 2^20 · 2^41 = 2^61


def integer_matrix(F: Any, w: np.ndarray, scale: np.ndarray) -> Any:
    """The int64 matrix w ⊙ F (dense or CSR like F) if every product is exactly an integer of
    magnitude <= 2^20 and every scale is at most the discrete sampler's maximum; else None."""
    sc = np.asarray(scale, dtype=float)
    if np.any(sc > MAX_SCALE) or not integer_coefficients(w, F, _LIMIT):
        return None
    w = np.asarray(w, dtype=float)
    if sp.issparse(F):
        A = sp.csr_array(cast(Any, F), dtype=cast(Any, float), copy=True)
        A.data *= np.repeat(w, np.diff(A.indptr))
        return sp.csr_array(A, dtype=cast(Any, np.int64))
    A = (w[:, None] * np.asarray(F, dtype=float)).astype(np.int64)
    if np.count_nonzero(A) <= A.size // 4:  # mostly zeros (e.g. an identity): CSR
        return sp.csr_array(A)
    return A


def integer_release(A: Any, x: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """A x + noise, exactly, for an integer histogram x and int64 noise (int64 arithmetic, or
    Python integers for huge totals), as floats (exact below 2^53 in magnitude)."""
    xi = np.asarray(x, dtype=np.int64)
    if int(xi.sum()) < _RECORDS:
        return add_integer_noise(np.asarray(A @ xi, dtype=np.int64).ravel(), noise)
    dense = cast(Any, A).toarray() if sp.issparse(A) else np.asarray(A)
    exact = [sum(int(a) * int(b) for a, b in zip(row, xi, strict=True)) for row in dense]
    return np.array([float(v + int(z)) for v, z in zip(exact, np.ravel(noise), strict=True)])
