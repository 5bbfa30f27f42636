"""experiments/marginals_bound.py: the symmetrised-bound ceiling checked with explicit projections,
the line lemma's search, and a small full-strategy search (no dprivacy import needed)."""

from __future__ import annotations

import itertools
from functools import reduce

import numpy as np
import pytest

from experiments import marginals_bound as e
from solvers.strategy import marginals as mg


def test_ceiling_strategy_is_feasible_and_its_averaged_gram_allows_2811():
    n = 8
    out = e.gram_only_ceiling(n)
    assert out["max edge ratio"] <= 1 + 1e-12
    # independent: the averaged Gram through explicit Kronecker projections P_S
    codes, I, J, _ = e.instance(n)  # noqa: N806, E741
    s = np.r_[np.ones(n // 2), -np.ones(n // 2)]
    A = np.vstack([0.5 * s[codes[:, 0]] * s[codes[:, 1]], 0.5 * s[codes[:, 2]]])
    X = A.T @ A
    P0 = np.full((n, n), 1.0 / n)  # noqa: N806
    P1 = np.eye(n) - P0  # noqa: N806
    spec = mg.workload_spectrum((n,) * 3, 2)
    mu = {}
    for S in mg.subsets(3):
        PS = reduce(np.kron, [P1 if a in S else P0 for a in range(3)])  # noqa: N806
        mu[S] = float(np.trace(PS @ X)) / spec[S][1]
    # average over the attribute permutations too (the instance is symmetric in them)
    for r in (1, 2):
        group = [S for S in mu if len(S) == r]
        avg = sum(mu[S] for S in group) / len(group)
        for S in group:
            mu[S] = avg
    assert mg.residual_error(spec, mu) == pytest.approx(out["ceiling"], rel=1e-12)
    assert out["ceiling"] < 3072


def test_line_lemma_search_stays_at_floor_n2_over_4():
    for n in (3, 4):
        best = e.line_lemma(n, 5, seed=0)
        assert best <= n * n // 4 + 1e-6
        assert best >= n * n // 4 - 1e-3  # the balanced cut is found


def test_small_search_never_goes_below_the_bound():
    row = e.search(2, 3, seed=0)
    assert row["l2 bound"] <= row["best full-A search"] < np.inf  # a bound is a bound
    assert row["weighted marginals"] == pytest.approx(144.0)  # n = 2: the 3-way table wins
    codes, I, J, F = e.instance(2)  # noqa: N806, E741
    assert len(codes) == 8 and I.size == 12 and F.shape == (12, 8)
    assert list(itertools.chain(*[sorted(np.flatnonzero(r)) for r in F[:1]])) == [0, 1]
