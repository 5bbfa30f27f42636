"""The published JSON Schema of the mechanism config validates what MechanismConfig writes."""

from __future__ import annotations

import copy
import json
from importlib import resources

import jsonschema
import numpy as np
import pytest

import dprivacy as dp
from dprivacy import config
from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB


def load_schema() -> dict:
    """The schema of the version MechanismConfig writes, from the installed package data."""
    name = f"mechanism-config.v{config.VERSION}.schema.json"
    path = resources.files("dprivacy") / "schemas" / name
    assert path.is_file(), f"dprivacy/schemas/{name} is missing: publish the schema of this version"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    """Config documents of every kind, as written to disk by MechanismConfig.save."""
    rng = np.random.default_rng(3)
    U = dp.Universe.from_points(rng.uniform(0, 3, size=(8, 2)))
    M = dp.metrics.Euclidean(1.0)
    F = rng.uniform(0, 1, size=(3, 8))
    F[2] = 0.5  # a constant query: beta = inf, written as a tagged float
    W = dp.Workload(F)
    n = 300
    G = dp.metrics.Graph([(i, i + 1) for i in range(7)])
    made = {
        "laplace": config.MechanismConfig.from_design(W, U, M, dp.design(W, U, M, method="exact")),
        "laplace_graph": config.MechanismConfig.from_design(W, U, G, dp.design(W, U, G)),
        "baseline": config.MechanismConfig.from_mechanism(dp.Laplace.for_metric(W, U, M), U, M),
        "exponential": config.MechanismConfig.from_mechanism(DXExponential.optimal(W, U, M), U, M),
        "smalldb": config.MechanismConfig.from_mechanism(
            DXSmallDB.from_solver(W, U, M, n, size=2), U, M),
        "mwem": config.MechanismConfig.from_mechanism(DXMWEM.from_solver(W, U, M, n), U, M),
        "gaussian": config.MechanismConfig.from_design(
            W, U, G, dp.design(W, U, G, noise="gaussian", rho=0.5)),
    }
    return {k: json.loads(cfg.to_json()) for k, cfg in made.items()}


def test_the_schema_names_what_the_code_writes() -> None:
    schema = load_schema()
    assert schema["properties"]["schema"]["const"] == config.SCHEMA
    assert schema["properties"]["version"]["const"] == config.VERSION
    # strategy mechanisms are written as version 3 (tests/mechanisms/test_strategy_config.py)
    assert set(schema["properties"]["kind"]["enum"]) == set(config.KINDS) - {"strategy"}


def test_every_kind_validates(validator: jsonschema.Draft202012Validator,
                              documents: dict[str, dict]) -> None:
    assert {d["kind"] for d in documents.values()} == set(config.KINDS) - {"strategy"}
    for name, doc in documents.items():
        errors = [e.message for e in validator.iter_errors(doc)]
        assert not errors, f"{name}: {errors}"
    # the constant query really was written as a tagged non-finite float
    assert {"__float__": "inf"} in documents["laplace"]["design"]["beta"]


@pytest.mark.parametrize("edit", [
    lambda d: d.pop("design"),
    lambda d: d.update(version=d["version"] + 1),
    lambda d: d.update(kind="gaussian"),
    lambda d: d["design"].update(beta=[]),
    lambda d: d["design"].update(beta=["1.0"]),
    lambda d: d["design"]["beta"].__setitem__(0, {"__float__": "Infinity"}),
    lambda d: d["universe"].update(N=0),
    lambda d: d["metric"].pop("fingerprint"),
    lambda d: d["workload"].update(fingerprint=17),
])
def test_broken_documents_are_rejected(validator: jsonschema.Draft202012Validator,
                                       documents: dict[str, dict], edit) -> None:
    doc = copy.deepcopy(documents["laplace"])
    edit(doc)
    assert list(validator.iter_errors(doc))


def test_kind_specific_parameters_are_required(validator: jsonschema.Draft202012Validator,
                                               documents: dict[str, dict]) -> None:
    for kind, key in (("smalldb", "size"), ("mwem", "T")):
        doc = copy.deepcopy(documents[kind])
        doc["params"].pop(key)
        assert list(validator.iter_errors(doc)), kind
