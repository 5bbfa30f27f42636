"""The paper's multi-query heuristics (paper §4.2, Strategies 1-3 and Algorithm 3), all with w = 1.

Privacy condition (Theorem 1): ``sum_k beta_k |F_ki - F_kj| <= eps_ij`` for every pair.
Rows with Lipschitz constant c_k = 0 (constant, or separated only by eps = inf pairs) are answered
exactly (beta_k = inf) and excluded from the sharing, as Algorithm 3 prescribes for constant rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from solvers.closed_form import inverse_or_inf
from solvers.constraints import Block, ConstraintSet
from solvers.operand import QueryMatrix, rows
from solvers.verify import Draft

BlockSource = Callable[[], Iterable[Block]]


def block_source(F: QueryMatrix, cs: ConstraintSet, memory_bytes: int
                 ) -> tuple[BlockSource, bool]:
    """A re-iterable source of pair blocks: materialised once if all blocks fit in a quarter of
    the memory budget (repeated passes then skip recomputing |F_ki - F_kj|), else streamed.
    Returns (source, cached)."""
    m, N = F.shape
    pairs = cs.n_constraints if cs.kind == "edges" else N * (N + 1) // 2
    if pairs * (m + 1) * 8 * 4 <= memory_bytes and pairs <= 2**25:
        cached = list(cs.blocks(F, memory_bytes))
        return (lambda: cached), True
    return (lambda: cs.blocks(F, memory_bytes)), False


def equal_split(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray) -> Draft:
    """Strategy 1: ``beta_k = (1/m') min_ij eps_ij / |F_ki - F_kj| = 1 / (m' c_k)`` over the m'
    queries that need noise. Feasible: each query spends at most eps_ij / m' on every pair."""
    act = c > 0
    m_act = max(int(act.sum()), 1)
    return Draft(u=inverse_or_inf(c * m_act), n_used=cs.n_constraints,
                 notes=[f"budget split equally over {m_act} noisy queries"])


def uniform(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, memory_bytes: int) -> Draft:
    """Strategy 2: one precision for all, ``beta_k = min_ij eps_ij / Delta_ij F``."""
    act = c > 0
    if not act.any():
        return Draft(u=np.full(F.shape[0], np.inf), n_used=cs.n_constraints)
    sc = cs.scan(F, act.astype(float), memory_bytes=memory_bytes)
    u = np.where(act, 1.0 / sc.max_ratio, np.inf)
    return Draft(u=u, n_used=cs.n_constraints, extra={"tight_pair": sc.worst})


def budget_sharing(F: QueryMatrix, cs: ConstraintSet, c: np.ndarray, memory_bytes: int,
                   T: int = 50) -> Draft:
    """Algorithm 3 (Strategy 3), exactly as Algorithm 3 reads, with remaining budget
    ``eps~ = eps - sum_k beta_k |F_ki - F_kj|`` (beta accumulated so far). Per round t:

    1. ``bhat_k = min_{ij: F_ki != F_kj} eps~_ij / |F_ki - F_kj|``;
    2. ``eps^(k)_ij = eps~_ij bhat_k |F_ki - F_kj| / S_ij``, ``S_ij = sum_k' bhat_k' |F_k'i - F_k'j|``
       (requirement-proportional share);
    3. ``beta^(t)_k = min_{ij: F_ki != F_kj} eps^(k)_ij / |F_ki - F_kj|
       = bhat_k * min_{ij: F_ki != F_kj} eps~_ij / S_ij`` (identical algebraically; the minimum
       runs over the pairs query k separates, so the factor is per query, not one global c_t);
    4. ``eps~ -= sum_k beta^(t)_k |F_ki - F_kj|``;  5. ``beta += beta^(t)``.

    Stops when t > T or ``max_k beta^(t)_k <= 1e-12 max_k beta_k``. Each round exhausts at least
    one pair, so the loop ends after at most m rounds in exact arithmetic.

    NOT the tempting "simplification" that steps 2-3 collapse to ``beta^(t) = c_t bhat``
    with ONE global ``c_t = min_ij eps~_ij / S_ij``. That holds only if every query's minimum in
    step 3 runs over all pairs; in Algorithm 3 it runs over the pairs query k separates
    (``F_ki != F_kj``), so the factor ``c_t^(k) = min_{ij: F_ki != F_kj} eps~_ij / S_ij`` is
    per query and ``>= c_t`` (strictly larger for queries that do not separate the bottleneck
    pair, e.g. binary rows). This implements the literal steps 1-5 (per-query factor); the
    global-c_t variant is a different, more conservative heuristic and gives other numbers.
    """
    m = F.shape[0]
    act = np.flatnonzero(c > 0)
    beta = np.zeros(m)
    if act.size == 0:
        return Draft(u=np.full(m, np.inf), iterations=0, n_used=cs.n_constraints)
    source, cached = block_source(rows(F, act), cs, memory_bytes)
    B = np.zeros(act.size)
    rounds = 0
    status = "round_limit"
    for _ in range(int(T)):
        rounds += 1
        bhat = np.full(act.size, np.inf)
        rems: dict[int, np.ndarray] = {}
        for idx, b in enumerate(source()):
            rem = _remaining(b, B)
            if cached:
                rems[idx] = rem
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.divide(rem, b.ad, out=np.full(b.ad.shape, np.inf), where=b.ad > 0)
            bhat = np.minimum(bhat, q.reshape(act.size, -1).min(axis=1, initial=np.inf))
        bhat = np.where(np.isfinite(bhat), bhat, 0.0)
        if bhat.max() <= 0:
            status = "exhausted"
            rounds -= 1
            break
        share = np.full(act.size, np.inf)
        for idx, b in enumerate(source()):
            rem = rems.pop(idx) if cached else _remaining(b, B)
            S = np.tensordot(bhat, b.ad, axes=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.divide(rem, S, out=np.full(S.shape, np.inf), where=S > 0)
            sel = np.where(b.ad > 0, r[None], np.inf).reshape(act.size, -1)
            share = np.minimum(share, sel.min(axis=1, initial=np.inf))
        step = np.where(bhat > 0, bhat * np.where(np.isfinite(share), share, 0.0), 0.0)
        B = B + step
        if step.max() <= 1e-12 * B.max():
            status = "converged"
            break
    beta[act] = B
    u = np.where(c > 0, beta, np.inf)
    return Draft(u=u, iterations=rounds, n_used=cs.n_constraints, status=status,
                 extra={"T": int(T)})


def _remaining(b: Block, B: np.ndarray) -> np.ndarray:
    """``max(eps - sum_k B_k |F_ki - F_kj|, 0)`` on a block (+inf stays +inf)."""
    spent = np.tensordot(B, b.ad, axes=1)
    return np.maximum(b.eps - spent, 0.0)
