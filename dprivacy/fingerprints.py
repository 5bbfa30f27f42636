"""Canonical, versioned fingerprints of universes, workloads and metrics.

A fingerprint is the sha256 of a byte stream that this module defines exactly, independently of
how pandas or numpy print values (no CSV writer, no ``repr`` of arrays), so that a config written
by this version keeps loading in later versions. The stream starts with :data:`ENCODING`; a
change to the stream gets a new encoding name (and old configs keep naming theirs).

Values are encoded one by one, each as a one-byte tag and a payload:

* ``N`` + float64 little-endian: numbers (bool excluded); integers and integral floats give the
  same bytes (1 == 1.0), -0.0 is 0.0; integers beyond 2**53 use ``I`` + their decimal digits;
* ``B`` + one byte: booleans;
* ``S`` + 8-byte length + UTF-8: strings;
* ``O`` + 8-byte length + UTF-8 of ``type name:str(value)``: anything else (dates, ...);
* ``M`` + eight zero bytes: a missing value (NaN, None, pandas NA or NaT), whatever its kind
  (universes refuse them in key columns; other columns may hold them).

Examples
--------
>>> import pandas as pd
>>> a = column_digest(pd.Series([1, 2, 3]))
>>> a == column_digest(pd.Series([1.0, 2.0, 3.0])), a == column_digest(pd.Series(["1", "2", "3"]))
(True, False)
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    import pandas as pd

#: Name of the byte-stream encoding written into configs.
ENCODING = "dprivacy-fp-2"
_EXACT = 2.0**53
_TAGGED = np.dtype([("t", "S1"), ("v", "<f8")])


def _frame(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


_MISSING = b"M" + bytes(8)


def _value_bytes(v: Any) -> bytes:
    import pandas as pd

    if v is None or v is pd.NA or v is pd.NaT:
        return _MISSING
    if isinstance(v, (bool, np.bool_)):
        return b"B" + (b"\x01" if v else b"\x00")
    if isinstance(v, (int, np.integer)):
        i = int(v)
        return b"N" + struct.pack("<d", float(i)) if abs(i) <= _EXACT else b"I" + _frame(
            str(i).encode())
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return _MISSING if math.isnan(f) else b"N" + struct.pack("<d", f + 0.0)
    if isinstance(v, str):
        return b"S" + _frame(v.encode("utf-8"))
    return b"O" + _frame(f"{type(v).__name__}:{v}".encode())


def _numeric_bytes(a: np.ndarray) -> bytes:
    v = a.astype("<f8")
    nan = np.isnan(v)
    out = np.empty(a.shape[0], dtype=_TAGGED)
    out["t"] = np.where(nan, b"M", b"N")
    out["v"] = np.where(nan, 0.0, v + 0.0)  # one NaN whatever its bits; -0.0 is 0.0
    return out.tobytes()


def values_bytes(values: Iterable[Any] | np.ndarray | pd.Series) -> bytes:
    """The canonical byte stream of a sequence of scalars (see the module doc)."""
    import pandas as pd

    if isinstance(values, pd.Series):
        kind = values.dtype.kind
        if kind in "iuf" and not isinstance(values.dtype, pd.CategoricalDtype):
            a = values.to_numpy()
            if kind == "f" or np.all(np.abs(a.astype(float)) <= _EXACT):
                return _numeric_bytes(a)
        if kind == "b":
            return b"".join(_value_bytes(bool(v)) for v in values.to_numpy())
        values = values.astype(object).tolist()
    elif isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        if values.dtype.kind == "f" or np.all(np.abs(values.astype(float)) <= _EXACT):
            return _numeric_bytes(values.ravel())
        values = values.ravel().tolist()
    return b"".join(_value_bytes(v) for v in values)


def column_digest(values: Iterable[Any] | np.ndarray | pd.Series) -> str:
    """sha256 of :func:`values_bytes` (hex)."""
    return hashlib.sha256(values_bytes(values)).hexdigest()


def canonical_json(obj: Any) -> str:
    """Sorted-key, compact JSON with non-finite floats tagged (stable across versions)."""

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, np.ndarray):
            return [clean(x) for x in v.tolist()]
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return (f + 0.0) if math.isfinite(f) else {"__float__": repr(f)}
        if v is None or isinstance(v, str):
            return v
        if hasattr(v, "items"):
            return {str(k): clean(x) for k, x in v.items()}
        return str(v)

    return json.dumps(clean(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


class Hasher:
    """sha256 over framed parts: ``Hasher("universe").add(b"...").hexdigest()``."""

    def __init__(self, what: str) -> None:
        self._h = hashlib.sha256()
        self.add(f"{ENCODING}/{what}".encode())

    def add(self, part: bytes | str) -> Hasher:
        b = part.encode("utf-8") if isinstance(part, str) else part
        self._h.update(_frame(b))
        return self

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def matrix_bytes(F: np.ndarray | sp.sparray | sp.spmatrix) -> bytes:
    """A dense or sparse matrix as canonical CSR (sorted indices, no stored zeros, -0.0 = 0):
    the same bytes for the same values, whatever the storage."""
    A: Any = sp.csr_array(cast(Any, F), dtype=cast(Any, float), copy=True)
    A.sum_duplicates()
    A.data = A.data + 0.0
    A.eliminate_zeros()
    A.sort_indices()
    shape = struct.pack("<QQ", *A.shape)
    return (shape + _frame(A.indptr.astype("<i8").tobytes())
            + _frame(A.indices.astype("<i8").tobytes()) + _frame(A.data.astype("<f8").tobytes()))
