"""Reading the command line's inputs: universe CSVs, metric specs and query-matrix files.

Each loader validates what it reads and raises :class:`UserError` (a :class:`DPrivacyError`) with a
one-line message naming the file and what is wrong, before any design or release happens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprivacy import metrics as _metrics
from dprivacy.errors import DPrivacyError
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe
from dprivacy.workload import Workload

METRICS: dict[str, type[Metric]] = {
    "euclidean": _metrics.Euclidean, "geodesic": _metrics.Geodesic,
    "blowfish": _metrics.BlowfishThreshold, "discrete": _metrics.Discrete,
    "attribute": _metrics.AttributeWeighted, "value": _metrics.ValueWeighted,
    "elementwise": _metrics.ElementWise,
}
BUILTIN = ("builtin:us_cities", "builtin:example1")
DEMO_OUT = "dprivacy_demo_config.json"


class UserError(DPrivacyError):
    """A command-line mistake (bad file, bad parameter) reported as one line."""


def split_columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def read_csv(path: str, what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} file {path!r} not found")
    try:
        return pd.read_csv(p, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{what} file {path!r} is not a readable CSV: {exc}") from exc


def load_universe(spec: str, key: str | None = None, coords: str | None = None) -> Universe:
    """A universe from a CSV (one row per element) or ``builtin:us_cities`` / ``builtin:example1``.

    ``coords``: comma-separated coordinate columns (default latitude,longitude or x,y when
    present); ``key``: the columns that identify an element in records (default: ``name`` or the
    coordinates; every column for an attribute universe).
    """
    from dprivacy.data import load_example1, load_us_cities

    if spec == "builtin:us_cities":
        df, key, coords = load_us_cities(), key or "name,state", coords or "latitude,longitude"
    elif spec == "builtin:example1":
        df, key = load_example1().drop(columns="label"), key or "gender,native,age"
    elif spec.startswith("builtin:"):
        raise UserError(f"unknown built-in universe {spec!r}; choose {', '.join(BUILTIN)}")
    else:
        df = read_csv(spec, "universe")
    xy = split_columns(coords)
    if xy is None:
        for pair in (["latitude", "longitude"], ["x", "y"]):
            if set(pair) <= set(df.columns):
                xy = pair
                break
    keys = split_columns(key) or (["name"] if xy and "name" in df.columns else xy or list(df.columns))
    missing = [c for c in keys + (xy or []) if c not in df.columns]
    if missing:
        raise UserError(f"universe has no column(s) {missing}; its columns are {list(df.columns)}")
    if df.duplicated(keys).any():
        first = df[df.duplicated(keys)].iloc[0][keys].tolist()
        raise UserError(f"universe elements are not distinct by {keys} (e.g. {first}); "
                        "pass --key with columns that identify each element")
    return Universe.from_dataframe(df, keys, coords=xy)


def _param_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def make_metric(name: str, params: Sequence[str] | dict | None) -> Metric:
    """A metric from its CLI name (or class name) and ``key=value`` parameters (values as JSON)."""
    cls = METRICS.get(name.lower()) or {c.__name__.lower(): c for c in METRICS.values()}.get(
        name.lower())
    if cls is None:
        raise UserError(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}")
    if isinstance(params, dict):
        kw = dict(params)
    else:
        kw = {}
        for item in params or []:
            k, sep, v = item.partition("=")
            if not sep or not k:
                raise UserError(f"--param {item!r}: write key=value, e.g. eps_per_unit=0.5")
            kw[k.strip()] = _param_value(v.strip())
    try:
        return cls(**kw)
    except TypeError as exc:
        raise UserError(f"metric {name!r}: {exc}") from exc


def load_workload(path: str, N: int | None = None) -> Workload:  # noqa: N803
    """A query matrix (m, N) from .npy or .csv (one query per row; an optional header row and
    an optional first column of query names are recognised)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"query matrix file {path!r} not found")
    names = None
    if p.suffix == ".npy":
        try:
            F = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise UserError(f"{path!r} is not a numeric .npy array: {exc}") from exc
    elif p.suffix == ".csv":
        raw = pd.read_csv(p, header=None, dtype=str, keep_default_na=False)
        if raw.empty:
            raise UserError(f"query matrix file {path!r} is empty")
        num = raw.apply(pd.to_numeric, errors="coerce")
        if num.iloc[0].isna().any() and not num.iloc[1:].isna().all(axis=None):
            raw, num = raw.iloc[1:], num.iloc[1:]  # header row
        if num.iloc[:, 0].isna().all():
            names = tuple(raw.iloc[:, 0])
            num = num.iloc[:, 1:]
        if num.isna().any(axis=None):
            r, c = np.argwhere(num.isna().to_numpy())[0]
            raise UserError(f"{path!r}: entry ({r}, {c}) is not a number")
        F = num.to_numpy(dtype=float)
    else:
        raise UserError(f"query matrix {path!r}: use a .npy or .csv file")
    W = Workload(F, names=names)
    if N is not None and W.N != N:
        raise UserError(f"{path!r} has {W.N} columns but the universe has N = {N} elements")
    return W
