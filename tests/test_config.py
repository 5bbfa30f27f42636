"""MechanismConfig: exact round trip, fingerprints, re-verification on load, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import metrics
from dprivacy.config import SCHEMA, MechanismConfig
from dprivacy.errors import ConfigError, ConfigMismatchError, PrivacyViolationError
from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(5)
    U = dp.Universe.from_points(rng.uniform(0, 3, size=(10, 2)))
    M = metrics.Euclidean(1.0)
    W = dp.Workload(rng.uniform(0, 1, size=(3, 10)))
    return U, M, W


def all_configs(U, M, W):
    n = 400
    d = dp.design(W, U, M, method="exact")
    return {
        "laplace": MechanismConfig.from_design(W, U, M, d),
        "baseline": MechanismConfig.from_mechanism(dp.Laplace.for_metric(W, U, M), U, M),
        "exponential": MechanismConfig.from_mechanism(DXExponential.optimal(W, U, M), U, M),
        "smalldb": MechanismConfig.from_mechanism(DXSmallDB.from_solver(W, U, M, n, size=2), U, M),
        "mwem": MechanismConfig.from_mechanism(DXMWEM.from_solver(W, U, M, n), U, M),
    }


@pytest.fixture(scope="module")
def configs(inputs):
    return all_configs(*inputs)


def test_round_trip_is_exact_for_every_kind(inputs, configs, tmp_path):
    U, M, W = inputs
    x = np.arange(10)
    for name, cfg in configs.items():
        path = cfg.save(tmp_path / f"{name}.json")
        back = MechanismConfig.load(path, U, M, W)
        assert back == cfg, name
        assert back.beta.tobytes() == cfg.beta.tobytes() and back.w.tobytes() == cfg.w.tobytes()
        assert back.report == cfg.report
        mech = back.to_mechanism()
        assert mech.kind == cfg.kind and back.design().constraints is not None
        assert np.array_equal(back.design().beta, cfg.beta)
        out = mech.release(x, rng=0, secure=False)
        assert np.all(np.isfinite(np.atleast_1d(out)))
        assert not list(tmp_path.glob(".*.tmp"))  # atomic save leaves no temporary file
    assert configs["mwem"].params["T"] >= 1
    assert configs["smalldb"].params == {"size": 2}


def test_infinity_and_nan_round_trip(inputs, tmp_path):
    U, M, _ = inputs
    F = np.zeros((2, U.N))
    F[0, :] = np.linspace(0, 1, U.N)  # query 1 is constant: beta = inf, exact answer
    W = dp.Workload(F)
    d = dp.design(W, U, M, method="exact")
    assert np.isinf(d.beta[1])
    cfg = MechanismConfig.from_design(W, U, M, d)
    text = cfg.to_json()
    assert "Infinity" not in text and "NaN" not in text  # strict JSON
    back = MechanismConfig.load(cfg.save(tmp_path / "c.json"), U, M, W)
    assert back == cfg and np.isinf(back.beta[1])
    d2 = dp.Design(d.w, d.beta, method="manual", constraints=d.constraints)  # objective = nan
    cfg2 = MechanismConfig.from_design(W, U, M, d2)
    assert np.isnan(cfg2.objective)
    assert MechanismConfig.load(cfg2.save(tmp_path / "n.json"), U, M, W) == cfg2


def _tamper(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("kind", ["laplace", "exponential", "smalldb", "mwem"])
def test_raised_beta_is_refused(inputs, configs, tmp_path, kind):
    U, M, W = inputs
    cfg = configs[kind]
    path = cfg.save(tmp_path / "c.json")

    def raise_beta(doc):
        doc["design"]["beta"] = [b * 1.01 for b in doc["design"]["beta"]]

    _tamper(path, raise_beta)
    with pytest.raises(PrivacyViolationError):
        MechanismConfig.load(path, U, M, W)
    if kind == "mwem":  # more rounds at the same beta are refused as well
        path = cfg.save(tmp_path / "t.json")
        _tamper(path, lambda doc: doc["params"].update(T=doc["params"]["T"] + 1))
        with pytest.raises(PrivacyViolationError, match="Theorem 7"):
            MechanismConfig.load(path, U, M, W)


def test_other_inputs_are_refused_naming_the_part(inputs, configs, tmp_path):
    U, M, W = inputs
    path = configs["laplace"].save(tmp_path / "c.json")
    U2 = dp.Universe.from_points(np.asarray(U.coords) * 1.5)
    W2 = dp.Workload(W.dense()[::-1])
    with pytest.raises(ConfigMismatchError, match="another universe"):
        MechanismConfig.load(path, U2, M, W)
    with pytest.raises(ConfigMismatchError, match="another metric.*params"):
        MechanismConfig.load(path, U, metrics.Euclidean(2.0), W)
    with pytest.raises(ConfigMismatchError, match="another metric.*name"):
        MechanismConfig.load(path, U, metrics.BlowfishThreshold(theta=1.0, eps=1.0, rule="B"), W)
    with pytest.raises(ConfigMismatchError, match="another workload"):
        MechanismConfig.load(path, U, M, W2)
    # an edited fingerprint is a mismatch too
    _tamper(path, lambda doc: doc["workload"].update(fingerprint="0" * 64))
    with pytest.raises(ConfigMismatchError, match="workload"):
        MechanismConfig.load(path, U, M, W)


def test_malformed_files_are_refused(inputs, configs, tmp_path):
    U, M, W = inputs
    good = configs["laplace"].to_json()
    cases = {
        "truncated": good[: len(good) // 2],
        "not_json": "this is not JSON\n",
        "empty": "",
        "array": "[1, 2, 3]",
        "schema": good.replace(SCHEMA, "something.else"),
        "version": good.replace('"version": 2', '"version": 99'),
        "encoding": good.replace('"dprivacy-fp-2"', '"dprivacy-fp-99"'),
        "kind": good.replace('"kind": "laplace"', '"kind": "gaussian"'),
        "w_type": good.replace('"w": [', '"w": ["one", '),
    }
    for name, text in cases.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        with pytest.raises(ConfigError) as info:
            MechanismConfig.load(p, U, M, W)
        assert not isinstance(info.value, ConfigMismatchError), name
    with pytest.raises(ConfigError, match="unknown fingerprint encoding"):
        MechanismConfig.load(tmp_path / "encoding.json", U, M, W)
    with pytest.raises(ConfigError, match="unknown config version 99"):
        MechanismConfig.load(tmp_path / "version.json", U, M, W)
    with pytest.raises(ConfigError, match="cannot read"):
        MechanismConfig.load(tmp_path / "missing.json", U, M, W)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        MechanismConfig.load(tmp_path / "bin.json", U, M, W)


def test_from_design_refuses_an_unsafe_design_and_unbound_use(inputs):
    U, M, W = inputs
    d = dp.design(W, U, M, method="exact")
    bad = dp.Design(d.w, d.beta * 1.5, constraints=d.constraints)
    with pytest.raises(PrivacyViolationError):
        MechanismConfig.from_design(W, U, M, bad)
    cfg = MechanismConfig.from_dict(json.loads(MechanismConfig.from_design(W, U, M, d).to_json()))
    with pytest.raises(ConfigError, match="not bound"):
        cfg.to_mechanism()
    assert cfg.bind(W, U, M).to_mechanism().kind == "laplace"


def test_universe_is_checked_before_a_metric_that_cannot_apply(inputs, tmp_path):
    """A Matrix metric sized for the config's universe, loaded with a larger universe: the error
    names the universe (the metric is not evaluated on a universe it does not fit)."""
    U, _, W = inputs
    M = metrics.Matrix(metrics.Euclidean(1.0).budget(U))
    path = MechanismConfig.from_design(W, U, M, dp.design(W, U, M, method="exact")).save(
        tmp_path / "m.json")
    U2 = dp.Universe.from_points(np.vstack([np.asarray(U.coords), [[9.0, 9.0]]]))
    W2 = dp.Workload(np.hstack([W.dense(), np.zeros((W.m, 1))]))
    with pytest.raises(ConfigMismatchError, match="another universe"):
        MechanismConfig.load(path, U2, M, W2)
    assert MechanismConfig.load(path, U, M, W).to_mechanism().kind == "laplace"


@pytest.mark.parametrize("kind", ["laplace", "exponential", "smalldb", "mwem"])
def test_a_self_certified_config_is_refused(inputs, configs, tmp_path, kind):
    """beta x 100 with the metric's eps x 100 and every fingerprint recomputed consistently: the
    file vouches for itself, but load() takes the metric from the caller, so it is refused."""
    U, M, W = inputs
    path = configs[kind].save(tmp_path / "c.json")
    fake = metrics.Euclidean(100.0)
    forged = {"name": fake.name, "params": fake.params(), "fingerprint": fake.fingerprint(U)}

    def forge(doc):
        doc["design"]["beta"] = [b * 100 for b in doc["design"]["beta"]]
        doc["metric"] = forged
        doc["universe"]["fingerprint"] = U.fingerprint()
        doc["workload"]["fingerprint"] = W.fingerprint()

    _tamper(path, forge)
    assert MechanismConfig.load(path, U, fake, W).beta[0] > 0  # consistent with its own claim
    with pytest.raises(ConfigMismatchError, match="another metric"):
        MechanismConfig.load(path, U, M, W)  # ... but not with the caller's metric

    def forge_keep_identity(doc):  # keep the true metric identity: the privacy check refuses
        doc["metric"] = configs[kind].to_dict()["metric"]

    _tamper(path, forge_keep_identity)
    with pytest.raises(PrivacyViolationError):
        MechanismConfig.load(path, U, M, W)


def test_version_1_configs_still_load(inputs, configs, tmp_path):
    """Config version 1 (fingerprints through pandas' CSV writer) is still read, with its own
    fingerprints; a version-1 file with version-2 fingerprints is a mismatch."""
    U, M, W = inputs
    doc = configs["laplace"].to_dict()
    doc["version"] = 1
    del doc["fingerprint_encoding"]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigMismatchError):
        MechanismConfig.load(path, U, M, W)
    doc["universe"]["fingerprint"] = U.legacy_fingerprint_v1()
    doc["metric"]["fingerprint"] = M.legacy_fingerprint_v1(U)
    doc["workload"]["fingerprint"] = W.legacy_fingerprint_v1()
    path.write_text(json.dumps(doc))
    back = MechanismConfig.load(path, U, M, W)
    assert back.to_mechanism().kind == "laplace" and back.encoding == "dprivacy-fp-2"
    assert MechanismConfig.from_dict(doc).to_dict()["version"] == 1  # unbound: kept as read
    saved = back.save(tmp_path / "again.json")  # re-saved in the current version
    assert json.loads(saved.read_text())["version"] == 2
    assert MechanismConfig.load(saved, U, M, W) == back


def test_golden_configs_keep_loading(tmp_path):
    """Configs written by dprivacy 0.1 (tests/data/golden) load, verify and release with the
    inputs rebuilt from tests/golden_inputs.py, in this and every later version."""
    from tests.golden_inputs import GOLDEN, inputs

    cases = inputs()
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(cases)
    for name, (U, M, W, kind) in cases.items():
        doc = json.loads((GOLDEN / f"{name}.json").read_text())
        assert doc["version"] == 2 and doc["fingerprint_encoding"] == "dprivacy-fp-2", name
        cfg = MechanismConfig.load(GOLDEN / f"{name}.json", U, M, W)
        assert cfg.kind == kind
        mech = cfg.to_mechanism()
        x = np.arange(1, U.N + 1)
        out = mech.release(x, rng=0, secure=False, accountant=dp.Accountant(total=1))
        assert np.all(np.isfinite(np.atleast_1d(out)))
        # the recorded fingerprints are exactly today's (the encoding did not drift)
        assert doc["universe"]["fingerprint"] == U.fingerprint(), name
        assert doc["metric"]["fingerprint"] == M.fingerprint(U), name
        assert doc["workload"]["fingerprint"] == W.fingerprint(), name
        # and other inputs are refused
        with pytest.raises(ConfigMismatchError):
            MechanismConfig.load(GOLDEN / f"{name}.json", U, M,
                                 dp.Workload(W.dense() * 2))


def test_deeply_nested_files_are_config_errors(inputs, configs, tmp_path):
    U, M, W = inputs
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        MechanismConfig.load(p, U, M, W)
    doc = configs["laplace"].to_dict()
    deep: dict = {}
    cur = deep
    for _ in range(50_000):
        cur["a"] = {}
        cur = cur["a"]
    doc["design"]["report"] = deep
    with pytest.raises(ConfigError, match="nested too deeply"):
        MechanismConfig.from_dict(doc)
