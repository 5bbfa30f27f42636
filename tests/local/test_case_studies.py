"""Case studies of Paper IV §4: estimators vs pure-ldp / multi-freq-ldpy and vs closed-form variance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprivacy.local import cost
from dprivacy.local.builtins import rr_scale
from dprivacy.local.case_studies import (
    basic_randomiser_estimate,
    basic_randomiser_query,
    duchi_estimate,
    duchi_query,
    duchi_variance,
    harmony_estimate,
    harmony_query,
    harmony_variance,
    mean_variance,
    rappor_estimate,
    rappor_query,
    rappor_variance,
    simulate,
    warner_estimate,
    warner_query,
    warner_variance,
)

REPS = 120


def _pure_ldp_server(sub: str, mod: str, cls: str) -> type:
    """A pure-ldp server class, loaded without ``pure_ldp.frequency_oracles/__init__`` (which imports
    its RAPPOR module and hence scikit-learn, an undeclared dependency of pure-ldp)."""
    import importlib.util
    from pathlib import Path

    import pure_ldp

    path = Path(pure_ldp.__file__).parent / "frequency_oracles" / sub / f"{mod}.py"
    spec = importlib.util.spec_from_file_location(f"_peer_{mod}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, cls)


def _check_bias_var(estimates: np.ndarray, truth: np.ndarray, var: np.ndarray) -> None:
    """Mean within 4.5 standard errors of the truth; sample variance within 40 % of closed form
    (its relative standard deviation is about sqrt(2 / REPS) = 13 %)."""
    est = np.asarray(estimates, dtype=float)
    se = np.sqrt(var / est.shape[0])
    assert np.all(np.abs(est.mean(axis=0) - truth) <= 4.5 * se + 1e-12)
    ratio = est.var(axis=0, ddof=1) / var
    assert np.all((ratio > 0.6) & (ratio < 1.4)), ratio


def test_warner_against_peers_and_closed_form() -> None:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI

    DEServer = _pure_ldp_server("direct_encoding", "de_server", "DEServer")  # noqa: N806

    eps, cats, n = 1.2, ["a", "b", "c", "d"], 250
    truth = np.array([0.4, 0.32, 0.16, 0.12])
    records = [{"x": c} for c, m in zip(cats, (truth * n).astype(int), strict=True) for _ in range(m)]
    q = warner_query("w", eps, "x", cats)
    assert q.T.cost() == pytest.approx(eps)
    rng = np.random.default_rng(3)
    ours = []
    for r in range(REPS):
        reports = simulate(q, records, rng)
        est = warner_estimate(reports, q.T.matrix, cats)
        ours.append(est)
        if r < 3:  # the same reports through the peers' estimators
            idx = [cats.index(v) for v in reports]
            srv = DEServer(eps, len(cats), index_mapper=lambda v: v)
            for i in idx:
                srv.aggregate(i)
            peer = np.array([srv.estimate(i, suppress_warnings=True) for i in range(len(cats))])
            assert np.allclose(peer, n * est, rtol=1e-9, atol=1e-9)  # pure-ldp estimates counts
            mi = GRR_Aggregator_MI(np.array(idx), len(cats), eps)  # clipped and renormalised
            clip = np.clip(est, 0, None)
            assert np.allclose(mi, clip / clip.sum(), atol=1e-12)
    _check_bias_var(np.array(ours), truth, warner_variance(truth, n, eps, len(cats)))


def test_rappor_against_pure_ldp_and_closed_form() -> None:
    UEServer = _pure_ldp_server("unary_encoding", "ue_server", "UEServer")  # noqa: N806

    eps, cats, n = 2.0, ["x", "y", "z"], 300
    truth = np.array([0.5, 0.3, 0.2])
    records = [{"s": c} for c, m in zip(cats, (truth * n).astype(int), strict=True) for _ in range(m)]
    q = rappor_query("r", eps, "s", cats)
    assert q.T.cost() == pytest.approx(eps)  # one-hot inputs: 2 x per-bit cost eps/2
    rng = np.random.default_rng(4)
    ests = []
    for r in range(REPS):
        reps = np.array(simulate(q, records, rng))
        ests.append(rappor_estimate(reps, eps))
        if r == 0:
            srv = UEServer(eps, len(cats), use_oue=False, index_mapper=lambda v: v)
            for row in reps:
                srv.aggregate(row.astype(float))
            peer = np.array([srv.estimate(i, suppress_warnings=True) for i in range(3)])
            assert np.allclose(peer, n * ests[0], rtol=1e-9)
    _check_bias_var(np.array(ests), truth, rappor_variance(truth, n, eps))


def test_duchi_closed_form() -> None:
    eps, n = 1.0, 300
    x = np.linspace(-0.9, 0.9, n)
    q = duchi_query("d", eps, "v")
    recs = [{"v": float(v)} for v in x]
    rng = np.random.default_rng(6)
    replies = simulate(q, recs, rng)
    assert set(np.round(np.abs(replies), 12)) == {round(rr_scale(eps), 12)}
    ests = np.array([[duchi_estimate(simulate(q, recs, rng))] for _ in range(REPS)])
    _check_bias_var(ests, np.array([x.mean()]), np.array([duchi_variance(x, eps)]))


def test_harmony_and_basic_randomiser_closed_form() -> None:
    eps, n, d = 1.5, 200, 3
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(n, d))
    qh = harmony_query("h", eps, "v", d, seed=11)
    recs = [{"v": row.tolist()} for row in X]
    hs = []
    for r in range(REPS):
        qh = harmony_query(f"h{r}", eps, "v", d, seed=r)  # fresh public randomness per run
        hs.append(harmony_estimate(simulate(qh, recs, rng), d))
    _check_bias_var(np.array(hs), X.mean(axis=0), harmony_variance(X, eps))

    m = 4
    signs = rng.choice([-1.0, 1.0], size=(n, m)) / math.sqrt(m)
    signs[:20] = 0.0  # some users hold x = 0
    recs = [{"v": row.tolist()} for row in signs]
    bs = []
    for r in range(REPS):
        qb = basic_randomiser_query(f"b{r}", eps, "v", m, seed=r)
        out = simulate(qb, recs, rng)
        assert all(abs(abs(z) - rr_scale(eps) * math.sqrt(m)) < 1e-9 for _, z in out)
        bs.append(basic_randomiser_estimate(out, m))
    _check_bias_var(np.array(bs), signs.mean(axis=0), mean_variance(signs, rr_scale(eps) ** 2))
    assert cost(qb.T.matrix) == pytest.approx(eps)
