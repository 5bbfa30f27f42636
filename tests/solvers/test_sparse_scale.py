"""Sparse workloads stay sparse through design and scans; Delta F by sign vectors = pairwise."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

import dprivacy as dp
from solvers.kernel_scan import l1_diameter


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 13), N=st.integers(1, 60), seed=st.integers(0, 10**6),
       density=st.sampled_from([0.05, 0.5, 1.0]))
def test_l1_diameter_equals_pairwise(m, N, seed, density):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(m, N)) * (rng.random((m, N)) < density)
    ref = cdist(F.T, F.T, "cityblock").max() if N > 1 else 0.0
    for G in (F, sp.csr_array(F)):
        assert l1_diameter(G) == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert l1_diameter(F, max_signs=1) == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_workload_sensitivity_is_cached_and_sparse_aware():
    rng = np.random.default_rng(0)
    F = sp.random(5, 2000, density=0.01, format="csr", random_state=1)
    W = dp.Workload(F)
    ref = cdist(F.toarray().T, F.toarray().T, "cityblock").max()
    assert W.sensitivity() == pytest.approx(ref, rel=1e-12)
    assert len(W.__dict__["_sensitivity_cache"]) == 1
    with pytest.raises(ValueError, match="read-only"):  # the workload's F is frozen at the boundary
        W.F.data[:] = rng.random(W.F.nnz) * 100
    F.data[:] = rng.random(F.nnz) * 100  # the caller's matrix may change: W holds its own copy
    assert W.sensitivity() == pytest.approx(ref, rel=1e-12)
    assert len(W.__dict__["_sensitivity_cache"]) == 1


def test_sparse_range_workload_is_never_densified():
    N, m = 200_000, 150
    rng = np.random.default_rng(2)
    U = dp.Universe.from_points(np.sort(rng.random(N))[:, None] * 1000)
    lo = rng.integers(0, N - 500, m)
    hi = lo + rng.integers(1, 500, m)
    rows = np.concatenate([np.full(b - a + 1, k) for k, (a, b) in enumerate(zip(lo, hi, strict=True))])
    cols = np.concatenate([np.arange(a, b + 1) for a, b in zip(lo, hi, strict=True)])
    W = dp.Workload(sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(m, N)))
    M = dp.metrics.Euclidean(1.0)
    tracemalloc.start()
    try:
        d = dp.design(W, U, M, method="closed_form" if m == 1 else "uniform")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    dense_bytes = m * N * 8  # the pruned scans hold per-node row ranges: O(m N / leafsize)
    assert peak < dense_bytes / 2, f"peak {peak / 2**20:.0f} MiB: F was densified"
    # points on a line: the N - 1 gaps are the constraints (a path metric; scans over the edges)
    assert M.constraint_set(U).kind == "edges"
    assert d.report["passes"]["full"] >= 2 and d.report["passes"]["pruned"] == 0
    # the design is private: every pair's ratio is at most 1 (checked at the range ends, which
    # are the only pairs where a column changes; the nearest pairs across each end are tight)
    x = U.coords[:, 0]
    ends = np.unique(np.r_[lo - 1, lo, hi, hi + 1].clip(0, N - 1))
    Fd = W.F.tocsc()[:, ends].toarray()
    loss = sum(uk * np.abs(f[:, None] - f[None, :]) for uk, f in zip(d.u, Fd, strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(loss == 0, 0, loss / np.abs(x[ends][:, None] - x[ends][None, :]))
    assert ratio.max() <= 1 + 1e-12
    assert ratio.max() == pytest.approx(d.report["max_ratio"], rel=1e-12)
