"""Total conversions of pandas values for :mod:`dprivacy.tables.relations.pandas_relation`.

Each function is defined on every value a record may hold (unhashable objects, values whose
``repr`` or comparison raises, deeply nested lists): no exception here can depend on the data.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import ValidationError
from dprivacy.tables.relations import rowwise

__all__ = ["as_frame"]


def as_frame(df: Any) -> pd.DataFrame:
    """A DataFrame with a RangeIndex (not copied when it already has one)."""
    if not isinstance(df, pd.DataFrame):
        raise ValidationError(f"df is a {type(df).__name__}: expected a pandas DataFrame")
    if isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1:
        return df
    return df.reset_index(drop=True)


_OPAQUE = "<dprivacy: a value with no usable hash or repr>"


def _hashable(v: Any) -> Any:
    """``v`` if it hashes, else its repr, else one fixed string: total on any data value (a
    deeply nested list in one record must not raise RecursionError)."""
    try:
        hash(v)
        return v
    except BaseException:  # noqa: BLE001 - TypeError, RecursionError, anything
        pass
    try:
        return repr(v)
    except BaseException:  # noqa: BLE001
        return _OPAQUE


def _safe(df: pd.DataFrame, cols: Sequence[Hashable]) -> pd.DataFrame:
    """The columns ``cols`` as object dtype with unhashable values replaced by their repr (keys
    for merges, groupings and duplicates that cannot fail on mixed or odd values)."""
    out = pd.DataFrame(index=df.index)
    for c in cols:
        s = df[c]
        out[c] = s.astype(object) if s.dtype.kind != "O" else s.map(_hashable)
    return out


def _numeric(s: pd.Series) -> np.ndarray:
    """A column's values as floats (non-numbers NaN), for group aggregations."""
    if s.dtype.kind in "biuf":
        return s.to_numpy(dtype=float)
    return np.fromiter((rowwise.number(v) for v in s.tolist()), dtype=float, count=len(s))
