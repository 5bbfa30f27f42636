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

__all__ = ["DEFAULT_LIMITS", "MAX_REASON", "MAX_REPLY_BYTES", "Limits", "check_json_value",
           "check_query_json", "check_randomiser_json", "fit_refusal", "safe_text"]

#: Largest JSON text of one reply (the aggregator refuses larger ones). It holds T's output for
#: the largest randomiser a query may carry (65 536 coordinates of up to 4 096 outputs: at most 6
#: bytes each, about 384 KiB); the aggregator refuses at publish a query whose answers would not
#: fit (:func:`dprivacy.local.aggregator.replies.largest_answer`).
MAX_REPLY_BYTES = 512 * 1024
#: Characters of a refusal's reason a device sends.
MAX_REASON = 1000


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
    max_name : int
        Characters of a field or event name.
    max_depth : int
        Nesting of any JSON value in a query (``params``, labels of T, ...).
    max_nodes : int
        JSON values (lists, objects, strings, numbers) in ``params``, and in all the labels of T.
    max_label : int
        Characters of the JSON text of one label of T.

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
    max_name: int = 128
    max_depth: int = 32
    max_nodes: int = 1 << 16
    max_label: int = 1024


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
    for k in ("id", "fields", "event", "pre", "post", "publisher", "t", "memory_mb", "seed"):
        if k in d:
            check_json_value(d[k], k, max_depth=3, max_nodes=2 * limits.max_fields + 8)
    if isinstance(fields, (list, tuple)):
        for f in fields:
            if isinstance(f, str) and len(f) > limits.max_name:
                raise ValidationError(f"a field name has {len(f)} characters: at most {limits.max_name}")
    ev = d.get("event")
    if isinstance(ev, str) and len(ev) > limits.max_name:
        raise ValidationError(f"the event name has {len(ev)} characters: at most {limits.max_name}")
    if "params" in d:
        check_json_value(d["params"], "params", max_depth=limits.max_depth,
                         max_nodes=limits.max_nodes)
    if "T" in d:
        check_randomiser_json(d["T"], limits)
        T = d["T"]  # noqa: N806
        for k, v in T.items():
            if k == "inputs" or k == "outputs":
                check_json_value(v, f"T's {k}", max_depth=limits.max_depth,
                                 max_nodes=limits.max_nodes)
                for label in v or ():
                    if _text_length(label) > limits.max_label:
                        raise ValidationError(f"a label of T's {k} is longer than "
                                              f"{limits.max_label} characters of JSON")
            elif k not in ("matrix", "matrices"):  # the matrices are read as numbers
                check_json_value(v, f"T's {k}", max_depth=2, max_nodes=16)


def _text_length(v: Any) -> int:
    import json

    return len(json.dumps(v, sort_keys=True, separators=(",", ":")))


def _utf8(s: str) -> bool:
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_json_value(v: Any, what: str, *, max_depth: int, max_nodes: int) -> None:
    """Raise :class:`ValidationError` unless ``v`` is plain JSON within the caps.

    Plain JSON: ``None``, ``bool``, ``int``, finite ``float``, ``str`` that is valid UTF-8 (no
    lone surrogate, which ``"\\ud800"`` in JSON text would give), lists and objects with text
    keys; at most ``max_depth`` levels of lists and objects, ``max_nodes`` values in all. The walk
    is iterative and stops at the first excess, so its work is at most ``max_nodes`` steps.

    Examples
    --------
    >>> check_json_value({"a": [1, 2.5, None]}, "params", max_depth=4, max_nodes=10)
    >>> deep = []
    >>> for _ in range(700):
    ...     deep = [deep]
    >>> try:
    ...     check_json_value(deep, "params", max_depth=32, max_nodes=10**6)
    ... except ValidationError as exc:
    ...     print(exc)
    params is nested more than 32 levels deep
    """
    stack: list[tuple[Any, int]] = [(v, 0)]
    nodes = 0
    while stack:
        x, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise ValidationError(f"{what} holds more than {max_nodes} JSON values")
        t = type(x)
        if x is None or t is bool or t is int:
            continue
        if t is float:
            if x != x or x in (float("inf"), float("-inf")):
                raise ValidationError(f"{what} holds NaN or infinity (not JSON)")
            continue
        if t is str:
            if not _utf8(x):
                raise ValidationError(f"{what} holds text that is not UTF-8 (a lone surrogate)")
            continue
        if t is list or t is tuple:
            if depth >= max_depth:
                raise ValidationError(f"{what} is nested more than {max_depth} levels deep")
            if nodes + len(x) > max_nodes:
                raise ValidationError(f"{what} holds more than {max_nodes} JSON values")
            stack.extend((y, depth + 1) for y in x)
            continue
        if t is dict:
            if depth >= max_depth:
                raise ValidationError(f"{what} is nested more than {max_depth} levels deep")
            if nodes + 2 * len(x) > max_nodes:
                raise ValidationError(f"{what} holds more than {max_nodes} JSON values")
            for k, y in x.items():
                if type(k) is not str or not _utf8(k):
                    raise ValidationError(f"{what} has a key that is not UTF-8 text")
                stack.append((y, depth + 1))
            continue
        raise ValidationError(f"{what} holds a {t.__name__}, which is not JSON")


def safe_text(s: Any, limit: int = MAX_REASON) -> str:
    """``s`` as text of at most ``limit`` characters that encodes as UTF-8 (lone surrogates and
    other unencodable characters become backslash escapes)."""
    text = str(s)[:limit]
    return text if _utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def fit_refusal(reply: dict[str, Any]) -> dict[str, Any]:
    """A refusal reply that always passes the aggregator's checks: its reason cut to
    :data:`MAX_REASON` characters of UTF-8 text, and its ``result`` dropped (None) when it is not
    plain JSON or the reply would exceed :data:`MAX_REPLY_BYTES`.

    Examples
    --------
    >>> r = fit_refusal({"query": "q", "user": "u", "status": "rejected",
    ...                  "reason": "fields ['" + "x" * 100000 + "'] are not offered", "result": None})
    >>> len(r["reason"]) <= MAX_REASON
    True
    """
    import json

    out = dict(reply)
    out["reason"] = safe_text(out.get("reason", ""))
    out["query"] = out.get("query") if isinstance(out.get("query"), str) else ""
    try:
        check_json_value(out.get("result"), "result", max_depth=32, max_nodes=4096)
        size = len(json.dumps(out, allow_nan=False))
    except (ValidationError, TypeError, ValueError):
        size = MAX_REPLY_BYTES + 1
    if size > MAX_REPLY_BYTES:
        out["result"] = None
    return out
