"""Gaussian noise: exact samplers against their distributions, per-query Gaussian designs checked
on every pair by the exact l2 condition on every metric kind, DXGaussian, and the accountant's
two notions (pure and zCDP) with their unit bookkeeping."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
from scipy import stats

import dprivacy as dp
from dprivacy import metrics
from dprivacy.errors import BudgetExceededError, PrivacyViolationError, ValidationError
from dprivacy.gaussian_design import GaussianDesign
from dprivacy.gaussian_noise import add_discrete_gaussian, add_gaussian, discrete_gaussian


# --------------------------------------------------------------------------- samplers
def _chi2_discrete_gaussian(z: np.ndarray, sigma: float) -> float:
    K = int(math.ceil(14 * sigma)) + 3
    ys = np.arange(-K, K + 1)
    p = np.exp(-(ys.astype(float) ** 2) / (2 * sigma**2))
    p /= p.sum()
    assert np.abs(z).max() <= K
    obs = np.bincount(z + K, minlength=ys.size)
    exp = p * z.size
    keep = exp >= 5
    o = np.append(obs[keep], obs[~keep].sum())
    e = np.append(exp[keep], exp[~keep].sum())
    return float(stats.chisquare(o, e).pvalue)


@pytest.mark.parametrize("sigma", [0.6, 2.0, 7.3])
def test_discrete_gaussian_matches_its_pmf(sigma):
    z = discrete_gaussian(sigma, 12000, rng=11, secure=False)
    assert z.dtype == np.int64
    assert _chi2_discrete_gaussian(z, sigma) > 1e-4


def test_discrete_gaussian_secure_path_matches_its_pmf_and_mixes_sigmas():
    sig = np.repeat([1.5, 0.0, 4.0], 3000)
    z = discrete_gaussian(sig)
    assert np.all(z[3000:6000] == 0)  # sigma 0: exact
    assert _chi2_discrete_gaussian(z[:3000], 1.5) > 1e-4
    assert _chi2_discrete_gaussian(z[6000:], 4.0) > 1e-4


def test_discrete_gaussian_is_reproducible_and_detects_a_wrong_sigma():
    a = discrete_gaussian(3.0, 4000, rng=5, secure=False)
    assert np.array_equal(a, discrete_gaussian(3.0, 4000, rng=5, secure=False))
    assert _chi2_discrete_gaussian(a, 3.6) < 1e-4  # the test has power


def test_add_discrete_gaussian_is_integer_arithmetic():
    out = add_discrete_gaussian(np.array([2**40, -7, 0]), [0.0, 0.0, 1.0], rng=0, secure=False)
    assert out[0] == 2**40 and out[1] == -7 and out[2] == round(out[2])
    with pytest.raises(ValidationError, match="integers"):
        add_discrete_gaussian([0.5], 1.0)


@pytest.mark.parametrize("secure", [True, False])
def test_continuous_gaussian_matches_its_cdf(secure):
    x = add_gaussian(np.full(4000, 10.0), 2.5, rng=3, secure=secure)
    assert stats.kstest((np.asarray(x) - 10.0) / 2.5, "norm").pvalue > 1e-4
    assert stats.kstest((np.asarray(x) - 10.0) / 2.0, "norm").pvalue < 1e-4


@pytest.mark.parametrize("bad", [-1.0, np.inf, np.nan])
def test_samplers_refuse_bad_sigma(bad):
    with pytest.raises(ValidationError, match="sigma"):
        add_gaussian([0.0], bad)
    with pytest.raises(ValidationError, match="sigma"):
        discrete_gaussian(bad, 2)


# --------------------------------------------------------------------------- designs
def _universe_and_metric(kind: str, rng: np.random.Generator):
    if kind == "euclidean":
        return dp.Universe.from_points(rng.random((24, 2))), metrics.Euclidean(2.0)
    if kind == "geodesic":
        pts = np.column_stack([rng.uniform(-40, 40, 20), rng.uniform(-100, 100, 20)])
        return dp.Universe.from_points(pts), metrics.Geodesic(0.002)
    if kind == "blowfish":
        return dp.Universe.from_points(rng.random((20, 1)) * 5), metrics.BlowfishThreshold(1.0, 0.8, "A")
    if kind == "discrete":
        return dp.Universe.from_points(np.arange(12.0)), metrics.Discrete(0.7)
    if kind == "attribute":
        U = dp.Universe.from_domains({"a": [0, 1, 2], "b": [0, 1], "c": [0, 1, 2]})
        return U, metrics.AttributeWeighted({"a": 0.5, "b": 1.0, "c": 2.0})
    if kind == "value":
        U = dp.Universe.from_domains({"a": [0, 1, 2], "b": [0, 1]})
        return U, metrics.ValueWeighted({"a": {0: 0.3, 1: 1.0, 2: 2.0}, "b": {0: 0.5, 1: 1.5}},
                                        rule="hub")
    if kind == "elementwise":
        return dp.Universe.from_points(np.arange(15.0)), metrics.ElementWise(rng.uniform(0.2, 2, 15))
    if kind == "graph":
        edges = [(i, i + 1, float(rng.uniform(0.3, 1.5))) for i in range(13)] + [(0, 7, 0.4)]
        return dp.Universe.from_points(np.arange(14.0)), metrics.Graph(edges, eps=1.0)
    raise AssertionError(kind)


KINDS = ["euclidean", "geodesic", "blowfish", "discrete", "attribute", "value", "elementwise",
         "graph"]


def _l2_ratios(F: np.ndarray, sigma: np.ndarray, rho: float, eps: np.ndarray) -> np.ndarray:
    """sum_k (F_ki - F_kj)^2 / sigma_k^2 / (2 rho eps_ij) on every pair i != j (brute force)."""
    diff2 = (F[:, :, None] - F[:, None, :]) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(diff2 == 0, 0.0, diff2 / (sigma[:, None, None] ** 2))
        loss = per.sum(axis=0)
        r = np.where(loss == 0, 0.0, loss / (2 * rho * eps))
    np.fill_diagonal(r, 0.0)
    return np.where(np.isinf(eps) & (loss < np.inf), 0.0, r)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("loss", ["squared", "max"])
def test_gaussian_design_is_private_on_every_pair(kind, loss):
    rng = np.random.default_rng(sum(map(ord, kind)))
    U, M = _universe_and_metric(kind, rng)
    F = rng.integers(-2, 4, size=(5, U.N)).astype(float)
    W = dp.Workload(F)
    rho = 0.3
    d = dp.design(W, U, M, noise="gaussian", rho=rho, loss=loss)
    assert isinstance(d, GaussianDesign) and d.rho == rho
    eps = M.budget(U)
    r = _l2_ratios(F, d.sigma, rho, eps)
    assert r.max() <= 1 + 1e-9
    assert r.max() >= 1 - 1e-6  # the budget is used: some pair binds
    mech = dp.DXGaussian(W, d, universe=U, metric=M)
    assert mech.max_ratio_ == pytest.approx(r.max(), rel=1e-9)
    # the realised zCDP of a move is the l2 loss / 2, at most rho * eps_ij
    i, j = np.unravel_index(np.argmax(r), r.shape)
    assert mech.privacy_loss(int(i), int(j)) <= rho * eps[i, j] * (1 + 1e-9)


def test_graph_metric_is_checked_on_every_pair_not_only_edges():
    """On a path 0-1-2 with unit edges, a query that grows by 1 per step is fine on each edge at
    sigma^2 = 1 / (2 rho) but loses 4 / 2 on the pair (0, 2) at distance 2: every pair counts."""
    U = dp.Universe.from_points(np.arange(3.0))
    M = metrics.Graph([(0, 1), (1, 2)], eps=1.0)
    W = dp.Workload([[0.0, 1.0, 2.0]])
    rho = 0.5
    d = dp.design(W, U, M, noise="gaussian", rho=rho)
    assert d.sigma[0] == pytest.approx(math.sqrt(4 / (2 * rho * 2)))
    edge_only = GaussianDesign([1.0], rho)  # satisfies both edges exactly, not the pair (0, 2)
    with pytest.raises(PrivacyViolationError, match=r"\(0, 2\)"):
        dp.DXGaussian(W, edge_only, universe=U, metric=M)


def test_gaussian_design_is_the_optimum_of_the_all_pairs_program():
    rng = np.random.default_rng(4)
    U, M = dp.Universe.from_points(rng.random((25, 2))), metrics.Euclidean(1.5)
    F = rng.integers(0, 3, size=(6, 25)).astype(float)
    rho = 0.8
    d = dp.design(dp.Workload(F), U, M, noise="gaussian", rho=rho)
    eps = M.budget(U)
    iu = np.triu_indices(25, 1)
    A = ((F[:, iu[0]] - F[:, iu[1]]) ** 2).T / eps[iu][:, None]
    q = cp.Variable(6)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.inv_pos(q))), [A @ q <= 1, q >= 0])
    prob.solve(solver=cp.CLARABEL)
    assert d.expected_squared_error() == pytest.approx(prob.value / (2 * rho), rel=1e-5)


def test_gaussian_design_with_a_geometric_index_beyond_the_prune_threshold():
    """N = 4500 points: scans go through the exact branch and bound (squared loss)."""
    rng = np.random.default_rng(8)
    pts = rng.random((4500, 2))
    U, M = dp.Universe.from_points(pts), metrics.Euclidean(3.0)
    F = np.vstack([(pts[:, 0] < t).astype(float) for t in (0.25, 0.5, 0.75)])
    d = dp.design(dp.Workload(F), U, M, noise="gaussian", rho=1.0)
    # brute force over a random sample of pairs plus the closest pairs across each threshold
    i, j = rng.integers(0, 4500, 200000), rng.integers(0, 4500, 200000)
    keep = i != j
    i, j = i[keep], j[keep]
    eps = 3.0 * np.linalg.norm(pts[i] - pts[j], axis=1)
    loss = (((F[:, i] - F[:, j]) ** 2) / d.sigma[:, None] ** 2).sum(axis=0)
    assert np.max(loss / (2 * eps)) <= 1 + 1e-9
    assert d.report["passes"]["pruned"] >= 1


@pytest.mark.parametrize("rho", [0, -1, math.inf, math.nan, "1", True])
def test_bad_rho_is_refused_clearly(rho):
    U, M = dp.Universe.from_points(np.arange(3.0)), metrics.Euclidean(1.0)
    with pytest.raises(ValidationError, match="rho"):
        dp.design(dp.Workload([[0.0, 1.0, 2.0]]), U, M, noise="gaussian", rho=rho)


def test_design_noise_arguments_are_checked():
    U, M, W = dp.Universe.from_points(np.arange(3.0)), metrics.Euclidean(1.0), dp.Workload([[0.0, 1.0, 2.0]])
    with pytest.raises(ValidationError, match="needs rho"):
        dp.design(W, U, M, noise="gaussian")
    with pytest.raises(ValidationError, match="noise='gaussian'"):
        dp.design(W, U, M, rho=1.0)
    with pytest.raises(ValidationError, match="noise"):
        dp.design(W, U, M, noise="cauchy")
    with pytest.raises(ValidationError, match="exact"):
        dp.design(W, U, M, method="uniform", noise="gaussian", rho=1.0)


# --------------------------------------------------------------------------- mechanism
def _line():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0], [4.0]]))
    return U, metrics.Euclidean(1.0), np.array([3, 1, 4, 2])


def test_dxgaussian_releases_integer_answers_exactly_and_refuses_a_second_release():
    U, M, x = _line()
    W = dp.Workload([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 0.0, 0.0]])
    mech = dp.DXGaussian(W, dp.design(W, U, M, noise="gaussian", rho=2.0))
    assert mech.integer
    y = mech.release(x, rng=0, secure=False)
    assert np.array_equal(y, np.round(y))  # discrete Gaussian on integer answers
    with pytest.raises(BudgetExceededError):
        mech.release(x, rng=1, secure=False)
    Wf = dp.Workload([[0.0, 0.5, 2.0, 3.0]])
    mf = dp.DXGaussian(Wf, dp.design(Wf, U, M, noise="gaussian", rho=2.0))
    assert not mf.integer and mf.release(x).shape == (1,)


def test_dxgaussian_refuses_a_laplace_design_and_an_unsafe_one():
    U, M, _ = _line()
    W = dp.Workload([[0.0, 1.0, 2.0, 3.0]])
    with pytest.raises(ValidationError, match="GaussianDesign"):
        dp.DXGaussian(W, dp.design(W, U, M))
    d = dp.design(W, U, M, noise="gaussian", rho=1.0)
    with pytest.raises(PrivacyViolationError):
        dp.DXGaussian(W, GaussianDesign(d.sigma * 0.99, 1.0), universe=U, metric=M)


# --------------------------------------------------------------------------- accountant
def test_zcdp_accountant_composes_laplace_and_gaussian_with_exact_units():
    U, M, x = _line()
    W = dp.Workload([[0.0, 1.0, 2.0, 3.0]])
    gauss = dp.DXGaussian(W, dp.design(W, U, M, noise="gaussian", rho=0.25), universe=U, metric=M)
    lap = dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"), universe=U, metric=M)
    assert gauss.release_notion == "zcdp" and lap.release_notion == "pure"
    assert gauss.release_cost == pytest.approx(0.25, rel=1e-8)
    assert lap.release_cost == pytest.approx(1.0, rel=1e-8)
    acc = dp.Accountant(rho=1.5)
    gauss.release(x, rng=0, secure=False, accountant=acc)
    lap.release(x, rng=0, secure=False, accountant=acc)  # pure alpha = 1 costs rho = 1
    assert acc.spent == pytest.approx(1.25, abs=1e-8)
    gauss.release(x, rng=1, secure=False, accountant=acc)
    assert acc.spent == pytest.approx(1.5, abs=1e-8)
    with pytest.raises(BudgetExceededError, match="rho"):
        gauss.release(x, rng=2, secure=False, accountant=acc)
    assert acc.spent == pytest.approx(1.5, abs=1e-8) and acc.releases == 3


def test_pure_accountant_refuses_gaussian_and_unitless_charges():
    U, M, x = _line()
    W = dp.Workload([[0.0, 1.0, 2.0, 3.0]])
    d = dp.design(W, U, M, noise="gaussian", rho=0.25)
    gauss = dp.DXGaussian(W, d, universe=U, metric=M)
    acc = dp.Accountant(total=5)
    with pytest.raises(ValidationError, match="no pure-epsilon cost"):
        gauss.release(x, rng=0, secure=False, accountant=acc)
    assert acc.spent == 0
    unitless = dp.DXGaussian(W, GaussianDesign(d.sigma, d.rho, constraints=d.constraints))
    with pytest.raises(ValidationError, match="without its universe and metric"):
        unitless.release(x, rng=0, secure=False, accountant=dp.Accountant(rho=1.0))
    # another metric's rho does not add up either
    M2 = metrics.Euclidean(2.0)
    other = dp.DXGaussian(W, dp.design(W, U, M2, noise="gaussian", rho=0.25), universe=U, metric=M2)
    zacc = dp.Accountant(rho=1.0)
    gauss.release(x, rng=0, secure=False, accountant=zacc)
    with pytest.raises(ValidationError, match="another metric"):
        other.release(x, rng=0, secure=False, accountant=zacc)
    assert zacc.spent == pytest.approx(0.25, rel=1e-8)


def test_durable_zcdp_budget_is_apart_from_the_pure_one(tmp_path):
    path = tmp_path / "b.sqlite"
    pure = dp.Accountant.durable(path, total=2.0)
    z = dp.Accountant.durable(path, rho=0.5)
    assert z.notion == "zcdp" and pure.notion == "pure"
    z.charge(0.25, notion="zcdp")
    z.charge(0.1)  # a pure release of alpha = 0.1 costs rho = 0.1
    assert dp.Accountant.durable(path, notion="zcdp").remaining == pytest.approx(0.15)
    assert dp.Accountant.durable(path).remaining == pytest.approx(2.0)
    with pytest.raises(ValidationError, match="exactly one"):
        dp.Accountant(total=1, rho=1)


# --------------------------------------------------------------------------- Gaussian strategies
def test_gaussian_strategy_mechanism_checks_every_pair_and_charges_rho():
    import dataclasses

    from solvers.strategy import materialise

    U = dp.Universe.from_points(np.arange(8.0))  # a line: its Laplace constraints are the gaps
    M = metrics.Euclidean(0.5)
    W = dp.Workload.range_queries(8, [(0, 3), (2, 6), (1, 7), (4, 5)])
    rho = 0.4
    d = dp.design_strategy(W, U, M, noise="gaussian", rho=rho)
    mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
    A = np.asarray(materialise(d.C, d.basis) if d.basis.kind != "identity" else d.C)
    A = A.toarray() if hasattr(A, "toarray") else A
    r = _l2_ratios(A, np.ones(A.shape[0]), rho, M.budget(U))
    assert r.max() <= 1 + 1e-9 and mech.max_ratio_ == pytest.approx(r.max(), rel=1e-9)
    assert mech.release_notion == "zcdp"
    assert mech.release_cost == pytest.approx(rho * r.max(), rel=1e-8)
    acc = dp.Accountant(rho=1.0)
    y = mech.release(np.arange(8), rng=0, secure=False, accountant=acc)
    assert y.shape == (4,) and acc.spent == pytest.approx(rho * r.max(), rel=1e-6)
    with pytest.raises(ValidationError, match="no pure-epsilon cost"):
        mech.release(np.arange(8), rng=0, secure=False, accountant=dp.Accountant(total=10))
    # unbiased, variance 1 per strategy row: the answers' variances are those of the design
    assert np.allclose(mech.query_variances(), d.query_variances())
    loud = dataclasses.replace(d, C=d.C * 1.01)
    with pytest.raises(PrivacyViolationError, match="2 rho"):
        dp.StrategyMechanism(W, loud, universe=U, metric=M)


# --------------------------------------------------------------------------- configs
def test_gaussian_config_records_noise_and_notion_and_is_reverified_on_load(tmp_path):
    import json

    import jsonschema

    from dprivacy.errors import ConfigError
    from tests.test_config_schema import load_schema

    def validator():
        return jsonschema.Draft202012Validator(load_schema())

    U = dp.Universe.from_points(np.arange(6.0))
    M = metrics.Graph([(i, i + 1) for i in range(5)], eps=0.5)  # every pair checked, not edges
    W = dp.Workload.range_queries(6, [(0, 2), (1, 4), (3, 5)])
    d = dp.design(W, U, M, noise="gaussian", rho=0.7)
    cfg = dp.MechanismConfig.from_design(W, U, M, d)
    doc = cfg.to_dict()
    assert doc["kind"] == "gaussian" and doc["design"]["noise"] == "gaussian"
    assert doc["design"]["notion"] == "zcdp" and doc["design"]["rho"] == 0.7
    validator().validate(doc)
    path = cfg.save(tmp_path / "g.json")
    back = dp.MechanismConfig.load(path, U, M, W)
    assert back == cfg
    mech = back.to_mechanism()
    assert isinstance(mech, dp.DXGaussian) and mech.release_notion == "zcdp"
    assert np.array_equal(mech.design.sigma, d.sigma)
    # an edited file: less noise, or more rho with the same noise -> refused on load
    for key, value in (("sigma", [s * 0.9 for s in doc["design"]["sigma"]]), ("rho", 0.5)):
        bad = json.loads(json.dumps(doc))
        bad["design"][key] = value
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(PrivacyViolationError):
            dp.MechanismConfig.load(tmp_path / "bad.json", U, M, W)
    bad = json.loads(json.dumps(doc))
    del bad["design"]["notion"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="notion"):
        dp.MechanismConfig.load(tmp_path / "bad.json", U, M, W)
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(bad)


def test_gaussian_strategy_config_keeps_its_noise_and_rho(tmp_path):
    import json

    U = dp.Universe.from_points(np.arange(8.0))
    M = metrics.Euclidean(0.5)
    W = dp.Workload.range_queries(8, [(0, 3), (2, 6), (1, 7), (4, 5)])
    d = dp.design_strategy(W, U, M, noise="gaussian", rho=0.4)
    cfg = dp.MechanismConfig.from_design(W, U, M, d)
    doc = cfg.to_dict()
    assert doc["design"]["strategy"]["noise"] == "gaussian"
    assert doc["design"]["strategy"]["rho"] == 0.4
    mech = dp.MechanismConfig.load(cfg.save(tmp_path / "s.json"), U, M, W).to_mechanism()
    assert mech.design.noise == "gaussian" and mech.release_notion == "zcdp"
    assert mech.release_cost == pytest.approx(0.4 * mech.max_ratio_, rel=1e-8)
    doc["design"]["strategy"]["rho"] = 0.3  # the same strategy claimed at a smaller rho
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(PrivacyViolationError):
        dp.MechanismConfig.load(tmp_path / "bad.json", U, M, W)
