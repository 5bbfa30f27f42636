"""Marginal workloads under an attribute-weighted metric in the residual (ANOVA) algebra.

Universe ``[n_1] x ... x [n_k]``, metric ``d(x, x') = sum_l eps_l 1[x_l != x'_l]`` (its edges are
the pairs that differ in one attribute; every pair is a path of such edges), workload: every
marginal over ``order`` attributes.  With ``P0 = J/n`` and ``P1 = I - J/n`` on each attribute, the
projections ``P_S = (x)_{l in S} P1 (x)_{l not in S} P0`` onto the residual subspaces V_S
(dimension ``d_S = prod_{l in S} (n_l - 1)``) diagonalise every Gram matrix that is invariant
under permuting the values of each attribute (the residual / Fourier basis of marginals:
Barak et al., PODS 2007; ResidualPlanner, Xiao et al., 2023).  The workload's Gram is
``sum_S lam_S P_S`` with ``lam_S = sum_{T >= S, |T| = order} prod_{l not in T} n_l``, and a
strategy whose Gram is ``sum_S mu_S P_S`` has expected total squared error
``2 sum_{S != {}} lam_S d_S / mu_S`` (the total, S = {}, is known exactly).

* :func:`marginal_strategy_error` / :func:`best_weighted_marginals`: HDMM's weighted-marginal
  family (McKenna et al., PVLDB 2018) under the d_X constraint, in closed form: the marginal over
  T with weight theta_T has Gram ``theta_T^2 prod_{l not in T} n_l`` on every S within T, and a
  move in attribute l changes two cells of every marginal that contains l.
* :func:`l2_bound`: the l2 relaxation (``||v||_2 <= ||v||_1``) solved exactly through its dual;
  every dual point is a valid lower bound on the error of EVERY strategy (not only the
  marginal family), because the relaxation is convex and invariant, so an optimal relaxed Gram
  lies in the algebra.

numpy / scipy only; never imports dprivacy.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from solvers.errors import SolverError

Subset = tuple[int, ...]


def subsets(k: int) -> list[Subset]:
    """Every subset of range(k) as a sorted tuple, by size."""
    return [S for r in range(k + 1) for S in itertools.combinations(range(k), r)]


def _check(domains: Sequence[int], order: int) -> tuple[int, ...]:
    n = tuple(int(v) for v in domains)
    if not n or min(n) < 2:
        raise SolverError(f"every attribute needs at least 2 values, got domains {n}")
    if not 1 <= int(order) <= len(n):
        raise SolverError(f"order must be in 1..{len(n)}, got {order}")
    return n


def workload_spectrum(domains: Sequence[int], order: int) -> dict[Subset, tuple[float, int]]:
    """{S: (lam_S, d_S)} for the workload of every ``order``-way marginal (module doc)."""
    n = _check(domains, order)
    k = len(n)
    out = {}
    for S in subsets(k):
        lam = sum(float(np.prod([n[m] for m in range(k) if m not in T]))
                  for T in itertools.combinations(range(k), order) if set(S) <= set(T))
        out[S] = (lam, int(np.prod([n[m] - 1 for m in S])))
    return out


def marginal_gram(domains: Sequence[int], theta: dict[Subset, float]) -> dict[Subset, float]:
    """{S: mu_S} of the strategy that stacks the T-marginals scaled by theta_T."""
    n = tuple(int(v) for v in domains)
    k = len(n)
    mu = {S: 0.0 for S in subsets(k)}
    for T, t in theta.items():
        w = float(t) ** 2 * float(np.prod([n[m] for m in range(k) if m not in T]))
        for S in subsets(k):
            if set(S) <= set(T):
                mu[S] += w
    return mu


def residual_error(spectrum: dict[Subset, tuple[float, int]], mu: dict[Subset, float]) -> float:
    """2 sum_{S != {}} lam_S d_S / mu_S (inf when a needed mu_S is 0)."""
    tot = 0.0
    for S, (lam, d) in spectrum.items():
        if not S or lam == 0:
            continue
        if mu.get(S, 0.0) <= 0:
            return float("inf")
        tot += lam * d / mu[S]
    return 2.0 * tot


def marginal_cost(domains: Sequence[int], theta: dict[Subset, float], eps: Sequence[float]) -> float:
    """max_l (2 sum_{T containing l} theta_T) / eps_l: the d_X constraint value of the stack."""
    k = len(domains)
    return max(2.0 * sum(t for T, t in theta.items() if a in T) / float(eps[a]) for a in range(k))


def marginal_strategy_error(domains: Sequence[int], order: int, theta: dict[Subset, float],
                            eps: Sequence[float]) -> float:
    """Expected total squared error of the weighted-marginal stack scaled to the budget."""
    c = marginal_cost(domains, theta, eps)
    mu = marginal_gram(domains, {T: t / c for T, t in theta.items()})
    return residual_error(workload_spectrum(domains, order), mu)


def best_weighted_marginals(domains: Sequence[int], order: int, eps: Sequence[float],
                            starts: int = 8, seed: int = 0) -> tuple[dict[Subset, float], float]:
    """The weighted-marginal strategy of least error (local search from several starts over the
    2^k - 1 weights; scale-free, so the result is exactly at the budget)."""
    from scipy.optimize import minimize

    n = _check(domains, order)
    k = len(n)
    Ss = subsets(k)  # noqa: N806
    Ts = Ss[1:]  # noqa: N806
    spec = workload_spectrum(n, order)
    need = [j for j, S in enumerate(Ss) if S and spec[S][0] > 0]
    ld = np.array([spec[Ss[j]][0] * spec[Ss[j]][1] for j in need])
    # mu = theta^2 @ W, W[T, S] = prod_{l not in T} n_l [S within T]; cost_l = 2 theta @ H[:, l]
    W = np.array([[float(np.prod([n[m] for m in range(k) if m not in T])) * (set(S) <= set(T))  # noqa: N806
                   for S in Ss] for T in Ts])[:, need]
    H = np.array([[2.0 * (a in T) / float(eps[a]) for a in range(k)] for T in Ts])  # noqa: N806

    def f(z: np.ndarray) -> float:
        t = np.exp(z)
        t = t / float((t @ H).max())
        mu = (t * t) @ W
        return float(np.log(2.0 * np.sum(ld / mu))) if np.all(mu > 0) else 1e300

    rng = np.random.default_rng(seed)
    cands = [np.array([0.0 if len(T) == order else -8.0 for T in Ts]), np.zeros(len(Ts))]
    cands += [rng.normal(0.0, 2.0, len(Ts)) for _ in range(max(0, starts - 2))]
    best_z, best_v = cands[0], f(cands[0])
    for z0 in cands:
        res = minimize(f, z0, method="Nelder-Mead",
                       options={"maxfev": 4000, "xatol": 1e-9, "fatol": 1e-12})
        if res.fun < best_v:
            best_z, best_v = res.x, float(res.fun)
    theta = dict(zip(Ts, np.exp(best_z), strict=True))
    c = marginal_cost(n, theta, eps)
    theta = {T: t / c for T, t in theta.items()}
    return theta, marginal_strategy_error(n, order, theta, eps)


def edge_weights(domains: Sequence[int]) -> np.ndarray:
    """q[l, S] = ||P_S (e_x - e_y) (x) e_u||^2 for a move in attribute l (the same for every such
    move): 2 prod_{m in S, m != l} (n_m - 1)/n_m prod_{m not in S, m != l} 1/n_m if l in S, else 0.
    Columns follow :func:`subsets`."""
    n = tuple(int(v) for v in domains)
    k = len(n)
    Ss = subsets(k)
    q = np.zeros((k, len(Ss)))
    for a in range(k):
        for j, S in enumerate(Ss):
            if a in S:
                q[a, j] = 2.0 * np.prod([(n[m] - 1) / n[m] for m in S if m != a]) * \
                    np.prod([1.0 / n[m] for m in range(k) if m not in S])
    return q


def _dual_terms(domains: Sequence[int], order: int) -> tuple[np.ndarray, np.ndarray]:
    """(q restricted to the needed subsets, lam_S d_S of those subsets)."""
    n = _check(domains, order)
    spec = workload_spectrum(n, order)
    Ss = subsets(len(n))  # noqa: N806
    need = [j for j, S in enumerate(Ss) if S and spec[S][0] > 0]
    ld = np.array([spec[Ss[j]][0] * spec[Ss[j]][1] for j in need])
    return edge_weights(n)[:, need], ld


def l2_dual(domains: Sequence[int], order: int, eps: Sequence[float], nu: np.ndarray,
            line_factor: Sequence[float] | None = None) -> float:
    """The dual value at nu >= 0 of the l2 relaxation: a lower bound on the error of every
    strategy.  ``line_factor[l]`` (default 1) scales the per-edge l2 budget eps_l^2; values < 1
    are valid only under an extra lemma (see :func:`l2_bound`)."""
    q, ld = _dual_terms(domains, order)
    return _dual(q, ld, np.asarray(eps, dtype=np.float64), nu, line_factor)


def _dual(q: np.ndarray, ld: np.ndarray, eps: np.ndarray, nu: np.ndarray,
          line_factor: Sequence[float] | None) -> float:
    nu = np.clip(np.asarray(nu, dtype=np.float64), 0.0, None)
    lf = np.ones(q.shape[0]) if line_factor is None else np.asarray(line_factor, dtype=np.float64)
    a = nu @ q  # a_S = sum_l nu_l q_lS; min over mu > 0 of 2 lam d / mu + a mu = 2 sqrt(2 lam d a)
    return float(np.sum(2.0 * np.sqrt(2.0 * ld * a)) - np.sum(nu * lf * eps ** 2))


def l2_primal(domains: Sequence[int], order: int, eps: Sequence[float], nu: np.ndarray
              ) -> dict[Subset, float]:
    """The relaxed Gram {S: mu_S} that minimises the Lagrangian at nu (mu_S = sqrt(2 lam_S d_S /
    a_S)); at the dual optimum it is the relaxation's optimal Gram."""
    n = _check(domains, order)
    spec = workload_spectrum(n, order)
    Ss = subsets(len(n))  # noqa: N806
    a = np.clip(np.asarray(nu, dtype=np.float64), 0.0, None) @ edge_weights(n)
    return {S: float(np.sqrt(2.0 * spec[S][0] * spec[S][1] / a[j])) if a[j] > 0 else float("inf")
            for j, S in enumerate(Ss) if S and spec[S][0] > 0}


def l2_bound(domains: Sequence[int], order: int, eps: Sequence[float],
             line_factor: Sequence[float] | None = None) -> tuple[float, np.ndarray]:
    """Lower bound on the expected total squared error of every d_X-private strategy for all
    ``order``-way marginals, and the dual point nu that certifies it: the optimum of the l2
    relaxation ``||A b||_2 <= eps`` on every edge b, through its concave k-variable dual.  A
    relaxed optimum may be averaged over the value permutations of each attribute (the
    relaxation and the workload are invariant and the error is convex in A'A), so it is
    ``sum_S mu_S P_S`` and only k constraints remain.

    ``line_factor[l] = kappa / C(n_l, 2)`` tightens the budget to what a line of attribute l (its
    n_l values, the others fixed; every pair an edge) can carry in total: sum over the line's
    pairs of ||A b||_2^2 <= kappa eps_l^2.  kappa = C(n, 2) (factor 1) always holds; kappa =
    floor(n^2 / 4) is attained by a balanced cut and is the numerically observed maximum, not a
    proven one: a bound computed with it is conditional on that lemma."""
    from scipy.optimize import minimize

    q, ld = _dual_terms(domains, order)
    e = np.asarray(eps, dtype=np.float64)
    k = q.shape[0]

    def neg(z: np.ndarray) -> float:
        return -_dual(q, ld, e, np.exp(z), line_factor)

    best = None
    for z0 in (np.zeros(k), np.full(k, 3.0), np.full(k, -3.0)):
        res = minimize(neg, z0, method="Nelder-Mead",
                       options={"maxfev": 4000, "xatol": 1e-10, "fatol": 1e-12})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    return -float(best.fun), np.exp(best.x)
