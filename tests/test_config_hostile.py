"""Hostile mechanism-config files: every refusal is a dprivacy ConfigError, never a raw Python
error (ValueError, OverflowError, TypeError) that a caller would not expect."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dprivacy as dp
from dprivacy import config as config_mod
from dprivacy.config import MechanismConfig
from dprivacy.errors import ConfigError


@pytest.fixture(scope="module")
def inputs():
    U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    W, M = dp.Workload([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]]), dp.metrics.Euclidean(1.0)
    d = dp.design(W, U, M, method="equal_split")
    doc = MechanismConfig.from_design(W, U, M, d).to_dict()
    return U, M, W, doc


BAD_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 5000, "1" + "0" * 40,
              "3.5", "true", "-3", "0", '"3"', "[3]", "1e300", "null", "{}"]


@pytest.mark.parametrize("kind,param", [("mwem", "T"), ("smalldb", "size")])
@pytest.mark.parametrize("token", BAD_TOKENS)
def test_bad_mechanism_parameters_raise_config_error(inputs, tmp_path, kind, param, token):
    U, M, W, doc = inputs
    d = dict(doc, kind=kind, params={param: 7})
    text = json.dumps(d).replace(f'"{param}": 7', f'"{param}": {token}')
    assert token in text
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError):
        MechanismConfig.load(path, U, M, W)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**400, 2**40, True, 2.0, -1,
                                   "7", [7], None])
def test_from_dict_checks_parameters_too(inputs, value):
    U, M, W, doc = inputs
    with pytest.raises(ConfigError):
        MechanismConfig.from_dict(dict(doc, kind="smalldb", params={"size": value}))


@pytest.mark.parametrize("token", ["NaN", "Infinity", "1e999", "9" * 30])
def test_non_finite_or_huge_numbers_anywhere_are_refused(inputs, tmp_path, token):
    U, M, W, doc = inputs
    d = dict(doc)
    d["design"] = dict(doc["design"], objective=123456.5)
    text = json.dumps(d).replace("123456.5", token)
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError):
        MechanismConfig.load(path, U, M, W)


def test_a_valid_config_still_loads(inputs, tmp_path):
    U, M, W, doc = inputs
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    assert MechanismConfig.load(path, U, M, W).kind == "laplace"


def test_file_size_is_capped_like_the_command_line(inputs, tmp_path, monkeypatch):
    U, M, W, doc = inputs
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(config_mod, "MAX_BYTES", 100)
    with pytest.raises(ConfigError, match="larger than"):
        MechanismConfig.load(path, U, M, W)
