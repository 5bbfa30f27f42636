"""cost(T) (Paper IV Def. 3) on the paper's test vectors, the d_X check and composition rules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dprivacy.errors import ShapeError, ValidationError
from dprivacy.local import (
    MatrixRandomiser,
    ProductRandomiser,
    check_dx,
    cost,
    dx_cost,
    pair_loss,
    product_cost,
    randomiser_from_json,
    require_non_expansive,
    sequential_cost,
)
from dprivacy.local.case_studies import rr_matrix, warner_estimate


def test_two_coins_cost_ln3() -> None:
    assert cost([[0.75, 0.25], [0.25, 0.75]]) == pytest.approx(1.0986122886681098, rel=1e-15)


def test_warner_estimate_1000_users() -> None:
    # Paper IV §2.3: with T = [[.75, .25], [.25, .75]] and 1000 users the estimate is (y - 250)/500
    for y in (0, 250, 400, 731, 1000):
        reports = np.r_[np.zeros(y, dtype=int), np.ones(1000 - y, dtype=int)]  # 0 = "yes"
        est = warner_estimate(reports, [[0.75, 0.25], [0.25, 0.75]])
        assert est[0] == pytest.approx((y - 250) / 500, abs=1e-12)


def test_paper5_staircase_eps2() -> None:
    # Paper V Notes 6-7: normalised entries 0.8807970779778824 / 0.11920292202211755 cost 2 (not ln 2)
    T = [[0.8807970779778824, 0.11920292202211755], [0.11920292202211755, 0.8807970779778824]]
    assert cost(T) == pytest.approx(2.0, rel=1e-12)
    assert np.allclose(rr_matrix(2.0, 2), T, rtol=1e-15)


def test_zero_column_costs_infinity() -> None:
    assert cost([[1.0, 0.0], [0.5, 0.5]]) == math.inf
    assert cost([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]) == math.inf  # all-zero column: x/0 = inf
    assert math.isinf(MatrixRandomiser([[1.0, 0.0], [0.0, 1.0]]).cost())


@pytest.mark.parametrize("bad,err", [
    ([[0.5, 0.6], [0.5, 0.5]], ValidationError),
    ([[-0.1, 1.1], [0.5, 0.5]], ValidationError),
    ([[np.nan, 1.0], [0.5, 0.5]], ValidationError),
    ([0.5, 0.5], ShapeError),
])
def test_invalid_matrices_refused(bad: list, err: type) -> None:
    with pytest.raises(err):
        cost(bad)


def _brute_loss(T: np.ndarray) -> np.ndarray:
    n = T.shape[0]
    L = np.zeros((n, n))
    for x, y in itertools.product(range(n), repeat=2):
        worst = 0.0 if x == y else -math.inf
        for z in range(T.shape[1]):
            if T[x, z] == 0:
                continue
            worst = max(worst, math.inf if T[y, z] == 0 else math.log(T[x, z] / T[y, z]))
        L[x, y] = 0.0 if x == y else worst
    return L


def test_pair_loss_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        T = rng.random((5, 4)) ** 3
        T[rng.random(T.shape) < 0.1] = 0.0
        T[:, 0] += 1e-3
        T /= T.sum(axis=1, keepdims=True)
        assert np.allclose(pair_loss(T), _brute_loss(T), equal_nan=False)
        finite = np.isfinite(_brute_loss(T))
        assert np.array_equal(np.isfinite(pair_loss(T)), finite)


def test_cost_is_max_pair_loss_and_dx_check() -> None:
    rng = np.random.default_rng(1)
    T = rng.random((6, 6)) + 0.05
    T /= T.sum(axis=1, keepdims=True)
    L = pair_loss(T)
    assert cost(T) == pytest.approx(L.max(), rel=1e-12)
    eps = np.maximum(L, L.T)  # the tightest symmetric budget
    assert check_dx(T, eps).ok
    tight = eps.copy()
    i, j = np.unravel_index(np.argmax(L), L.shape)
    tight[i, j] = tight[j, i] = L[i, j] * 0.99
    res = check_dx(T, tight)
    assert not res.ok and res.worst == (i, j)
    # the uniform budget cost(T) on every pair reproduces Def. 3
    assert check_dx(T, cost(T) * (1 - np.eye(6))).ok
    assert dx_cost(T, eps / 2) == pytest.approx(2.0, rel=1e-9)


def test_product_cost_sum_not_max() -> None:
    T1 = np.array([[0.75, 0.25], [0.25, 0.75]])
    T2 = np.array([[0.9, 0.1], [0.2, 0.8]])
    mats = [T1, T2, T1]
    # the full product matrix over all 8 inputs, priced by Def. 3
    full = np.ones((1, 1))
    for m in mats:
        full = np.kron(full, m)
    assert product_cost(mats, "all") == pytest.approx(cost(full), rel=1e-12)
    assert product_cost(mats, "all") == pytest.approx(sum(cost(m) for m in mats), rel=1e-12)
    assert product_cost(mats, "all") > max(cost(m) for m in mats)  # Paper IV §3.4's max is wrong
    # one-hot inputs only: rows 100, 010, 001 of the product matrix
    onehot = [4, 2, 1]
    assert product_cost(mats, "one_hot") == pytest.approx(cost(full[onehot]), rel=1e-12)
    dom = np.array([[0, 0, 0], [1, 1, 0]])
    assert product_cost(mats, dom) == pytest.approx(cost(full[[0, 6]]), rel=1e-12)


def test_product_randomiser_roundtrip_and_domain() -> None:
    R = ProductRandomiser([[0.75, 0.25], [0.25, 0.75]], length=3, domain="one_hot")
    R2 = randomiser_from_json(R.to_json())
    assert R2.cost() == pytest.approx(2 * math.log(3))
    assert R2.contains([0, 0, 1]) and not R2.contains([1, 1, 0]) and not R2.contains([0, 2, 0])
    rng = np.random.default_rng(0)
    assert all(R2.contains(R2.random_input(rng)) for _ in range(20))


def _random_bits(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    p = rng.uniform(0.05, 0.95, size=(n, 2))
    return [np.array([[a, 1 - a], [b, 1 - b]]) for a, b in p]


@pytest.mark.parametrize("seed", range(6))
def test_one_hot_cost_is_the_brute_force_over_every_pair(seed: int) -> None:
    """The linear-time one-hot price equals the maximum over all pairs (e_i, e_j) of one-hot
    vectors, for distinct, shared and mixed coordinate matrices (ties included)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    mats = _random_bits(rng, n)
    if seed % 3 == 1:
        mats = [mats[0]] * n  # one shared matrix: every pair ties
    elif seed % 3 == 2:
        mats = [mats[i % 2] for i in range(n)]  # two matrices repeated
    onehot = np.eye(n, dtype=int)
    want = product_cost(mats, onehot)  # brute force over the n one-hot vectors
    assert product_cost(mats, "one_hot") == pytest.approx(want, rel=1e-12)
    R = ProductRandomiser([m.tolist() for m in mats], domain="one_hot")  # stacked path
    assert R.cost() == pytest.approx(want, rel=1e-12)
    R2 = randomiser_from_json(R.to_json())
    assert R2.cost() == pytest.approx(want, rel=1e-12)
    assert product_cost(mats, "all") == pytest.approx(sum(cost(m) for m in mats), rel=1e-12)


def test_product_pricing_is_linear_in_the_coordinates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pricing makes one vectorised pair-loss call per matrix shape, never one per coordinate or
    per pair of coordinates: a shared matrix is priced once whatever the length, and 4096
    distinct equally shaped matrices in one call over their stack."""
    import importlib

    cost_module = importlib.import_module("dprivacy.local.cost")
    calls: list[tuple[int, ...]] = []
    real = cost_module.stack_pair_loss

    def counting(stack: np.ndarray) -> np.ndarray:
        calls.append(stack.shape)
        return real(stack)

    monkeypatch.setattr(cost_module, "stack_pair_loss", counting)
    monkeypatch.setattr(cost_module, "pair_loss", lambda *a: pytest.fail("priced per coordinate"))
    big = randomiser_from_json({"kind": "product", "matrices": [[0.75, 0.25], [0.25, 0.75]],
                                "length": 65536, "domain": "one_hot"})
    assert calls == [(1, 2, 2)] and big.cost() == pytest.approx(2 * math.log(3))
    calls.clear()
    mats = _random_bits(np.random.default_rng(7), 4096)
    R = ProductRandomiser([m.tolist() for m in mats], domain="one_hot")
    assert calls == [(4096, 2, 2)]
    # the quadratic definition, every ordered pair (i, j != i), computed independently
    up = np.array([np.log(m[1] / m[0]).max() for m in mats])  # L_i[1, 0]
    down = np.array([np.log(m[0] / m[1]).max() for m in mats])  # L_j[0, 1]
    pairs = up[:, None] + down[None, :]
    np.fill_diagonal(pairs, -np.inf)
    assert R.cost() == pytest.approx(float(pairs.max()), rel=1e-12)
    # ragged shapes: one call per shape
    calls.clear()
    ProductRandomiser([[[0.5, 0.5], [0.5, 0.5]], [[0.2, 0.3, 0.5], [0.3, 0.3, 0.4]]] * 100)
    assert sorted(calls) == [(100, 2, 2), (100, 2, 3)]


def test_product_apply_draws_each_coordinate_from_its_row() -> None:
    """The vectorised draw matches one inverse-CDF draw per coordinate with the same uniforms."""
    rng = np.random.default_rng(3)
    mats = [np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]), np.array([[0.5, 0.5], [0.1, 0.9]])] * 50
    R = ProductRandomiser([m.tolist() for m in mats])
    x = [int(v) for v in rng.integers(0, 2, size=100)]
    got = R.apply(x, np.random.default_rng(11))
    u = np.random.default_rng(11).random(100)
    want = [min(int(np.searchsorted(np.cumsum(m[xi]), ui, side="right")), m.shape[1] - 1)
            for m, xi, ui in zip(mats, x, u, strict=True)]
    assert got == want and R.has_output(got)
    assert not R.contains(x[:-1]) and not R.contains([True] + x[1:]) and not R.contains([2] + x[1:])
    assert not R.contains([10**30] + x[1:]) and R.contains([np.int64(v) for v in x])


def test_sequential_cost_adds() -> None:
    assert sequential_cost([math.log(3), math.log(3)]) == pytest.approx(2 * math.log(3))
    with pytest.raises(ValidationError):
        sequential_cost([0.1, -0.2])


def test_pre_processing_for_dx_needs_non_expansive_pre() -> None:
    d = np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))  # |i - j| on a line
    require_non_expansive([0, 1, 2, 3], d, d)  # identity
    require_non_expansive([0, 0, 1, 1], d, d)  # a contraction
    with pytest.raises(ValidationError, match="not non-expansive"):
        require_non_expansive([0, 3, 1, 2], d, d)  # 0,1 -> 0,3 stretches distance 1 to 3
    # and the stretched composition really breaks the d_X guarantee of T
    T = np.exp(-0.5 * d)
    T /= T.sum(axis=1, keepdims=True)
    ok = check_dx(T, d)
    assert ok.ok
    assert not check_dx(T[[0, 3, 1, 2]], d).ok


def test_cli_cost(tmp_path, capsys) -> None:
    from dprivacy.cli import main as cli_main

    def main(argv: list[str]) -> int:
        return cli_main(["local", *argv])

    t = tmp_path / "T.csv"
    np.savetxt(t, [[0.75, 0.25], [0.25, 0.75]], delimiter=",")
    assert main(["cost", str(t)]) == 0
    assert "1.09861228867" in capsys.readouterr().out
    d = tmp_path / "D.csv"
    np.savetxt(d, [[0.0, 1.0], [1.0, 0.0]], delimiter=",")
    assert main(["cost", str(t), "--metric", str(d)]) == 4  # ln 3 > 1: violated, refused
    np.savetxt(t, [[1.0, 0.0], [0.5, 0.5]], delimiter=",")
    assert main(["cost", str(t)]) == 4 and "inf" in capsys.readouterr().out
    # a missing file is an input error (3) with one line naming it, as for every dprivacy command
    assert main(["cost", str(tmp_path / "missing.csv")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.csv" in err[0] and "Traceback" not in err[0]
    assert main(["cost"]) == 2  # usage


def test_register_adds_local_command() -> None:
    import argparse

    from dprivacy.cli.cmd_local import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="command"))
    args = p.parse_args(["local", "cost", "T.csv"])
    assert args.local_command == "cost" and callable(args.func)
