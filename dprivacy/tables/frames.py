"""Vectorised record transformations on pandas frames, shared by PINQ and ProPer tables.

Internal frames always carry a RangeIndex, so a row's label is its position; a flat-map's output
labels therefore name their source rows (which is how ProPer carries provenance through it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError

__all__ = [
    "as_frame", "mask_array", "key_array", "split_positions", "select_frame", "select_many_frame",
]


def as_frame(df: Any) -> pd.DataFrame:
    """A DataFrame with a RangeIndex (the data is not copied)."""
    if not isinstance(df, pd.DataFrame):
        raise ValidationError(f"df is a {type(df).__name__}: expected a pandas DataFrame")
    if isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1:
        return df
    return df.reset_index(drop=True)


def mask_array(df: pd.DataFrame, f: Callable[[pd.DataFrame], Any]) -> np.ndarray:
    """The boolean mask ``f(df)`` as a numpy array of one entry per record."""
    m = np.asarray(f(df))
    if m.shape != (len(df),):
        raise ValidationError(f"the predicate returned shape {m.shape}: need ({len(df)},) booleans")
    if m.dtype != bool:
        raise ValidationError(f"the predicate returned dtype {m.dtype}: need booleans")
    return m


def key_array(df: pd.DataFrame, f: str | Callable[[pd.DataFrame], Any]) -> np.ndarray:
    """Keys from a column name or a vectorised function, one per record."""
    if isinstance(f, str):
        if f not in df.columns:
            raise ValidationError(f"key {f!r} is not a column; columns are {list(df.columns)}")
        return df[f].to_numpy()
    k = np.asarray(f(df))
    if k.shape != (len(df),):
        raise ValidationError(f"the key function returned shape {k.shape}: need ({len(df)},)")
    return k


def split_positions(karr: np.ndarray, keys: list) -> list[np.ndarray]:
    """For each key, the (ascending) positions of the records with that key; unlisted keys are
    dropped. One hash lookup and one stable sort for all parts."""
    if len(set(keys)) != len(keys):
        raise ValidationError("partition keys must be distinct")
    if not keys:
        return []
    codes = pd.Index(keys).get_indexer(karr)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    return [order[bounds[i] : bounds[i + 1]] for i in range(len(keys))]


def select_frame(df: pd.DataFrame, f: Callable[[pd.DataFrame], Any]) -> pd.DataFrame:
    """``f(df)`` (frame, series or array) as a frame with exactly one row per record."""
    out = f(df)
    if isinstance(out, pd.Series):
        out = out.to_frame(name=out.name if out.name is not None else "value")
    elif isinstance(out, pd.DataFrame):
        pass
    else:
        arr = np.asarray(out)
        if arr.ndim == 1:
            out = pd.DataFrame({"value": arr})
        elif arr.ndim == 2:
            out = pd.DataFrame(arr)
        else:
            raise ValidationError(f"select returned an array of shape {arr.shape}: need 1-D or 2-D")
    if len(out) != len(df):
        raise ValidationError(
            f"select returned {len(out)} rows for {len(df)} records: a Select maps one to one "
            "(use where or select_many)"
        )
    return out.reset_index(drop=True)


def select_many_frame(
    df: pd.DataFrame, k: int, f: Callable[[pd.DataFrame], Any]
) -> tuple[pd.DataFrame, np.ndarray]:
    """Flat-map: ``f(df)`` indexed by source labels (e.g. ``df.explode``), first ``k`` per source.

    Returns the output frame (RangeIndex) and, per output row, the position of its source row.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValidationError(f"k = {k!r}: select_many needs an integer bound k >= 1")
    out = f(df)
    if isinstance(out, pd.Series):
        out = out.to_frame(name=out.name if out.name is not None else "value")
    if not isinstance(out, pd.DataFrame):
        raise ValidationError(
            "select_many's function must return a DataFrame or Series whose index labels are the "
            "labels of the source rows (as DataFrame.explode does)"
        )
    src = np.asarray(out.index)
    if len(src) and (src.dtype.kind not in "iu" or src.min() < 0 or src.max() >= len(df)):
        raise ValidationError(
            "select_many's output index must hold the source rows' labels 0..n-1 (a RangeIndex "
            "frame's labels); got labels outside that range"
        )
    keep = out.groupby(level=0, sort=False).cumcount().to_numpy() < k
    return out[keep].reset_index(drop=True), src[keep].astype(np.int64)
