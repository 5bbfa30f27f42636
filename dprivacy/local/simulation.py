"""Simulated users of a builtin query, all at once (array operations, no Python work per user
where the builtins allow it).

:func:`simulate` runs the agent's steps for many users: ``pre`` on the listed fields, domain
enforcement (a value outside T's domain becomes a uniformly random input), ``T``, then ``post``.
The builtins ``field``, ``category``, ``one_hot``, ``duchi``, ``basic_randomiser`` and
``harmony`` and the posts ``scale``, ``basic_randomiser`` and ``harmony`` run on whole columns;
``T`` is sampled by :mod:`dprivacy.local.batch` (inverse CDF over T's rows). Records are a list of
mappings, or (fastest) a mapping of field -> column or a pandas DataFrame.

For simulations and experiments only: real users run :class:`dprivacy.local.UserAgent`, which
also charges budgets. Privacy condition: each user's output is one draw of ``post ∘ T ∘ pre``
(cost(T) per user).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.batch import rows_of, sample_matrix, sample_one_hot, sample_product, simulation_rng
from dprivacy.local.builtins import POSTS, PRES, bloom_bit, derive_seed, public_index, rr_scale
from dprivacy.local.query import Query
from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser

__all__ = ["simulate", "simulate_outputs"]

_MISSING = object()


def _n_users(records: Any) -> int:
    if isinstance(records, Mapping):
        lens = {len(v) for v in records.values()}
        if len(lens) > 1:
            raise ValidationError("the columns of records have different lengths")
        return lens.pop() if lens else 0
    return len(records)


def _column(records: Any, name: str) -> Any:
    """One field for every user: a column as given, or a list from a list of mappings."""
    if isinstance(records, Mapping) or hasattr(records, "columns"):
        if name not in records:
            return [_MISSING] * _n_users(records)
        col = records[name]
        return col.to_numpy() if hasattr(col, "to_numpy") else col
    return [r.get(name, _MISSING) if isinstance(r, Mapping) else _MISSING for r in records]


def _index_in(values: Any, labels: Sequence[Any]) -> np.ndarray:
    """Index of each value in ``labels`` (``-1`` if absent), matching as JSON values."""
    return rows_of(MatrixRandomiser(np.eye(len(labels)), inputs=list(labels)), values)


def _floats(values: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Values as floats of ``shape`` per user, and which users' values are valid (finite, right shape)."""
    try:
        x = np.asarray(values, dtype=float)
        if x.shape[1:] != shape:
            raise ValueError
        ok = np.isfinite(x).reshape(len(x), -1).all(axis=1)
        return np.where(np.isfinite(x), x, 0.0), ok
    except (TypeError, ValueError):
        x = np.zeros((len(values), *shape))
        ok = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            try:
                a = np.asarray(v, dtype=float)
            except (TypeError, ValueError):
                continue
            if a.shape == shape and np.all(np.isfinite(a)):
                x[i], ok[i] = a, True
        return x, ok


def _signs(x: np.ndarray, g: np.random.Generator) -> np.ndarray:
    """Randomised rounding of x in [-1, 1] to ±1 with Pr[+1] = (1 + x)/2 (Duchi et al.)."""
    return np.where(g.random(x.shape) < (1.0 + x) / 2.0, 1, -1)


def _public_j(query: Query, users: Sequence[str] | None, n: int, m: int) -> np.ndarray:
    """Each user's public coordinate j (from the query's seed and the user's id, default ``u{i}``)."""
    ids = users if users is not None else (f"u{i}" for i in range(n))
    return np.fromiter((public_index(derive_seed(query.seed, u), m) for u in ids), dtype=np.intp,
                       count=n)


def _pre(query: Query, records: Any, users: Sequence[str] | None, g: np.random.Generator
         ) -> tuple[str, Any]:
    """The inputs of T for every user: ("rows", rows of a matrix T), ("hot", one-hot indices) or
    ("vectors", an integer matrix), with -1 / invalid entries left for domain enforcement."""
    p, name = query.params, str(query.pre.name)
    field = p.get("field") or query.fields[0]
    col = _column(records, field)
    T = query.T  # noqa: N806
    if name == "field":
        if isinstance(T, MatrixRandomiser):
            return "rows", rows_of(T, col)
        return "vectors", col
    if name == "category":
        idx = _index_in(col, list(p["categories"]))
        return "rows", _rows_of_ints(T, idx)
    if name == "one_hot":
        if "categories" in p:
            hot = _index_in(col, list(p["categories"]))
        else:
            k, cohort = int(p["k"]), int(p.get("cohort", 0))
            hot = np.array([bloom_bit(v, k, cohort) if v is not _MISSING else -1 for v in col], dtype=np.intp)
        return "hot", hot
    if name == "duchi":
        x, ok = _floats(col, ())
        ok &= np.abs(x) <= 1.0
        return "rows", _rows_of_ints(T, np.where(ok, _signs(x, g), 0))
    if name in ("basic_randomiser", "harmony"):
        m = int(p["m"] if name == "basic_randomiser" else p["d"])
        x, ok = _floats(col, (m,))
        j = _public_j(query, users, len(x), m)
        xj = x[np.arange(len(j)), j] if len(j) else np.zeros(0)
        if name == "harmony":
            ok &= np.all(np.abs(x) <= 1.0, axis=1)
            v = _signs(xj, g)
        else:
            zero = ~np.any(x != 0, axis=1)
            v = np.where(zero, np.where(g.random(len(j)) < 0.5, -1, 1), np.where(xj > 0, 1, -1))
        return "rows", _rows_of_ints(T, np.where(ok, v, 0))
    raise ValidationError(f"no vectorised simulation for the builtin {name!r}")


def _rows_of_ints(T: Any, v: np.ndarray) -> np.ndarray:  # noqa: N803
    if not isinstance(T, MatrixRandomiser):
        raise ValidationError("this builtin pre feeds a matrix randomiser T")
    return rows_of(T, np.asarray(v, dtype=np.int64))


def simulate_outputs(query: Query, records: Any, rng: Any = None,
                     users: Sequence[str] | None = None) -> np.ndarray:
    """T's output for every user, as output indices (``T.outputs`` names them for a matrix T;
    users x coordinates for a product T), before ``post``.

    Parameters
    ----------
    query : Query
        With a builtin ``pre`` (analyst code needs the agent).
    records : list of mappings, mapping field -> column, or DataFrame
    rng : numpy Generator, int or None
        None draws a seed from the operating system.
    users : sequence of str, optional
        User ids (the public seed of ``basic_randomiser`` and ``harmony``); default ``u0, u1, ...``.

    Examples
    --------
    >>> from dprivacy.local.case_studies import warner_query
    >>> q = warner_query("w", 1.0, "smoker", ["yes", "no"])
    >>> simulate_outputs(q, {"smoker": np.array(["yes"] * 5)}, rng=0).shape
    (5,)
    """
    if not query.pre.is_builtin or query.pre.name not in PRES:
        raise ValidationError("simulate runs builtin processors only (analyst code needs the agent)")
    g = simulation_rng(rng)
    n = _n_users(records)
    if users is not None and len(users) != n:
        raise ValidationError(f"{len(users)} user ids for {n} records")
    kind, v = _pre(query, records, users, g)
    T = query.T  # noqa: N806
    if kind == "rows":
        assert isinstance(T, MatrixRandomiser)
        return sample_matrix(T, v, g, as_rows=True)
    assert isinstance(T, ProductRandomiser)
    if kind == "hot" and T.domain == "one_hot":
        return sample_one_hot(T, v, g)
    if kind == "hot":
        v = np.eye(int(T.length or 0), dtype=np.intp)[np.where(v < 0, 0, v)]
    return sample_product(T, _vectors(v, int(T.length or 0)), g)


def _vectors(values: Any, length: int) -> np.ndarray:
    """Integer vectors per user; a malformed one becomes all -1 (then redrawn whole)."""
    try:
        X = np.asarray(values)  # noqa: N806
        if X.ndim == 2 and X.shape[1] == length and X.dtype.kind in "biu":
            return X
    except (TypeError, ValueError):
        pass
    out = np.full((len(values), length), -1, dtype=np.intp)
    for i, v in enumerate(values):
        if isinstance(v, (list, tuple)) and len(v) == length and all(
                isinstance(e, int) and not isinstance(e, bool) for e in v):
            out[i] = v
    return out


def simulate(query: Query, records: Any, rng: Any = None, users: Sequence[str] | None = None) -> list[Any]:
    """Replies of many users to a builtin query, without budgets or transport.

    The steps are the agent's: ``pre`` on the listed fields, domain enforcement (a random element
    of T's domain for an invalid value), ``T``, then ``post``; user ``i`` is named ``users[i]``
    (default ``"u{i}"``) for the public seed. Every user is drawn at once
    (:func:`simulate_outputs`); the replies are T's output labels (a list of output indices per
    user for a product T), or ``post``'s results. For simulations only: real users run
    :class:`dprivacy.local.UserAgent`.

    Examples
    --------
    >>> from dprivacy.local.case_studies import warner_query
    >>> q = warner_query("w", 30.0, "smoker", ["yes", "no"])
    >>> simulate(q, [{"smoker": "yes"}, {"smoker": "no"}], rng=0)
    ['yes', 'no']
    """
    if query.post is not None and (not query.post.is_builtin or query.post.name not in POSTS):
        raise ValidationError("simulate runs builtin processors only (analyst code needs the agent)")
    z = simulate_outputs(query, records, rng, users)
    T = query.T  # noqa: N806
    if isinstance(T, ProductRandomiser):
        return [list(map(int, r)) for r in z.tolist()]
    assert isinstance(T, MatrixRandomiser)
    names = np.empty(len(T.outputs or ()), dtype=object)
    names[:] = list(T.outputs or ())
    labels = names[z]
    if query.post is None:
        return list(labels.tolist())
    p, name = query.params, str(query.post.name)
    vals = np.asarray(labels, dtype=float)
    c = rr_scale(float(p["eps"]))
    if name == "scale":
        return list((vals * c).tolist())
    m = int(p["m"] if name == "basic_randomiser" else p["d"])
    j = _public_j(query, users, len(vals), m)
    scaled = vals * c * (math.sqrt(m) if name == "basic_randomiser" else m)
    return [[int(a), float(b)] for a, b in zip(j.tolist(), scaled.tolist(), strict=True)]
