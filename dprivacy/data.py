"""Shipped datasets and synthetic universes for the paper's experiments (paper §4).

* :func:`load_us_cities` — the real-data universe of paper §4.3: US cities with more than 50 000
  inhabitants, from GeoNames (CC BY 4.0), with elevation for the "average elevation of a
  resident's house" query. Not the paper's 2018 simplemaps list of 741 cities; see
  ``datasets/README.md``.
* :func:`load_example1` — the binary universe of the paper's Example 1 (Gender, Native, Age).
* :func:`synthetic_points`, :func:`random_histogram` — the synthetic data of paper §4.1
  (settings P1-P3 of docs/reproduction.md: N = 1000 distinct points on the grid {1..1000}², a
  random histogram of n records).

Privacy condition: none here; these are inputs. The location metric of paper §4.1/§4.3 is
``eps_ij = eps * ||p_i - p_j||`` (see docs/theory.md), built elsewhere from these coordinates.

The data files live in the repository's ``datasets/`` folder, which the wheel ships as
``dprivacy/_datasets`` (pyproject ``force-include``); editable installs read the folder itself.
"""

from __future__ import annotations

import logging
from functools import cache
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.noise import resolve_rng

__all__ = [
    "US_CITIES_COLUMNS",
    "EXAMPLE1_COLUMNS",
    "dataset_path",
    "load_us_cities",
    "load_example1",
    "synthetic_points",
    "random_histogram",
]

logger = logging.getLogger(__name__)

#: Columns of :func:`load_us_cities`, in order.
US_CITIES_COLUMNS = ("name", "state", "latitude", "longitude", "population", "elevation")
#: Columns of :func:`load_example1`, in order.
EXAMPLE1_COLUMNS = ("label", "gender", "native", "age")
_EXAMPLE1_ORDER = ("MYA", "MYB", "MNA", "MNB", "FYA", "FYB", "FNA", "FNB")


def dataset_path(name: str) -> Path:
    """Path of a shipped data file, e.g. ``dataset_path("us_cities.csv")``.

    Looks in the installed package (``dprivacy/_datasets``, wheel installs) and falls back to the
    repository's ``datasets/`` folder next to the package (editable installs).
    """
    candidates = [
        Path(str(files("dprivacy") / "_datasets" / name)),
        Path(__file__).resolve().parent.parent / "datasets" / name,
    ]
    for path in candidates:
        if path.is_file():
            logger.debug("data file %s read from %s", name, path)
            return path
    raise FileNotFoundError(
        f"data file {name!r} not found in {[str(p.parent) for p in candidates]}; "
        "reinstall dprivacy or run from a checkout that has datasets/"
    )


@cache
def _read_us_cities() -> pd.DataFrame:
    path = dataset_path("us_cities.csv")
    df = pd.read_csv(
        path,
        dtype={"name": str, "state": str, "latitude": float, "longitude": float},
        keep_default_na=False,
        na_values=[""],
    )
    _validate_cities(df, path)
    return df


def _validate_cities(df: pd.DataFrame, path: Path) -> None:
    """Raise ValidationError naming the first problem of the cities table."""
    if tuple(df.columns) != US_CITIES_COLUMNS:
        raise ValidationError(f"{path}: columns {list(df.columns)}, expected {US_CITIES_COLUMNS}")
    if df.isna().any().any():
        col = df.columns[df.isna().any()][0]
        raise ValidationError(f"{path}: column {col!r} has missing values")
    num = df[["latitude", "longitude", "population", "elevation"]].to_numpy(dtype=float)
    if not np.all(np.isfinite(num)):
        raise ValidationError(f"{path}: non-finite numbers")
    checks = {
        "latitude outside [-90, 90]": ~df.latitude.between(-90, 90),
        "longitude outside [-180, 180]": ~df.longitude.between(-180, 180),
        "population <= 50000": df.population <= 50_000,
        "duplicate (name, state)": df.duplicated(["name", "state"]),
        "duplicate coordinates": df.duplicated(["latitude", "longitude"]),
    }
    for what, bad in checks.items():
        if bad.any():
            row = df[bad].iloc[0]
            raise ValidationError(f"{path}: {what}, first at {row['name']}, {row['state']}")


def load_us_cities() -> pd.DataFrame:
    """US cities with more than 50 000 inhabitants (GeoNames cities15000, CC BY 4.0).

    Columns (one row per city, sorted by state then name): name (str), state (two-letter code,
    str), latitude, longitude (decimal degrees, WGS84, float), population (int, GeoNames),
    elevation (int, metres; GeoNames ``elevation``, else its DEM value).

    Validated on load: no missing values, finite numbers, latitude in [-90, 90], longitude in
    [-180, 180], no duplicate (name, state) or coordinates. Returns a fresh copy each call.
    """
    return _read_us_cities().copy()


def load_example1() -> pd.DataFrame:
    """The 8-element universe of the paper's Example 1 (eq. (3)), in the paper's order.

    Columns: label (``"MYA"`` ...), gender (M/F), native (Y/N), age (A/B). Row k is element
    k + 1 of ``MYA, MYB, MNA, MNB, FYA, FYB, FNA, FNB`` (gender varies slowest), the order of
    ``Universe.from_domains({"gender": ["M", "F"], "native": ["Y", "N"], "age": ["A", "B"]})``.
    """
    path = dataset_path("example1.csv")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(df.columns) != EXAMPLE1_COLUMNS or tuple(df["label"]) != _EXAMPLE1_ORDER:
        raise ValidationError(f"{path}: not the Example 1 universe {_EXAMPLE1_ORDER}")
    if not (df["gender"] + df["native"] + df["age"]).equals(df["label"]):
        raise ValidationError(f"{path}: labels do not match the attribute columns")
    return df


def _positive_int(value: object, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValidationError(f"{name} = {value!r}: expected an integer >= {minimum}")
    return int(value)


def synthetic_points(
    N: int = 1000,  # noqa: N803 (the paper's symbol)
    grid: int = 1000,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """N distinct points drawn uniformly without replacement from the grid {1..grid}².

    Paper §4.1 / Fig 2a with the settings P1 (N = 1000) and P3 (grid 1000) of docs/reproduction.md
    (the paper does not give them).
    Returns an (N, 2) float array of integer-valued coordinates. Raises ValidationError when
    N > grid² (not enough distinct grid points).
    """
    N = _positive_int(N, "N")  # noqa: N806
    grid = _positive_int(grid, "grid")
    cells = grid * grid
    if N > cells:
        raise ValidationError(
            f"N = {N} distinct points do not fit on a {grid}x{grid} grid ({cells} points); "
            "lower N or enlarge the grid"
        )
    idx = resolve_rng(rng).choice(cells, size=N, replace=False)
    return np.column_stack([idx // grid + 1, idx % grid + 1]).astype(float)


def random_histogram(
    N: int,  # noqa: N803 (the paper's symbol)
    n: int,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """A random histogram of n records over N elements: multinomial(n, uniform over N).

    Paper §4.1 ("a random histogram with n records"); setting P2 of docs/reproduction.md (n is
    irrelevant at w = 1).
    Returns an int64 array of shape (N,) summing to n.
    """
    N = _positive_int(N, "N")  # noqa: N806
    n = _positive_int(n, "n", minimum=0)
    return resolve_rng(rng).multinomial(n, np.full(N, 1.0 / N)).astype(np.int64)
