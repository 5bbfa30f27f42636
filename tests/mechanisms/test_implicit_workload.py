"""Implicit workloads (all ranges, prefixes, rectangles): the same maths as the explicit matrix,
strategies checked on every pair, releases with the promised error, clear refusals."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.design import ExactAnswerWarning
from dprivacy.errors import ShapeError, ValidationError
from tests.mechanisms.test_strategy import all_pairs_ratio, known_total_error


def _grid(nx: int, ny: int) -> dp.Universe:
    return dp.Universe.from_points(np.array([[a, b] for a in range(nx) for b in range(ny)], float))


CASES = [dp.ImplicitWorkload.all_ranges(7), dp.ImplicitWorkload.all_prefixes(6),
         dp.ImplicitWorkload.all_rectangles(3, 4), dp.ImplicitWorkload.all_rectangles(4, 1)]


def _brute(W: dp.ImplicitWorkload) -> np.ndarray:
    """The query matrix written out from the definitions, row by row, in the documented order."""
    rows = []
    if W.kind == "prefixes":
        for b in range(W.N):
            r = np.zeros(W.N)
            r[:b + 1] = 1
            rows.append(r)
    elif W.kind == "ranges":
        for a in range(W.N):
            for b in range(a, W.N):
                r = np.zeros(W.N)
                r[a:b + 1] = 1
                rows.append(r)
    else:
        nx, ny = W.shape_
        for x0 in range(nx):
            for x1 in range(x0, nx):
                for y0 in range(ny):
                    for y1 in range(y0, ny):
                        r = np.zeros((nx, ny))
                        r[x0:x1 + 1, y0:y1 + 1] = 1
                        rows.append(r.ravel())
    return np.array(rows)


@pytest.mark.parametrize("W", CASES, ids=repr)
def test_answers_variances_and_gram_match_the_written_out_matrix(W):
    F = _brute(W)
    assert F.shape == W.shape
    rng = np.random.default_rng(4)
    x = rng.integers(0, 9, W.N).astype(float)
    S = rng.standard_normal((W.N, W.N))
    S = S @ S.T
    assert np.allclose(W.answer(x), F @ x)
    assert np.allclose(W.quadratic_diagonal(S), np.einsum("ij,jk,ik->i", F, S, F))
    assert np.allclose(W.gram(), F.T @ F)
    assert np.array_equal(W.to_workload().dense(), F)
    assert len(W.query_names()) == W.m


@pytest.mark.parametrize("W,U,M", [
    (dp.ImplicitWorkload.all_ranges(10), dp.Universe.from_points(np.sort(
        np.random.default_rng(2).uniform(0, 9, 10))[:, None]), metrics.Euclidean(0.3)),
    (dp.ImplicitWorkload.all_rectangles(3, 4), _grid(3, 4), metrics.Euclidean(0.8)),
    (dp.ImplicitWorkload.all_prefixes(8), dp.Universe.from_points(np.arange(8.0)[:, None]),
     metrics.Graph([(i, i + 1, 0.2 + 0.1 * i) for i in range(7)] + [(0, 7, 0.5)])),
], ids=["ranges-line", "rectangles-grid", "prefixes-graph"])
def test_implicit_design_is_private_on_every_pair_and_its_error_is_exact(W, U, M):
    starts = ("identity", "tree", "hierarchical", "grid")
    d = dp.design_strategy(W, U, M, rounds=2, time_limit=30, starts=starts)
    A = d.strategy
    assert all_pairs_ratio(A, M.budget(U)) <= 1 + 1e-9  # independent of the library's scans
    F = _brute(W)
    assert d.expected_squared_error() == pytest.approx(known_total_error(F, A), rel=1e-6)
    explicit = dp.StrategyMechanism(F, d, universe=U, metric=M)  # the same strategy, F written out
    assert np.allclose(d.query_variances(), explicit.query_variances(), rtol=1e-6, atol=1e-9)
    # the optimiser on the written-out workload, from the same starts, finds the same strategy
    e = dp.design_strategy(dp.Workload(F), U, M, rounds=2, time_limit=30, starts=starts)
    assert d.expected_squared_error() == pytest.approx(e.expected_squared_error(), rel=1e-6)


def test_release_is_unbiased_with_the_promised_error():
    U = dp.Universe.from_points(np.arange(6.0)[:, None])
    M = metrics.Euclidean(0.7)
    W = dp.ImplicitWorkload.all_ranges(6)
    mech = dp.StrategyMechanism(W, dp.design_strategy(W, U, M), universe=U, metric=M)
    x = np.array([3, 1, 4, 1, 5, 9])
    truth = _brute(W) @ x
    acc = dp.Accountant(total=np.inf)
    rng = np.random.default_rng(0)
    R = 3000
    out = np.array([mech.release(x, rng=rng, secure=False, accountant=acc) for _ in range(R)])
    err = np.sum((out - truth) ** 2, axis=1)
    se = err.std(ddof=1) / np.sqrt(R)
    assert abs(err.mean() - mech.expected_squared_error()) < 5 * se
    assert np.allclose(out.var(axis=0, ddof=1), mech.query_variances(), rtol=0.15, atol=1e-9)
    assert np.allclose(out[:, W.query_names().index("[0,5]")], x.sum())  # the total is exact
    assert acc.spent == pytest.approx(R * mech.release_cost)


def test_a_strategy_that_cannot_answer_is_refused_before_any_charge():
    U = dp.Universe.from_points(np.arange(5.0)[:, None])
    M = metrics.Euclidean(1.0)
    W = dp.ImplicitWorkload.all_ranges(5)
    d = dp.design_strategy(W, U, M)
    C = np.asarray(d.C.toarray() if hasattr(d.C, "toarray") else d.C)[:2]  # two rows: rank 2
    bad = dp.StrategyDesign(W, C, d.basis, None, None)
    with pytest.raises(ValidationError, match="row space"):
        dp.StrategyMechanism(W, bad, universe=U, metric=M)


def test_refusals_are_clear():
    line = dp.Universe.from_points(np.array([[0.0], [2.0], [1.0]]))
    with pytest.raises(ValidationError, match="increasing order"):
        dp.ImplicitWorkload.all_ranges(3).check_universe(line)
    swapped = dp.Universe.from_points(np.array([[b, a] for a in range(2) for b in range(3)], float))
    with pytest.raises(ValidationError, match="full 3 x 2 grid"):
        dp.ImplicitWorkload.all_rectangles(3, 2).check_universe(swapped)
    with pytest.raises(ShapeError, match="N = 4"):
        dp.ImplicitWorkload.all_ranges(4).check_universe(_grid(2, 3))
    with pytest.raises(ShapeError):
        dp.ImplicitWorkload.all_ranges(0)
    with pytest.raises(ValidationError, match="kind"):
        dp.ImplicitWorkload("squares", (3,))
    big = dp.ImplicitWorkload.all_ranges(4096)
    assert big.m == 4096 * 4097 // 2
    with pytest.raises(ValidationError, match="implicitly"):
        big.to_workload()
    U = dp.Universe.from_points(np.arange(4.0)[:, None])
    M = metrics.Euclidean(1.0)
    W = dp.ImplicitWorkload.all_ranges(4)
    with pytest.raises(ValidationError, match="implicit workload"):
        dp.design(W, U, M)
    with pytest.warns(ExactAnswerWarning):  # the range [0, 3] is the total
        wb = dp.design(W.to_workload(), U, M)
    with pytest.raises(ValidationError, match="implicit workload"):  # a (w, beta) config
        dp.MechanismConfig.from_design(W, U, M, wb)
    with pytest.raises(ValidationError, match="baseline"):
        dp.design_strategy(W, U, M, baseline=wb)
    with pytest.raises(ValidationError, match="own Gram"):
        dp.design_strategy(W, U, M, gram_matrix=np.eye(4))


def test_review_findings_stay_fixed():
    U = dp.Universe.from_points(np.arange(5.0)[:, None])
    M = metrics.Euclidean(1.0)
    W = dp.ImplicitWorkload.all_ranges(5)
    d = dp.design_strategy(W, U, M)
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    before = mech.expected_squared_error()
    d.C = d.C * 1000  # the caller's design changes after the check: the mechanism is unaffected
    x = np.array([0, 0, 3, 0, 0])
    out = mech.release(x, rng=0, secure=False, accountant=dp.Accountant(total=9))
    assert mech.expected_squared_error() == before
    assert np.all(np.abs(out - W.answer(x)) < 200)  # a 1000x strategy would be off by ~3000
    # sizes: booleans, non-tuples, overflowing products are refused clearly
    for bad in ((True,), "3", (2**32, 2**32)):
        with pytest.raises(ShapeError):
            dp.ImplicitWorkload("ranges" if bad != (2**32, 2**32) else "rectangles", bad)
    # a universe without points: its key attributes must be the line or the grid, in order
    prod = dp.Universe.from_domains({"a": [0, 1, 2], "b": [0, 1]})
    dp.ImplicitWorkload.all_rectangles(3, 2).check_universe(prod)
    with pytest.raises(ValidationError, match="two key attributes"):
        dp.ImplicitWorkload.all_rectangles(2, 3).check_universe(prod)
    with pytest.raises(ValidationError, match="one key attribute"):
        dp.ImplicitWorkload.all_ranges(6).check_universe(prod)
    # a hand-built design derives its maps; variances are never negative (the total's are 0)
    hand = dp.StrategyDesign(W, d.C / 1000, d.basis, None, None)
    assert np.allclose(hand.query_variances(), mech.query_variances())
    assert np.all(mech.query_variances() >= 0)
    with pytest.raises(ValidationError, match="explicit Workload"):
        dp.design_strategy(W, U, M, starts=("design",))
    one = dp.Universe.from_points(np.zeros((1, 1)))
    with pytest.raises(ValidationError, match="one element"):
        dp.design_strategy(dp.ImplicitWorkload.all_ranges(1), one, M)


def test_config_round_trip_with_an_implicit_workload(tmp_path):
    U = _grid(3, 4)
    M = metrics.Euclidean(0.8)
    W = dp.ImplicitWorkload.all_rectangles(3, 4)
    d = dp.design_strategy(W, U, M, rounds=1)
    cfg = dp.MechanismConfig.from_design(W, U, M, d)
    path = cfg.save(tmp_path / "rect.json")
    back = dp.MechanismConfig.load(path, U, M, W)
    mech = back.to_mechanism()
    assert np.allclose(mech.query_variances(), d.query_variances())
    assert all_pairs_ratio(mech.design.strategy, M.budget(U)) <= 1 + 1e-9
    assert dp.MechanismConfig.from_mechanism(mech, U, M) == back
    # another workload (the written-out matrix, or other sizes) is refused by its fingerprint
    with pytest.raises(dp.errors.ConfigMismatchError, match="workload"):
        dp.MechanismConfig.load(path, U, M, W.to_workload())
    with pytest.raises(dp.errors.ConfigMismatchError, match="workload"):
        dp.MechanismConfig.load(path, U, M, dp.ImplicitWorkload.all_rectangles(4, 3))
    # an edited strategy is re-verified on load
    doc = cfg.to_dict()
    key = "dense" if "dense" in doc["design"]["strategy"] else "data"
    doc["design"]["strategy"][key] = [2 * v for v in doc["design"]["strategy"][key]]
    import json
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    with pytest.raises(dp.errors.PrivacyViolationError):
        dp.MechanismConfig.load(tmp_path / "edited.json", U, M, W)


def test_the_identity_start_and_the_final_error_match_the_dense_formula():
    """The closed forms (a scaled identity's error tr(G) / d^2, the best start's score reused as
    the final error) agree with the error computed from the written-out workload."""
    from dprivacy.implicit_workload import ImplicitWorkload

    U = dp.Universe.from_points(np.array([[a, b] for a in range(5) for b in range(6)], float))
    W = ImplicitWorkload.all_rectangles(5, 6)
    d = dp.design_strategy(W, U, dp.metrics.Euclidean(1.0), starts=("identity",), rounds=0)
    A = d.strategy
    F = W.to_workload().dense()
    P = np.eye(30) - 1.0 / 30
    dense = 2.0 * float(np.sum((F @ P @ np.linalg.pinv(A @ P)) ** 2))
    assert d.expected_squared_error() == pytest.approx(dense, rel=1e-9)
    assert d.report["starts"]["identity"] == pytest.approx(dense, rel=1e-9)
