"""All ranges of an evenly spaced line: the optimal Gaussian strategy in closed form.

In the edge coordinates of the line, ``s_k = sum_{i > k} x_i`` (k = 0 .. K-1, K = N - 1), a range
[a, b] is ``s_{a-1} - s_b`` (with s_{-1} = n known and s_{N-1} = 0), so the Gram matrix of all
N (N + 1) / 2 ranges (the total known) is ``G_s = (K + 2) I - 1 1'`` (every pair of edges once, and
every edge once more from each end), and moving a record from i to j < ... changes s by the
indicator 1_I of the edges between them.  The Gaussian program (docs/theory.md, "Optimal Gaussian
strategies") reads ``min tr(G_s Y^-1)`` subject to ``1_I' Y 1_I <= b(|I|)`` for every interval I.

Weights lam on the edges only (L = lam I) give the Lagrangian minimiser ``Y = G_s^1/2 / c`` and
the bound ``(tr G_s^1/2)^2 / (K b(1))``.  Its interval sums are
``q(l) = sqrt(K + 2) (l - l^2 / K) + sqrt(2) l^2 / K``, so ``q(l) / l`` decreases in the length l:
when the budget grows at least linearly (``b(l) >= l b(1)``: rho-zCDP per unit of distance, or
the analytic-Gaussian budgets of a per-pair (eps l, delta)), only the edges are tight and the
primal error ``tr(G_s^1/2) max_l q(l) / b(l)`` equals the bound: the strategy is optimal, with a
certificate, at any N (no eigendecomposition).  The strategy in element coordinates is
``A = c^-1/2 (alpha [i > k] + beta i) P`` (rows k, columns i; P centres each row: the total
is known) with ``G_s^1/4 = alpha I + beta 1 1'``.
numpy only; never imports dprivacy.
"""

from __future__ import annotations

import time

import numpy as np

from solvers.errors import SolverError
from solvers.strategy.gaussian import SAFETY, GaussianSolution


def interval_sums(N: int) -> np.ndarray:  # noqa: N803
    """q(l) = 1_I' G_s^1/2 1_I for interval lengths l = 0 .. N - 1 (module doc)."""
    K = N - 1  # noqa: N806
    ell = np.arange(N, dtype=np.float64)
    return np.sqrt(K + 2.0) * (ell - ell**2 / K) + np.sqrt(2.0) * ell**2 / K


def line_ranges_strategy(N: int, budget: np.ndarray) -> GaussianSolution:  # noqa: N803
    """The optimal Gaussian strategy for all ranges of a line of N evenly spaced points.

    ``budget[l]`` (l = 1 .. N - 1; entry 0 unused) bounds ``||A (e_i - e_j)||_2^2`` for
    ``|i - j| = l``.  Returns a :class:`GaussianSolution` whose ``error`` is the total squared
    error with unit-variance rows and ``bound`` the edge-weight dual bound; the gap is 0 (up
    to rounding) whenever ``budget[l] >= l budget[1]``, and reported as it is otherwise.
    """
    t0 = time.perf_counter()
    N = int(N)  # noqa: N806
    b = np.asarray(budget, dtype=np.float64)
    if N < 3 or b.shape != (N,):
        raise SolverError(f"need N >= 3 and a budget for every length 0 .. N - 1, got N = {N} "
                          f"and shape {b.shape}")
    if not (np.all(b[1:] > 0) and np.all(~np.isnan(b[1:]))):
        raise SolverError("every interval budget must be positive")
    K = N - 1  # noqa: N806
    q = interval_sums(N)
    ratio = q[1:] / b[1:]
    c = float(ratio.max()) * (1.0 + SAFETY)
    trace_half = (K - 1) * np.sqrt(K + 2.0) + np.sqrt(2.0)
    error = c * trace_half
    bound = trace_half**2 / (K * float(b[1]))
    alpha = (K + 2.0) ** 0.25
    beta = (2.0**0.25 - alpha) / K
    k = np.arange(K)[:, None]
    i = np.arange(N)[None, :]
    A = (alpha * (i > k) + beta * i) / np.sqrt(c)
    A -= A.mean(axis=1, keepdims=True)  # the total is known: only A P matters (same pair norms)
    mu = np.zeros((0, 0))  # the weights are uniform on the edges; not materialised
    return GaussianSolution(A, float(error), float(min(bound, error)), float(ratio.max() / c),
                            1, time.perf_counter() - t0, mu, [])
