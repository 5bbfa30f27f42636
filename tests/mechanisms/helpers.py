"""Shared fixtures for the mechanism tests: small universes/metrics and a brute-force pair check."""

from __future__ import annotations

import numpy as np

import dprivacy as dp
from dprivacy import metrics


def brute_max_ratio(F: np.ndarray, scale: np.ndarray, eps: np.ndarray) -> float:
    """max over ALL pairs i != j of max_r scale_r |F_ri - F_rj| / eps_ij (0/x = 0, x/0 = inf).

    Independent of the ConstraintSet machinery: a plain double loop on the dense budget."""
    F = np.asarray(F, dtype=float)
    N = F.shape[1]
    worst = 0.0
    for i in range(N):
        for j in range(N):
            if i == j or np.isinf(eps[i, j]):
                continue
            d = np.abs(F[:, i] - F[:, j])
            loss = float(np.max(np.where(d == 0, 0.0, scale * d)))
            if loss == 0:
                continue
            worst = max(worst, np.inf if eps[i, j] == 0 else loss / eps[i, j])
    return worst


def cases():
    """(name, universe, metric): a dense Euclidean metric and two edge (graph-type) metrics."""
    rng = np.random.default_rng(7)
    pts = dp.Universe.from_points(rng.uniform(0, 3, size=(7, 2)))
    prod = dp.Universe.from_domains({"a": [0, 1], "b": [0, 1, 2]})
    line = dp.Universe.from_points(np.arange(6.0).reshape(-1, 1))
    return [
        ("euclidean", pts, metrics.Euclidean(0.8)),
        ("attribute", prod, metrics.AttributeWeighted({"a": 0.5, "b": 2.0})),
        ("blowfish", line, metrics.BlowfishThreshold(theta=1.0, eps=0.7)),
    ]
