"""Pruned (branch-and-bound) scans equal brute force on random and adversarial instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from solvers import ConstraintSet, InfeasibleError, design
from solvers.pruned import GeometricIndex


def points(kind: str, N: int, D: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return rng.random((N, D))
    if kind == "clustered":  # tight clusters far apart: bounds are tight inside, loose across
        centres = rng.random((3, D)) * 100
        return centres[rng.integers(0, 3, N)] + rng.normal(size=(N, D)) * 1e-3
    if kind == "duplicates":  # many coincident points (zero distances)
        return np.round(rng.random((N, D)) * 2) / 2
    return np.c_[np.arange(N, dtype=float), np.zeros((N, D - 1))]  # a line: 1-D structure


def queries(kind: str, P: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    N = P.shape[0]
    if kind == "rough":
        return rng.random((m, N))
    if kind == "smooth":  # elevation-like: Lipschitz in the coordinates
        a = rng.normal(size=(m, P.shape[1]))
        return np.sin(P @ a.T).T + 0.1 * (P @ a.T).T
    if kind == "binary":
        return (rng.random((m, N)) < 0.5).astype(float)
    return np.ones((m, N)) * 3.0  # constant: every ratio 0


def make_consistent(P: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Equal columns on coincident points (else eps = 0 with different columns: infeasible)."""
    _, inv = np.unique(P, axis=0, return_inverse=True)
    first = np.zeros(inv.max() + 1, np.int64)
    first[inv[::-1]] = np.arange(P.shape[0])[::-1]
    return F[:, first[inv.ravel()]]


def brute(F: np.ndarray, eps: np.ndarray, u: np.ndarray, agg: str = "sum"
          ) -> dict[tuple[int, int], float]:
    """Every pair's ratio by definition: u_k = inf counts inf where row k differs, 0 elsewhere."""
    out = {}
    for i in range(eps.shape[0]):
        for j in range(i + 1, eps.shape[0]):
            d = np.abs(F[:, i] - F[:, j])
            with np.errstate(invalid="ignore"):
                terms = np.where(d == 0, 0.0, u * d)
            loss = float(terms.sum() if agg == "sum" else terms.max(initial=0.0))
            out[(i, j)] = 0.0 if loss == 0 else (np.inf if eps[i, j] == 0 else loss / eps[i, j])
    return out


instances = st.fixed_dictionaries({
    "N": st.integers(1, 70), "D": st.integers(1, 3), "m": st.sampled_from([1, 2, 5, 50]),
    "pts": st.sampled_from(["uniform", "clustered", "duplicates", "line"]),
    "q": st.sampled_from(["rough", "smooth", "binary", "constant"]),
    "leaf": st.sampled_from([2, 3, 16]), "scale": st.sampled_from([0.5, 1.0, 7.0]),
    "seed": st.integers(0, 10**6)})


def build(inst: dict) -> tuple[np.ndarray, np.ndarray, ConstraintSet, ConstraintSet]:
    rng = np.random.default_rng(inst["seed"])
    P = points(inst["pts"], inst["N"], inst["D"], rng)
    F = make_consistent(P, queries(inst["q"], P, inst["m"], rng))
    eps = inst["scale"] * cdist(P, P)
    plain = ConstraintSet.dense(eps)
    idx = GeometricIndex(P, inst["scale"], leafsize=inst["leaf"], all_finite=True, min_n=0)
    return F, eps, plain, plain.with_index(idx)


@settings(max_examples=60, deadline=None)
@given(inst=instances, k=st.sampled_from([0, 1, 7]), agg=st.sampled_from(["sum", "max"]),
       inf_u=st.booleans())
def test_pruned_scan_equals_brute_force(inst, k, agg, inf_u):
    F, eps, plain, pruned = build(inst)
    rng = np.random.default_rng(inst["seed"] + 1)
    u = rng.random(inst["m"]) * 3
    u[rng.random(inst["m"]) < 0.2] = 0.0
    if inf_u:
        u[0] = np.inf
    sc = pruned.scan(F, u, k=k, agg=agg)
    assert sc.strategy == "pruned"
    bf = brute(F, eps, u, agg)
    expect = max(bf.values(), default=0.0)
    assert sc.max_ratio == pytest.approx(expect, rel=1e-12, abs=1e-300)
    assert sc.max_ratio == pytest.approx(plain.scan(F, u, agg=agg).max_ratio, rel=1e-12, abs=1e-300)
    if sc.worst is not None and expect > 0:
        assert bf[sc.worst] == pytest.approx(expect, rel=1e-12)
    ti, tj, tr = sc.top
    positive = sorted((v for v in bf.values() if v > 0), reverse=True)[:k]
    assert list(tr[tr > 0]) == pytest.approx(positive, rel=1e-12)
    for a, b, r in zip(ti, tj, tr, strict=True):
        assert a < b and bf[(int(a), int(b))] == pytest.approx(r, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(inst=instances)
def test_pruned_lipschitz_and_min_eps_equal_brute_force(inst):
    F, eps, plain, pruned = build(inst)
    c, bi, bj = pruned.row_lipschitz(F)
    c0, _, _ = plain.row_lipschitz(F)
    np.testing.assert_allclose(c, c0, rtol=1e-12)
    for k in np.flatnonzero(c > 0):
        i, j = int(bi[k]), int(bj[k])
        assert abs(F[k, i] - F[k, j]) / eps[i, j] == pytest.approx(c[k], rel=1e-12)
    off = eps[np.triu_indices(inst["N"], 1)]
    off = off[off > 0]
    assert pruned.min_positive_eps() == (off.min() if off.size else np.inf)


def test_zero_distance_with_different_columns_is_infeasible_when_pruned():
    P = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [3.0, 0.0]])
    cs = ConstraintSet.dense(cdist(P, P)).with_index(GeometricIndex(P, 1.0, min_n=0))
    F = np.array([[0.0, 1.0, 2.0, 0.0]])
    with pytest.raises(InfeasibleError) as exc:
        cs.check_feasible(F)
    assert exc.value.pair == (1, 2)
    assert cs.scan(F, np.ones(1)).max_ratio == np.inf


def test_pruning_prunes_and_matches_full_scan_at_scale():
    rng = np.random.default_rng(5)
    N, m = 3000, 10
    P = rng.random((N, 2))
    F = rng.random((m, N))
    u = rng.random(m)
    full = ConstraintSet.oracle(N, lambda rows: cdist(P[rows], P),
                                pair=lambda i, j: np.linalg.norm(P[i] - P[j], axis=1))
    pr = full.with_index(GeometricIndex(P, 1.0, all_finite=True, min_n=0))
    a, b = full.scan(F, u, k=40), pr.scan(F, u, k=40)
    assert b.max_ratio == pytest.approx(a.max_ratio, rel=1e-12)
    np.testing.assert_allclose(b.top[2], a.top[2], rtol=1e-12)
    assert b.pairs_evaluated < 0.05 * N * (N - 1) / 2  # near-linear, not quadratic
    assert pr.n_constraints == N * (N - 1) // 2
    snap = pr.stats.snapshot()
    assert snap["pruned"] == 1 and snap["full"] >= 1  # one counter for the family


@pytest.mark.parametrize("method, loss, n", [
    ("closed_form", "squared", None), ("equal_split", "squared", None),
    ("uniform", "squared", None), ("budget_sharing", "squared", None),
    ("exact", "squared", None), ("exact", "log", None), ("exact", "max", None),
    ("exact", "squared", 1000.0), ("bcd", "squared", 1000.0)])
def test_every_method_feasible_over_all_pairs_and_same_optimum(method, loss, n):
    rng = np.random.default_rng(11)
    N, m = 400, 1 if method == "closed_form" else 4
    P = rng.random((N, 2))
    P[1] = P[0]  # a duplicate point: zero distance
    F = make_consistent(P, rng.random((m, N)))
    eps = cdist(P, P)
    plain = ConstraintSet.dense(eps)
    pruned = plain.with_index(GeometricIndex(P, 1.0, all_finite=True, min_n=0))
    r = design(F, pruned, method=method, loss=loss, n=n)
    r0 = design(F, plain, method=method, loss=loss, n=n)
    assert r.report["passes"]["pruned"] >= 1 and r.report["passes"]["full"] == 0
    assert r.report["certificate"]["strategy"] == "pruned"
    loss = sum(uk * np.abs(f[:, None] - f[None, :]) for uk, f in zip(r.u, F, strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(loss == 0, 0.0, loss / eps)
    assert ratio[np.triu_indices(N, 1)].max() <= 1 + 1e-12  # every pair, by brute force
    assert r.objective == pytest.approx(r0.objective, rel=1e-9)


def test_seed_pairs_are_near_pairs_of_each_leaf_and_split_into_spans():
    """Seed pairs: within each k-d tree leaf the elements at offsets 2q and 2q + 1, each element
    in at most one pair, i < j; spans of tree positions together give the same pairs, and the
    tree is the old one (leaves split at the middle along the widest side)."""
    import solvers.pruned as pr

    rng = np.random.default_rng(5)
    for N, D in ((700, 2), (1001, 3), (37, 1)):
        P = rng.random((N, D))
        P[10] = P[11]  # a duplicate point
        index = pr.GeometricIndex(P, 1.0, leafsize=8)
        tree = index.tree
        i, j = index.seed_pairs()
        assert (i < j).all() and np.unique(np.r_[i, j]).size == 2 * i.size
        starts = tree.starts(N, tree.L)
        pos = np.empty(N, np.int64)
        pos[tree.perm] = np.arange(N)
        pi, pj = np.minimum(pos[i], pos[j]), np.maximum(pos[i], pos[j])
        leaf = np.searchsorted(starts, pi, side="right") - 1
        assert (pj == pi + 1).all() and ((pi - starts[leaf]) % 2 == 0).all()
        assert (pj < np.append(starts[1:], N)[leaf]).all()
        sizes = np.diff(np.append(starts, N))
        assert i.size == (sizes // 2).sum()
        cuts = sorted({min(c, N) for c in (0, 3, 4, N // 2, 100, 101, N)})
        parts = [tree.seed_positions(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        got = np.sort(np.concatenate([np.minimum(tree.perm[a], tree.perm[b]) * N
                                      + np.maximum(tree.perm[a], tree.perm[b]) for a, b in parts]))
        np.testing.assert_array_equal(got, np.sort(i * N + j))
        for lev in range(tree.L + 1):  # every node: its points inside its box
            b = tree.starts(N, lev)
            seg = np.repeat(np.arange(b.size), np.diff(np.append(b, N)))
            Pp = P[tree.perm]
            assert (Pp >= tree.lo[lev][seg]).all() and (Pp <= tree.hi[lev][seg]).all()
