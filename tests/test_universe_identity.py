"""A config names what differs when it is refused for another universe, and the README's Python
universe of US cities is the command line's ``builtin:us_cities`` (a config made in Python
verifies from the command line with the queries written by :meth:`Workload.to_csv`)."""

from __future__ import annotations

import numpy as np
import pytest

import dprivacy as dp
from dprivacy.cli import main
from dprivacy.data import load_us_cities
from dprivacy.errors import ConfigMismatchError, ValidationError

M = dp.metrics.Geodesic(eps_per_km=0.1)


@pytest.fixture(scope="module")
def cities():
    return load_us_cities()


def _config(U: dp.Universe, path) -> dp.Workload:
    W = dp.Workload(np.linspace(0.0, 1.0, U.N)[None, :], names=("ramp",))
    d = dp.design(W, U, M, method="closed_form")
    dp.MechanismConfig.from_design(W, U, M, d).save(path)
    return W


def test_readme_cities_config_verifies_with_the_builtin_universe(cities, tmp_path, capsys):
    U = dp.Universe.from_dataframe(cities, ["name", "state"], coords=["latitude", "longitude"])
    W = _config(U, tmp_path / "config.json")
    W.to_csv(tmp_path / "queries.csv", U)
    code = main(["verify", str(tmp_path / "config.json"), "--universe", "builtin:us_cities",
                 "--metric", "geodesic", "--param", "eps_per_km=0.1",
                 "--queries", str(tmp_path / "queries.csv")])
    out = capsys.readouterr()
    assert code == 0, out.err
    # the written file reads back to the same matrix (the fingerprint the config holds)
    from dprivacy.cli import load_workload
    assert load_workload(str(tmp_path / "queries.csv"), U).fingerprint() == W.fingerprint()


def test_a_refusal_names_what_differs(cities, tmp_path, capsys):
    labels = (cities["name"] + ", " + cities["state"]).tolist()
    xy = cities[["latitude", "longitude"]].to_numpy()
    U = dp.Universe.from_points(xy, names=labels)  # "City, ST" labels, one key column
    W = _config(U, tmp_path / "config.json")
    W.to_csv(tmp_path / "queries.csv")
    code = main(["verify", str(tmp_path / "config.json"), "--universe", "builtin:us_cities",
                 "--metric", "geodesic", "--param", "eps_per_km=0.1",
                 "--queries", str(tmp_path / "queries.csv")])
    err = capsys.readouterr().err
    assert code != 0
    assert "key columns: ['name'] in the config, ['name', 'state'] given" in err
    assert "Anchorage, AK" in err and "Anchorage|AK" in err
    cases = {
        "order: the same element labels in another order":
            dp.Universe.from_points(xy[::-1], names=labels[::-1]),
        "size: 810 elements in the config, 809 given":
            dp.Universe.from_points(xy[:-1], names=labels[:-1]),
        "coordinates: other values": dp.Universe.from_points(xy + 0.01, names=labels),
    }
    for what, other in cases.items():
        Wo = W if other.N == U.N else dp.Workload(W.F[:, :-1])
        with pytest.raises(ConfigMismatchError) as exc:
            dp.MechanismConfig.load(tmp_path / "config.json", other, M, Wo)
        assert what in str(exc.value)


def test_to_csv_round_trips_and_refuses_numeric_names(tmp_path):
    rng = np.random.default_rng(1)
    U = dp.Universe.from_points(rng.uniform(size=(5, 2)))
    W = dp.Workload(rng.uniform(size=(3, 5)) / 7)
    W.to_csv(tmp_path / "w.csv", U)
    from dprivacy.cli import load_workload
    back = load_workload(str(tmp_path / "w.csv"), U)
    assert np.array_equal(back.dense(), W.dense()) and back.query_names() == W.query_names()
    with pytest.raises(ValidationError, match="looks like a number"):
        dp.Workload(np.eye(2), names=("1", "2")).to_csv(tmp_path / "x.csv")
