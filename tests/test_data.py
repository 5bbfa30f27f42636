"""Tests of dprivacy.data: shipped datasets (columns, validity) and synthetic universes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from geopy.distance import great_circle

from dprivacy import data
from dprivacy.errors import ValidationError


@pytest.fixture(scope="module")
def cities() -> pd.DataFrame:
    return data.load_us_cities()


def test_us_cities_columns_and_types(cities: pd.DataFrame) -> None:
    assert tuple(cities.columns) == data.US_CITIES_COLUMNS
    assert pd.api.types.is_float_dtype(cities.latitude)
    assert pd.api.types.is_float_dtype(cities.longitude)
    assert pd.api.types.is_integer_dtype(cities.population)
    assert pd.api.types.is_integer_dtype(cities.elevation)
    assert not cities.isna().any().any()


def test_us_cities_are_valid_and_distinct(cities: pd.DataFrame) -> None:
    assert len(cities) > 500
    assert cities.latitude.between(-90, 90).all() and cities.longitude.between(-180, 180).all()
    # the US box (Hawaii to Maine, Florida Keys to Alaska)
    assert cities.latitude.between(18, 72).all() and cities.longitude.between(-170, -65).all()
    assert (cities.population > 50_000).all()
    assert not cities.duplicated(["name", "state"]).any()
    assert not cities.duplicated(["latitude", "longitude"]).any()
    assert cities.state.str.fullmatch(r"[A-Z]{2}").all()
    assert cities.elevation.between(-100, 4500).all()  # metres; Death Valley to Colorado peaks


def test_us_cities_cleaning(cities: pd.DataFrame) -> None:
    names = set(zip(cities.name, cities.state, strict=True))
    assert ("New York City", "NY") in names and ("Brooklyn", "NY") not in names
    assert ("Miami Gardens", "FL") in names and ("Carol City", "FL") not in names
    xy = np.radians(cities[["latitude", "longitude"]].to_numpy())
    lat, lon = xy[:, 0], xy[:, 1]
    h = (
        np.sin((lat[:, None] - lat) / 2) ** 2
        + np.cos(lat[:, None]) * np.cos(lat) * np.sin((lon[:, None] - lon) / 2) ** 2
    )
    d = 2 * 6371.0088 * np.arcsin(np.sqrt(h))
    np.fill_diagonal(d, np.inf)
    i, j = np.unravel_index(np.argmin(d), d.shape)
    assert d[i, j] >= 0.5  # near-duplicates merged (README: smallest distance 0.80 km)
    pi, pj = cities.iloc[i], cities.iloc[j]
    ref = great_circle((pi.latitude, pi.longitude), (pj.latitude, pj.longitude)).km
    assert d[i, j] == pytest.approx(ref, rel=1e-3)


def test_load_returns_a_copy(cities: pd.DataFrame) -> None:
    cities.loc[0, "population"] = -1
    assert data.load_us_cities().loc[0, "population"] > 50_000


def test_example1_universe() -> None:
    df = data.load_example1()
    assert tuple(df.columns) == data.EXAMPLE1_COLUMNS
    assert list(df.label) == ["MYA", "MYB", "MNA", "MNB", "FYA", "FYB", "FNA", "FNB"]
    assert set(df.gender) == {"M", "F"} and set(df.native) == {"Y", "N"}
    assert set(df.age) == {"A", "B"}
    assert not df.duplicated(["gender", "native", "age"]).any()


def test_synthetic_points_distinct_on_grid() -> None:
    p = data.synthetic_points(N=1000, grid=1000, rng=0)
    assert p.shape == (1000, 2)
    assert np.all(p == np.round(p)) and p.min() >= 1 and p.max() <= 1000
    assert len(np.unique(p, axis=0)) == 1000
    full = data.synthetic_points(N=9, grid=3, rng=1)  # the whole grid
    assert {tuple(r) for r in full} == {(a, b) for a in (1, 2, 3) for b in (1, 2, 3)}


def test_synthetic_points_seeded_and_errors() -> None:
    a = data.synthetic_points(50, 20, rng=5)
    assert np.array_equal(a, data.synthetic_points(50, 20, rng=5))
    assert not np.array_equal(a, data.synthetic_points(50, 20, rng=6))
    with pytest.raises(ValidationError, match="do not fit"):
        data.synthetic_points(N=10, grid=3)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValidationError):
            data.synthetic_points(N=bad)  # type: ignore[arg-type]


def test_random_histogram() -> None:
    x = data.random_histogram(100, 10_000, rng=3)
    assert x.shape == (100,) and x.dtype == np.int64
    assert x.sum() == 10_000 and x.min() >= 0
    assert np.array_equal(x, data.random_histogram(100, 10_000, rng=3))
    assert not np.array_equal(x, data.random_histogram(100, 10_000, rng=4))
    assert data.random_histogram(5, 0, rng=0).sum() == 0
    with pytest.raises(ValidationError):
        data.random_histogram(0, 10)
    with pytest.raises(ValidationError):
        data.random_histogram(5, -1)
