"""Table releases verify a design's Theorem-1 condition once per (workload, design, constraints)
and take the verdict from a fingerprint-keyed cache afterwards; anything that changes a number
the verdict depends on is verified again (and an unsafe design is refused, charging nothing)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dprivacy as dp
from dprivacy.errors import PrivacyViolationError
from dprivacy.tables import Queryable, verdict_store, verdicts

K = 6
U = dp.Universe.from_domains({"a": list(range(K))})
W = dp.Workload(np.eye(K))
M = dp.metrics.Discrete(eps=1.0)  # identity workload: beta_i + beta_j <= 1 for every pair


def _design(beta: float, metric: dp.metrics.Discrete = M) -> dp.Design:
    return dp.Design(w=np.ones(K), beta=np.full(K, beta), constraints=metric.constraint_set(U))


def _table() -> Queryable:
    return Queryable(pd.DataFrame({"a": [0, 1, 1, 5, 9]}), budget=100.0, noise_seed=0)


@pytest.fixture
def verifications(monkeypatch):
    """Count the full Theorem-1 checks (Design.verify) made by releases."""
    verdict_store.use(None)  # in memory only: a stored verdict would skip the checks counted
    verdicts.clear()
    calls = []
    orig = dp.Design.verify

    def counting(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    monkeypatch.setattr(dp.Design, "verify", counting)
    yield calls
    verdicts.clear()


def test_a_design_is_verified_once_then_taken_from_the_cache(verifications):
    t = _table()
    first = t.histogram(U).release(W, _design(0.5))
    again = [t.histogram(U).release(W, _design(0.5)) for _ in range(3)]  # equal, new objects
    assert len(verifications) == 1
    assert first.shape == (K,) and all(a.shape == (K,) for a in again)
    t.histogram(U).release(W, _design(0.5), metric=M)  # against the metric: another key
    t.histogram(U).release(W, _design(0.5), metric=M)
    assert len(verifications) == 2


def test_changed_numbers_are_verified_again_and_unsafe_designs_refused(verifications):
    t = _table()
    t.histogram(U).release(W, _design(0.5))
    before = t.remaining_budget()
    with pytest.raises(PrivacyViolationError):  # beta 0.6: 0.6 + 0.6 > 1
        t.histogram(U).release(W, _design(0.6))
    with pytest.raises(PrivacyViolationError):  # same w, beta; tighter constraints (eps 0.5)
        t.histogram(U).release(W, _design(0.5, dp.metrics.Discrete(eps=0.5)))
    with pytest.raises(PrivacyViolationError):  # same design, checked against a tighter metric
        t.histogram(U).release(W, _design(0.5), metric=dp.metrics.Discrete(eps=0.5))
    w2 = dp.Workload(2 * np.eye(K))  # same design, a workload of twice the sensitivity
    with pytest.raises(PrivacyViolationError):
        t.histogram(U).release(w2, _design(0.5))
    assert t.remaining_budget() == before  # refused releases charge nothing
    assert len(verifications) == 5  # every changed input was verified, none came from the cache


def test_a_design_mutated_in_place_is_verified_again(verifications):
    """The key is the content, not the object: even a design whose read-only arrays are made
    writable and changed after a cached verdict is checked again."""
    t = _table()
    d = _design(0.5)
    t.histogram(U).release(W, d)
    base = d.beta if d.beta.base is None else d.beta.base
    base.setflags(write=True)
    d.beta.setflags(write=True)
    d.beta[:] = 0.75
    with pytest.raises(PrivacyViolationError):
        t.histogram(U).release(W, d)
