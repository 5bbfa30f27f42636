"""Size caps on a query's JSON, checked on the parsed JSON *before* any array is built.

A query travels as JSON from an analyst, through the aggregator, to every user's agent. Its
randomiser declares its own size: a product randomiser of ``"length": 1000000000`` is 126 bytes
of JSON and would make the parser build a billion-coordinate list and price each coordinate.
:func:`check_randomiser_json` bounds the dimensions, the number of cells and the work of pricing
from the lengths of the JSON lists alone (O(rows) time, nothing allocated), and
:func:`dprivacy.local.randomiser.randomiser_from_json` calls it before it converts anything.

Privacy condition: none (a refusal depends on the query's public text only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dprivacy.errors import ValidationError

__all__ = ["DEFAULT_LIMITS", "Limits", "check_randomiser_json"]


@dataclass(frozen=True)
class Limits:
    """Largest randomiser a query may carry (all counts, checked on the JSON lists).

    Parameters
    ----------
    max_side : int
        Rows or columns of one matrix (inputs or outputs of T, or of one coordinate).
    max_cells : int
        Entries of T, summed over the coordinates of a product randomiser.
    max_length : int
        Coordinates of a product randomiser.
    max_pair_work : int
        ``rows² × columns`` summed over the coordinates of a product randomiser: the work of
        pricing it (:func:`dprivacy.local.cost.product_cost` compares every pair of rows).
    max_id : int
        Characters of a query id.
    max_fields : int
        Data fields one query may list.

    Examples
    --------
    >>> Limits().max_length
    65536
    """

    max_side: int = 1 << 12
    max_cells: int = 1 << 20
    max_length: int = 1 << 16
    max_pair_work: int = 1 << 26
    max_id: int = 256
    max_fields: int = 1024


#: The caps every query parsed from JSON is held to (aggregator and agents alike).
DEFAULT_LIMITS = Limits()


def _int(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValidationError(f"{name} = {str(v)[:40]!r}: expected a whole number in [{lo}, {hi}]")
    if not lo <= v <= hi:
        raise ValidationError(f"{name} = {v}: expected a whole number in [{lo}, {hi}] "
                              "(a larger randomiser is refused)")
    return v


def _matrix_shape(m: Any, name: str, limits: Limits) -> tuple[int, int]:
    """(rows, cells) of a JSON matrix (a list of equal-length lists), bounded before it is read."""
    if not isinstance(m, list) or not m:
        raise ValidationError(f"{name} is not a non-empty JSON list of rows")
    if len(m) > limits.max_side:
        raise ValidationError(f"{name} has {len(m)} rows: at most {limits.max_side} are accepted")
    cells = 0
    for row in m:
        if not isinstance(row, list):
            raise ValidationError(f"{name} has a row that is not a JSON list")
        if len(row) > limits.max_side:
            raise ValidationError(f"{name} has a row of {len(row)} entries: at most "
                                  f"{limits.max_side} outputs are accepted")
        cells += len(row)
        if cells > limits.max_cells:
            raise ValidationError(f"{name} has more than {limits.max_cells} entries")
    return len(m), cells


def _labels(v: Any, name: str, limits: Limits) -> None:
    if v is not None and (not isinstance(v, list) or len(v) > limits.max_side):
        raise ValidationError(f"{name} must be a JSON list of at most {limits.max_side} labels")


def check_randomiser_json(d: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise :class:`ValidationError` if the JSON randomiser ``d`` exceeds ``limits``.

    Only list lengths and a few integers are read, so the check takes time proportional to the
    number of rows, whatever sizes the JSON claims.

    Examples
    --------
    >>> hostile = {"kind": "product", "matrices": [[0.5, 0.5], [0.5, 0.5]], "length": 10**9}
    >>> try:
    ...     check_randomiser_json(hostile)
    ... except ValidationError as exc:
    ...     print(str(exc)[:40])
    length = 1000000000: expected a whole nu
    """
    if not isinstance(d, dict):
        raise ValidationError("a randomiser is a JSON object with kind 'matrix' or 'product'")
    if d.get("kind") == "matrix":
        _matrix_shape(d.get("matrix"), "matrix", limits)
        _labels(d.get("inputs"), "inputs", limits)
        _labels(d.get("outputs"), "outputs", limits)
        return
    if d.get("kind") != "product":
        raise ValidationError("a randomiser is a JSON object with kind 'matrix' or 'product'")
    length = d.get("length")
    if length is not None:
        _int(length, "length", 1, limits.max_length)
    mats = d.get("matrices")
    if not isinstance(mats, list) or not mats:
        raise ValidationError("matrices is not a non-empty JSON list")
    single = isinstance(mats[0], list) and not (mats[0] and isinstance(mats[0][0], list))
    if single:
        if length is None:
            raise ValidationError("one shared coordinate matrix needs length >= 1")
        rows, cells = _matrix_shape(mats, "matrices", limits)
        # one shared matrix: the same totals as ``length`` copies of it, in O(1)
        _totals(cells * length, rows * cells * length, limits)
        return
    if len(mats) > limits.max_length:
        raise ValidationError(f"{len(mats)} coordinate matrices: at most {limits.max_length}")
    total = work = 0
    for i, m in enumerate(mats):
        rows, cells = _matrix_shape(m, f"matrices[{i}]", limits)
        total += cells
        work += rows * cells
        _totals(total, work, limits)


def _totals(cells: int, work: int, limits: Limits) -> None:
    if cells > limits.max_cells:
        raise ValidationError(f"the coordinates have more than {limits.max_cells} entries in all")
    if work > limits.max_pair_work:
        raise ValidationError("pricing this product randomiser compares more than "
                              f"{limits.max_pair_work} pairs of entries: use fewer or smaller "
                              "coordinates")


def check_query_json(d: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise :class:`ValidationError` if the JSON query ``d`` exceeds ``limits`` (its id, its
    fields and its randomiser ``T``), before any part of it is converted."""
    if not isinstance(d, dict):
        raise ValidationError("a query is a JSON object")
    qid = d.get("id")
    if isinstance(qid, str) and len(qid) > limits.max_id:
        raise ValidationError(f"the query id has {len(qid)} characters: at most {limits.max_id}")
    fields = d.get("fields", ())
    if isinstance(fields, (list, tuple)) and len(fields) > limits.max_fields:
        raise ValidationError(f"the query lists {len(fields)} fields: at most {limits.max_fields}")
    if "T" in d:
        check_randomiser_json(d["T"], limits)
