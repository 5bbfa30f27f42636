"""Every simulated user's output at once: inverse-CDF sampling over the rows of T.

A user's agent draws ``T(v)`` by finding ``v``'s row of ``T`` and inverting that row's cumulative
sums at one uniform draw (:meth:`MatrixRandomiser.apply`). A simulation of many users does the
same for all of them with array operations: :func:`rows_of` maps the users' values to row
indices (no JSON per user), :func:`sample_rows` inverts each row's CDF at one uniform per user
(the same rule, ``searchsorted(cdf, u · cdf[-1], side="right")``, so each user's output has
exactly the agent's distribution), and :func:`sample_matrix` / :func:`sample_product` apply a
randomiser to every user, with the agent's domain enforcement (a value outside T's domain
becomes a uniformly random input). Without a seed the uniforms come from a numpy Generator seeded
with 128 bits from the operating system (:mod:`secrets`), as the agent's own draws do.

For simulations and experiments only: real users run :class:`dprivacy.local.UserAgent`.
Privacy condition: the same as T's (each output is one draw of ``T`` on one user's value).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser
from dprivacy.noise import resolve_rng

__all__ = ["rows_of", "sample_matrix", "sample_one_hot", "sample_product", "sample_rows",
           "simulation_rng"]

#: Uniform draws held in memory at once (users x coordinates).
CHUNK = 1 << 22
_TAGS = {bool: "b", int: "i", float: "f", str: "s", type(None): "n"}


def simulation_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """``rng`` as a Generator; None seeds one from 128 bits of the OS's CSPRNG (like the agent)."""
    return resolve_rng(secrets.randbits(128) if rng is None else rng)


def _tagged(v: Any) -> tuple[str, Any] | None:
    tag = _TAGS.get(type(v))
    return None if tag is None else (tag, v)


def rows_of(T: MatrixRandomiser, values: Any) -> np.ndarray:  # noqa: N803
    """The row of ``T`` of each value (``-1`` outside T's domain), as the agent matches them.

    Labels match by JSON value, as :meth:`MatrixRandomiser.row` does: ``1``, ``1.0`` and
    ``True`` are three different values. A numpy array is matched through its distinct values
    (no Python work per user); other sequences value by value.

    Examples
    --------
    >>> T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"])
    >>> rows_of(T, np.array(["no", "yes", "maybe"])).tolist()
    [1, 0, -1]
    """
    labels = list(T.inputs or ())
    index = {_tagged(v): i for i, v in enumerate(labels)}
    if any(k is None for k in index):  # some labels are lists or objects: match through T.row
        index = {}

    def look(v: Any) -> int:
        key = _tagged(v) if index else None
        if key is not None:
            return index.get(key, -1)
        try:
            r = T.row(v)
        except (TypeError, ValueError):
            return -1
        return -1 if r is None else int(r)

    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "biufU":
        uniq, inverse = np.unique(values, return_inverse=True)
        table = np.array([look(v) for v in uniq.tolist()], dtype=np.intp)
        return table[inverse] if uniq.size else np.zeros(0, dtype=np.intp)
    return np.fromiter((look(v) for v in values), dtype=np.intp, count=len(values))


def sample_rows(cdf: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One output column per entry of ``rows``: the inverse of row ``rows[i]``'s CDF at a uniform.

    Parameters
    ----------
    cdf : array (n_in, n_out)
        Cumulative sums of T along each row.
    rows : integer array
        Row indices in ``[0, n_in)`` (any shape).
    rng : numpy Generator

    Returns
    -------
    integer array of the shape of ``rows``: column indices in ``[0, n_out)``.
    """
    flat = np.asarray(rows, dtype=np.intp).ravel()
    out = np.empty(flat.size, dtype=np.intp)
    n_in, n_out = cdf.shape
    for s in range(0, flat.size, CHUNK):
        part = flat[s:s + CHUNK]
        u = rng.random(part.size)
        res = out[s:s + CHUNK]
        if n_out <= 8:  # few outputs: count the CDF entries <= u * total (= searchsorted right)
            x = u * np.take(cdf[:, -1], part)
            res[:] = 0
            for j in range(n_out - 1):
                res += np.take(cdf[:, j], part) <= x
        elif n_in <= 16:  # few rows: one boolean mask per row
            for i in range(n_in):
                sel = np.flatnonzero(part == i)
                if sel.size:
                    res[sel] = np.searchsorted(cdf[i], u[sel] * cdf[i, -1], side="right")
        else:  # many rows: group the users by row once
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(n_in + 1))
            for r in np.flatnonzero(np.diff(bounds)).tolist():
                sel = order[bounds[r]:bounds[r + 1]]
                res[sel] = np.searchsorted(cdf[r], u[sel] * cdf[r, -1], side="right")
    np.minimum(out, n_out - 1, out=out)
    return out.reshape(np.shape(rows))


def _enforce(rows: np.ndarray, n_in: int, rng: np.random.Generator) -> np.ndarray:
    """Rows outside ``[0, n_in)`` replaced by uniformly random rows (domain enforcement)."""
    bad = (rows < 0) | (rows >= n_in)
    if np.any(bad):
        rows = rows.copy()
        rows[bad] = rng.integers(n_in, size=int(bad.sum()))
    return rows


def sample_matrix(T: MatrixRandomiser, values: Any, rng: np.random.Generator | int | None = None, *,  # noqa: N803
                  as_rows: bool = False) -> np.ndarray:
    """Output column indices of ``T`` for every user's value (domain-enforced).

    ``values`` are input labels, or row indices with ``as_rows=True``; an unknown value (or row
    index) becomes a uniformly random row. ``T.outputs`` names the returned columns.

    Examples
    --------
    >>> T = MatrixRandomiser([[1.0, 0.0], [0.0, 1.0]], inputs=["yes", "no"])
    >>> sample_matrix(T, ["no", "yes", "no"], rng=0).tolist()
    [1, 0, 1]
    """
    g = simulation_rng(rng)
    rows = np.asarray(values, dtype=np.intp) if as_rows else rows_of(T, values)
    cdf = np.cumsum(T.matrix, axis=1)
    return sample_rows(cdf, _enforce(rows, T.matrix.shape[0], g), g)


def _one_hot_enforce(X: np.ndarray, g: np.random.Generator) -> np.ndarray:  # noqa: N803
    bad = (X.sum(axis=1) != 1) | np.any((X != 0) & (X != 1), axis=1)
    if np.any(bad):
        X = X.copy()  # noqa: N806
        idx = np.flatnonzero(bad)
        X[idx] = 0
        X[idx, g.integers(X.shape[1], size=idx.size)] = 1
    return X


def sample_product(R: ProductRandomiser, X: Any, rng: np.random.Generator | int | None = None  # noqa: N803
                   ) -> np.ndarray:
    """Output indices (users x coordinates) of a product randomiser for every user's vector.

    ``X`` is an integer array (users x coordinates) of row indices of each coordinate's matrix;
    a user whose vector is outside R's domain (a wrong entry, or not one-hot for
    ``domain="one_hot"``) gets a uniformly random vector of the domain, as on the device.

    Examples
    --------
    >>> R = ProductRandomiser([[1.0, 0.0], [0.0, 1.0]], length=3, domain="one_hot")
    >>> sample_product(R, [[0, 1, 0], [1, 0, 0]], rng=0).tolist()
    [[0, 1, 0], [1, 0, 0]]
    """
    g = simulation_rng(rng)
    X = np.asarray(X)  # noqa: N806
    mats: Sequence[np.ndarray] = R.matrices
    L = len(mats)  # noqa: N806
    if X.ndim != 2 or X.shape[1] != L or X.dtype.kind not in "biu":
        raise ValueError(f"X must be an integer array of shape (users, {L})")
    X = X.astype(np.intp, copy=X.dtype != np.intp)  # noqa: N806
    if R.domain == "one_hot":
        X = _one_hot_enforce(X, g)  # noqa: N806
    else:  # a vector with any entry outside its coordinate's rows is redrawn whole
        sizes = np.array([m.shape[0] for m in mats])
        bad = np.flatnonzero(np.any((X < 0) | (X >= sizes), axis=1))
        if bad.size:
            X[bad] = (g.random((bad.size, L)) * sizes).astype(np.intp)
    if all(m is mats[0] for m in mats):  # one shared matrix: all coordinates at once
        return sample_rows(np.cumsum(mats[0], axis=1), X, g)
    out = np.empty_like(X)
    for c, m in enumerate(mats):
        out[:, c] = sample_rows(np.cumsum(m, axis=1), X[:, c], g)
    return out


def sample_one_hot(R: ProductRandomiser, hot: Any, rng: np.random.Generator | int | None = None  # noqa: N803
                   ) -> np.ndarray:
    """:func:`sample_product` for one-hot inputs given by the index of their 1 (unary encoding).

    ``hot[i]`` is the coordinate of user i's 1 (outside ``[0, length)``: a uniformly random
    one, the domain enforcement). Each coordinate is drawn by the same inverse-CDF rule from row
    0 of its matrix, or row 1 at the hot coordinate, without building the users x coordinates
    input matrix. Returns the output indices as a compact (users x coordinates) integer array.

    Examples
    --------
    >>> R = ProductRandomiser([[1.0, 0.0], [0.0, 1.0]], length=3, domain="one_hot")
    >>> sample_one_hot(R, [1, 0], rng=0).tolist()
    [[0, 1, 0], [1, 0, 0]]
    """
    if R.domain != "one_hot":
        raise ValueError("sample_one_hot needs a product randomiser with domain='one_hot'")
    g = simulation_rng(rng)
    mats: Sequence[np.ndarray] = R.matrices
    L, n_out = len(mats), int(mats[0].shape[1])  # noqa: N806
    if any(m.shape != mats[0].shape for m in mats):  # ragged outputs: through the general path
        h = np.asarray(hot, dtype=np.intp)
        return sample_product(R, np.eye(L, dtype=np.intp)[_enforce(h, L, g)], g)
    C = np.stack([np.cumsum(m, axis=1) for m in mats])  # noqa: N806  (L, 2, n_out)
    h = _enforce(np.asarray(hot, dtype=np.intp).ravel(), L, g)
    out = np.empty((h.size, L), dtype=np.int8 if n_out <= 127 else np.intp)
    step = max(1, CHUNK // L)
    for s in range(0, h.size, step):
        hs = h[s:s + step]
        u = g.random((hs.size, L))
        x = u * C[:, 0, -1]
        acc = np.zeros(u.shape, dtype=out.dtype)
        for j in range(n_out - 1):
            acc += C[:, 0, j] <= x
        r = np.arange(hs.size)
        xh = u[r, hs] * C[hs, 1, -1]
        acc[r, hs] = (C[hs, 1, :-1] <= xh[:, None]).sum(axis=1)
        out[s:s + step] = np.minimum(acc, n_out - 1)
    return out
