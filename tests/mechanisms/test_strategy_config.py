"""Strategy designs export to and reload from a mechanism config (version 3), re-verified."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import dprivacy as dp
from dprivacy import config
from dprivacy.errors import ConfigError, ConfigMismatchError, PrivacyViolationError


def _inputs(kind: str):
    if kind == "line":  # tree basis, sparse C
        U = dp.Universe.from_points(np.arange(10.0)[:, None])
        return U, dp.metrics.Euclidean(0.5), dp.Workload.range_queries(10, count=8, rng=1)
    if kind == "discrete":  # identity basis, C a sparse scaled identity: 1/3 non-zero, so dense
        U = dp.Universe.from_points(np.arange(3.0)[:, None])
        return U, dp.metrics.Discrete(1.0), dp.Workload(np.eye(3)[[k % 3 for k in range(30)]])
    rng = np.random.default_rng(2)  # identity basis, dense C
    U = dp.Universe.from_points(rng.uniform(0, 3, (8, 2)))
    return U, dp.metrics.Euclidean(1.0), dp.Workload(rng.random((3, 8)))


@pytest.mark.parametrize("kind", ["line", "plane", "discrete"])
def test_round_trip_and_schema(kind: str, tmp_path: Path) -> None:
    U, M, W = _inputs(kind)
    sd = dp.design_strategy(W, U, M, rounds=1)
    cfg = config.MechanismConfig.from_design(W, U, M, sd)
    path = cfg.save(tmp_path / "s.json")
    doc = json.loads(path.read_text())
    assert doc["version"] == 3 and doc["kind"] == "strategy"
    assert ("dense" in doc["design"]["strategy"]) == (kind != "line")
    schema = json.loads((resources.files("dprivacy") / "schemas"
                         / "mechanism-config.v3.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema)
    back = config.MechanismConfig.load(path, U, M, W)
    assert back == cfg
    mech = back.to_mechanism()
    assert isinstance(mech, dp.StrategyMechanism)
    assert np.array_equal(back.design().strategy, sd.strategy)
    assert mech.expected_squared_error() == pytest.approx(sd.expected_squared_error(), rel=1e-12)
    assert mech.release(np.arange(U.N), rng=0, secure=False).shape == (W.m,)
    # a laplace config is still written as version 2
    lap = config.MechanismConfig.from_design(W, U, M, dp.design(W, U, M, method="uniform"))
    assert json.loads(lap.to_json())["version"] == 2


def test_tampered_or_mismatched_files_are_refused(tmp_path: Path) -> None:
    U, M, W = _inputs("plane")
    sd = dp.design_strategy(W, U, M, rounds=1)
    doc = json.loads(config.MechanismConfig.from_design(W, U, M, sd).to_json())
    bad = json.loads(json.dumps(doc))
    bad["design"]["strategy"]["dense"] = [2 * v for v in bad["design"]["strategy"]["dense"]]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PrivacyViolationError):
        config.MechanismConfig.load(tmp_path / "bad.json", U, M, W)
    with pytest.raises(ConfigMismatchError, match="workload"):
        (tmp_path / "ok.json").write_text(json.dumps(doc))
        config.MechanismConfig.load(tmp_path / "ok.json", U, M, dp.Workload(np.ones((3, 8))))
    for edit in (lambda d: d.update(version=2),
                 lambda d: d["design"].pop("strategy"),
                 lambda d: d["design"]["strategy"].update(shape=[3, 7]),
                 lambda d: d["design"]["strategy"]["basis"].update(kind="tree", parent=[0] * 8,
                                                                    order=list(range(8)))):
        t = json.loads(json.dumps(doc))
        edit(t)
        (tmp_path / "t.json").write_text(json.dumps(t))
        with pytest.raises(ConfigError):
            config.MechanismConfig.load(tmp_path / "t.json", U, M, W)
