"""The exact (w, beta) design of a workload too large for its working set refuses at once, naming
the strategy route, instead of running for minutes into an out-of-memory kill."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp

import dprivacy as dp
from dprivacy.errors import DPrivacyError
from dprivacy.implicit_workload import ImplicitWorkload


def test_all_rectangles_of_24x24_are_refused_quickly_with_the_strategy_route():
    grid = np.array([[a, b] for a in range(24) for b in range(24)], dtype=float)
    U = dp.Universe.from_points(grid)
    R = ImplicitWorkload.all_ranges(24).to_workload().F  # the 300 ranges of 24 points
    W = dp.Workload(sp.csr_array(sp.kron(R, R)))  # every rectangle: 90 000 x 576, sparse
    assert W.m == ImplicitWorkload.all_rectangles(24, 24).m == 90_000
    M = dp.metrics.Euclidean(1.0)
    t0 = time.perf_counter()
    with pytest.raises(DPrivacyError) as exc:
        dp.design(W, U, M, method="exact")
    took = time.perf_counter() - t0
    msg = str(exc.value)
    assert "--method strategy" in msg and "design_strategy" in msg and "GiB" in msg
    assert took < 10, took


def test_a_workload_within_the_limit_still_designs():
    U = dp.Universe.from_points(np.arange(12.0)[:, None])
    W = dp.Workload.range_queries(12, count=30, rng=0)
    d = dp.design(W, U, dp.metrics.Euclidean(0.5), method="exact")
    assert d.max_ratio(W) <= 1 + 1e-9
