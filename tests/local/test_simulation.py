"""Vectorised simulation: each user's output has the agent's distribution (inverse CDF over T's
rows), domain enforcement redraws invalid inputs, labels match as the agent matches them."""

from __future__ import annotations

import numpy as np
import pytest

from dprivacy.local import PersonalBudget, UserAgent
from dprivacy.local.batch import rows_of, sample_matrix, sample_one_hot, sample_product
from dprivacy.local.case_studies import duchi_query, rappor_query, warner_query
from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser
from dprivacy.local.simulation import simulate, simulate_outputs

T3 = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.25, 0.25, 0.5]])


def _close(counts: np.ndarray, probs: np.ndarray, n: int) -> None:
    """Every frequency within 5 binomial standard deviations of its probability."""
    sd = np.sqrt(probs * (1 - probs) / n) + 1e-12
    assert np.all(np.abs(counts / n - probs) <= 5 * sd), (counts / n, probs)


@pytest.mark.parametrize("n_out", [3, 12])  # the counting path (few outputs) and the grouped path
def test_rows_are_sampled_with_their_probabilities(n_out: int) -> None:
    rng = np.random.default_rng(0)
    M = rng.dirichlet(np.ones(n_out), size=20 if n_out > 8 else 3)  # noqa: N806
    T = MatrixRandomiser(M)  # noqa: N806
    n = 30_000
    rows = np.repeat(np.arange(M.shape[0]), n)
    out = sample_matrix(T, rows, rng=1, as_rows=True)
    for i in range(M.shape[0]):
        _close(np.bincount(out[rows == i], minlength=n_out), M[i], n)


def test_labels_match_as_the_agent_matches_them() -> None:
    T = MatrixRandomiser(np.eye(3), inputs=[1, "1", [1, 2]])  # noqa: N806
    values = [1, 1.0, True, "1", [1, 2], (1, 2), {"a": 1}, None, np.int64(1)]
    assert rows_of(T, values).tolist() == [(-1 if T.row(v) is None else T.row(v)) if _ok(T, v) else -1
                                           for v in values] == [0, -1, -1, 1, 2, 2, -1, -1, 0]
    S = MatrixRandomiser(np.eye(2), inputs=["yes", "no"])  # noqa: N806
    assert rows_of(S, np.array(["no", "yes", "maybe"])).tolist() == [1, 0, -1]
    assert rows_of(MatrixRandomiser(np.eye(2), inputs=[-1, 1]), np.array([1, -1, 0])).tolist() == [1, 0, -1]


def _ok(T: MatrixRandomiser, v: object) -> bool:  # noqa: N803
    try:
        return T.row(v) is not None
    except (TypeError, ValueError):
        return False


def test_values_outside_the_domain_become_uniform_inputs() -> None:
    T = MatrixRandomiser(np.eye(3), inputs=["a", "b", "c"], outputs=["a", "b", "c"])  # noqa: N806
    n = 30_000
    out = sample_matrix(T, ["zzz"] * n, rng=2)
    _close(np.bincount(out, minlength=3), np.full(3, 1 / 3), n)
    assert sample_matrix(T, ["b", "c", "a"], rng=2).tolist() == [1, 2, 0]


def test_product_and_one_hot_paths() -> None:
    q = rappor_query("r", 2.0, "x", ["a", "b", "c", "d"])
    p = float(q.T.matrices[0][1, 1])
    n = 40_000
    hot = np.random.default_rng(3).integers(4, size=n)
    X = np.eye(4, dtype=np.int64)[hot]  # noqa: N806
    for out in (sample_one_hot(q.T, hot, rng=4), sample_product(q.T, X, rng=4)):
        assert out.shape == (n, 4)
        _close(np.array([out[X == 1].sum()]), np.array([p]), int((X == 1).sum()))
        _close(np.array([out[X == 0].sum()]), np.array([1 - p]), int((X == 0).sum()))
    ident = ProductRandomiser(np.eye(2), length=3, domain="one_hot")
    bad = sample_product(ident, [[1, 1, 0]] * 9000, rng=5)  # not one-hot: a random one-hot vector
    assert np.all(bad.sum(axis=1) == 1)
    _close(bad.sum(axis=0), np.full(3, 1 / 3), 9000)
    allv = ProductRandomiser(np.eye(2), length=2, domain="all")
    redrawn = sample_product(allv, [[0, 5]] * 9000, rng=6)  # one bad entry: the whole vector
    _close(np.bincount(redrawn[:, 0], minlength=2), np.full(2, 0.5), 9000)


def test_simulate_matches_the_agent_distribution(tmp_path) -> None:
    """The same query through UserAgent.handle (one user at a time) and simulate (all at once)."""
    q = warner_query("w", 1.0, "c", ["a", "b", "c"])
    p = q.T.matrix[0]  # every user holds "a"
    n_agent, n_sim = 600, 60_000
    ledger = PersonalBudget(":memory:", "x", total=1.0).ledger
    agent_out = []
    for i in range(n_agent):
        a = UserAgent(f"u{i}", {"c": "a"}, PersonalBudget(ledger, f"u{i}", total=1.0), sandbox=None,
                      pad=False, rng=i)
        agent_out.append(a.handle(q)["result"])
    sim_out = simulate(q, {"c": np.array(["a"] * n_sim)}, rng=7)
    for outs, n in ((agent_out, n_agent), (sim_out, n_sim)):
        _close(np.array([outs.count(v) for v in ("a", "b", "c")]), p, n)
    # records as a list of mappings, a mapping of columns and the raw indices agree in kind
    rec = [{"c": v} for v in ["a", "b", "zzz"]]
    assert all(v in ("a", "b", "c") for v in simulate(q, rec, rng=1))
    assert simulate_outputs(q, {"c": ["a", "b", "zzz"]}, rng=1).shape == (3,)


def test_duchi_simulation_is_unbiased() -> None:
    x = np.linspace(-1, 1, 20_001)
    q = duchi_query("d", 1.0, "x")
    reps = np.asarray(simulate(q, {"x": x}, rng=8))
    from dprivacy.local.case_studies import duchi_variance

    assert abs(reps.mean() - x.mean()) < 5 * np.sqrt(duchi_variance(x, 1.0))
    out_of_range = np.asarray(simulate(q, {"x": np.full(20_000, 7.0)}, rng=9))  # enforced: random
    assert abs(out_of_range.mean()) < 5 * np.sqrt(duchi_variance(np.zeros(20_000), 1.0))
