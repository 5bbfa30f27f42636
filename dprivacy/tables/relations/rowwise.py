"""Per-record analyst functions on pandas: one read-only record at a time, total, sanitised.

On the pandas backend the analyst's code is a plain Python callable that receives ONE record, a
read-only mapping ``r`` (``r["age"]``), never the frame; so its output for a record can depend
only on that record (a pure function cannot make every row depend on one person, which made
whole-frame Where/Select non-1-stable). The calls are made total, so that nothing about the data
can surface as an exception:

* a predicate keeps a record iff it returns ``True`` (a bool or numpy bool); an exception or any
  other value drops the record;
* a map / key function that raises gives ``None``; its result is sanitised to a plain value of a
  library type (None, bool, int, float, str, bytes, complex, Decimal, date/time types, numpy
  scalars as Python scalars, tuples of those); anything else (including subclasses, whose
  ``__hash__``/``__eq__``/``__float__`` could misbehave later) becomes ``None``;
* a flat-map returns a list (list, tuple, range or numpy array); anything else, or an exception,
  gives no output; only the first ``k`` items are read;
* a value for an aggregation is read as a float: NaN, non-numbers and exceptions become the
  midpoint of [lo, hi], ±inf and over-large ints clamp to lo or hi.

Limits (documented, not enforceable inside one Python process): the callable must be a pure
function. State kept between calls (a closure, a global, a class attribute) or side effects
(printing, writing files) are outside the model, exactly as in PINQ (PINQ §4). An analyst who is
not trusted to write pure functions must use the expression backends
(``backend="duckdb"``, also for a pandas frame), whose row-wise expressions are inspected.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import decimal
import functools
import inspect
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.tables.relations import overrun

__all__ = ["Record", "records", "clean", "number", "predicate_mask", "map_values", "flat_map",
           "float_values", "score_sums", "quiet", "quietly", "sealed"]

_SCALARS = frozenset({type(None), bool, int, float, str, bytes, complex, decimal.Decimal,
                      datetime.datetime, datetime.date, datetime.time, datetime.timedelta,
                      pd.Timestamp, pd.Timedelta, type(pd.NaT)})
_IMMUTABLE = _SCALARS | {tuple, frozenset}


def clean(v: Any) -> Any:
    """A value returned by analyst code, as a plain value of a library type (else None)."""
    t = type(v)
    if t in _SCALARS:
        return v
    if t is tuple:
        return tuple(clean(x) for x in v)
    if isinstance(v, np.generic) and t.__module__ == "numpy":
        return clean(v.item())
    return None


def number(v: Any) -> float:
    """A value as a built-in float: NaN for non-numbers; ±inf for over-large ints."""
    t = type(v)
    if t is float:
        return v
    if t is int or t is bool:
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, np.generic) and t.__module__ == "numpy" and isinstance(
            v, (np.integer, np.floating, np.bool_)):
        return float(v)
    if t is decimal.Decimal:
        try:
            return float(v)
        except (ValueError, OverflowError):
            return math.nan
    return math.nan


class Record(Mapping[str, Any]):
    """One record, read-only: ``r["col"]``, ``r.get("col")``, ``list(r)``, ``dict(r)``.

    Values of mutable types are deep-copied on access, so analyst code cannot change the data.
    """

    __slots__ = ("_v", "_p")

    def __init__(self, values: tuple, positions: Mapping[str, int]) -> None:
        self._v = values
        self._p = positions

    def __getitem__(self, key: str) -> Any:
        v = self._v[self._p[key]]
        return v if type(v) in _IMMUTABLE else copy.deepcopy(v)

    def __iter__(self) -> Iterator[str]:
        return iter(self._p)

    def __len__(self) -> int:
        return len(self._p)

    def __repr__(self) -> str:
        return f"Record({dict(self)!r})"


def records(df: pd.DataFrame) -> Iterator[Record]:
    """The records of ``df`` in order, each a fresh read-only :class:`Record`."""
    positions = MappingProxyType({c: i for i, c in enumerate(df.columns)})
    cols = [df[c].tolist() for c in df.columns]
    if not cols:
        return (Record((), positions) for _ in range(len(df)))
    return (Record(vals, positions) for vals in zip(*cols, strict=True))


_CLOCK = overrun._STATE
_monotonic = time.monotonic


def _call(f: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """(ok, result) of analyst code; ANY exception is caught and reported as not ok.

    BaseException included: KeyboardInterrupt, SystemExit, GeneratorExit, RecursionError and
    MemoryError raised on one record must not escape, or their presence would tell whether that
    record is in the table. (So Ctrl-C while analyst code runs drops the current record instead
    of stopping the query.) ``f`` should also do the post-processing of the result (sanitising,
    reading list items): analyst objects run code there too (``__getitem__`` of an ndarray
    subclass, ``__eq__`` of a dict key, a deeply nested tuple). A call that overruns the time
    limit of :mod:`dprivacy.tables.relations.overrun` is stopped and counts as one that raised."""
    state = _CLOCK  # inlined overrun.started() / stopped(): this runs once per record
    try:
        state.start = _monotonic()
        try:
            return True, f(*args)
        finally:
            state.start = None
    except BaseException:  # noqa: BLE001 - see the docstring
        state.start = None
        return False, None


def predicate_mask(df: pd.DataFrame, f: Callable[[Record], Any]) -> np.ndarray:
    """Keep-mask of a per-record predicate (True only for a returned ``True``)."""
    out = np.zeros(len(df), dtype=bool)
    with overrun.watch():
        for i, r in enumerate(records(df)):
            ok, v = _call(_truth, f, r)
            out[i] = ok and v
    return out


def _truth(f: Callable[[Record], Any], r: Record) -> bool:
    v = f(r)
    return v is True or (type(v) is np.bool_ and bool(v))


def _cleaned(f: Callable[[Record], Any], r: Record) -> Any:
    return clean(f(r))


def map_values(df: pd.DataFrame, f: Callable[[Record], Any]) -> list[Any]:
    """Sanitised ``f(r)`` for every record (None where it raises)."""
    out = []
    with overrun.watch():
        for r in records(df):
            ok, v = _call(_cleaned, f, r)
            out.append(v if ok else None)
    return out


def _items(v: Any, k: int) -> list[Any]:
    if type(v) in (list, tuple, range):
        return list(v[:k])
    if type(v) is np.ndarray and v.ndim >= 1:  # exact type: a subclass runs analyst code
        return list(v[:k])
    return []


def _row(item: Any, columns: Sequence[str] | None) -> tuple:
    if columns is None:
        return (clean(item),)
    if type(item) in (tuple, list):
        vals = [clean(x) for x in item[: len(columns)]]
        return tuple(vals + [None] * (len(columns) - len(vals)))
    if type(item) is dict:
        return tuple(clean(item.get(c)) if c in item else None for c in columns)
    return (None,) * len(columns)


def flat_map(df: pd.DataFrame, k: int, f: Callable[[Record], Any],
             columns: Sequence[str] | None) -> tuple[list[tuple], np.ndarray]:
    """Rows of the flat-map (first ``k`` outputs per record) and each row's parent position."""
    rows: list[tuple] = []
    parents: list[int] = []
    with overrun.watch():
        for i, r in enumerate(records(df)):
            ok, out = _call(_flat_rows, f, r, k, columns)
            if not ok:
                continue
            rows.extend(out)
            parents.extend([i] * len(out))
    return rows, np.asarray(parents, dtype=np.int64)


def _flat_rows(f: Callable[[Record], Any], r: Record, k: int,
               columns: Sequence[str] | None) -> list[tuple]:
    """The sanitised output rows of one record (all or nothing: made inside the guard)."""
    return [_row(item, columns) for item in _items(f(r), k)]


def _clamp(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.clip(np.nan_to_num(v, nan=(lo + hi) / 2, posinf=hi, neginf=lo), lo, hi)


def float_values(df: pd.DataFrame, spec: str | Callable[[Record], Any], lo: float,
                 hi: float) -> np.ndarray:
    """Clamped float values of a column (vectorised) or of a per-record function."""
    if isinstance(spec, str):
        col = df[spec]
        if col.dtype.kind in "biuf":
            raw = col.to_numpy(dtype=float)
        else:
            raw = np.fromiter((number(v) for v in col.tolist()), dtype=float, count=len(col))
    else:
        vals = []
        with overrun.watch():
            for r in records(df):
                ok, v = _call(_number_of, spec, r)
                vals.append(v if ok else math.nan)
        raw = np.asarray(vals, dtype=float)
    return _clamp(raw, lo, hi)


def score_sums(df: pd.DataFrame, score: Callable[[Record, Any], Any],
               candidates: Sequence[Any]) -> np.ndarray:
    """Σ_records clamp(score(r, c), 0, 1) per candidate (non-numbers and exceptions score 0)."""
    total = np.zeros(len(candidates))
    with overrun.watch():
        for r in records(df):
            for j, c in enumerate(candidates):
                ok, x = _call(_number_of, score, r, c)
                total[j] += 0.0 if not ok or math.isnan(x) else min(max(x, 0.0), 1.0)
    return total


def _number_of(f: Callable[..., Any], *args: Any) -> float:
    return number(f(*args))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Numpy floating-point errors and Python warnings ignored: with the analyst's own
    ``np.seterr(all="raise")`` or ``warnings.simplefilter("error")``, an overflow or a pandas
    warning that happens only on some data would otherwise surface as an exception."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def sealed(cls: type) -> type:
    """Class decorator: every public method of ``cls`` runs inside :func:`quiet`."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(attr):
            continue
        setattr(cls, name, _quietly(attr))
    return cls


def quietly(f: Callable[..., Any]) -> Callable[..., Any]:
    """Function decorator: ``f`` runs inside :func:`quiet`."""
    return _quietly(f)


def _quietly(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet():
            return f(*args, **kwargs)

    return wrapper
