"""The case studies of Paper IV §4 as ⟨pre, T, post⟩ queries, with their aggregator estimators.

* Warner's randomised response (k-ary: k-RR / direct encoding);
* one-time RAPPOR (unary encoding with symmetric per-bit flips; one hash);
* the Bassily–Smith basic randomiser (Paper IV Alg. 2-3; j is public randomness from the seed);
* Duchi et al.'s 1-D mean (the version fixed by Nguyễn et al.);
* Harmony (Nguyễn et al.) for vectors in [-1, 1]^d.

Each builder returns a :class:`Query`; each estimator takes the users' post-processed replies
(the devices reply T's outputs; :func:`dprivacy.local.postprocess.apply_post` runs the query's
``post`` on them, on the analyst's side); each ``*_variance`` is the closed-form variance of its
estimator. :func:`simulate` (from :mod:`dprivacy.local.simulation`) runs the device's ``pre →
domain enforcement → T`` steps and then the analyst's ``post`` (builtins only) for every user at
once, for experiments and tests. Privacy condition: each query's cost is ``cost(T)`` (``eps`` for
all five; RAPPOR's per-bit flip is set so that one-hot inputs cost ``eps``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.builtins import rr_scale
from dprivacy.local.estimation import check_identifiable
from dprivacy.local.query import Code, Query
from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser
from dprivacy.local.simulation import simulate

__all__ = [
    "basic_randomiser_estimate", "basic_randomiser_query", "duchi_estimate", "duchi_query",
    "duchi_variance", "harmony_estimate", "harmony_query", "harmony_variance", "mean_variance",
    "rappor_estimate", "rappor_query", "rappor_variance", "rr_matrix", "simulate", "warner_estimate",
    "warner_query", "warner_variance",
]


def _eps(eps: float) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 50:
        raise ValidationError(f"eps = {eps!r}: expected a number in (0, 50)")
    return float(eps)


def rr_matrix(eps: float, k: int) -> np.ndarray:
    """k-ary randomised response: ``e^eps/(e^eps+k-1)`` on the diagonal, ``1/(e^eps+k-1)`` off it.

    Examples
    --------
    >>> rr_matrix(np.log(3), 2).round(12).tolist()
    [[0.75, 0.25], [0.25, 0.75]]
    """
    e = math.exp(_eps(eps))
    if int(k) < 2:
        raise ValidationError(f"k = {k}: randomised response needs at least 2 values")
    T = np.full((k, k), 1.0 / (e + k - 1))  # noqa: N806
    np.fill_diagonal(T, e / (e + k - 1))
    return T


# ------------------------------------------------------------------------------------ Warner
def warner_query(qid: str, eps: float, field: str, categories: Sequence[Any]) -> Query:
    """Warner's randomised response on a categorical field (cost ``eps``)."""
    cats = list(categories)
    T = MatrixRandomiser(rr_matrix(eps, len(cats)), inputs=cats, outputs=cats)  # noqa: N806
    return Query(qid, T, Code.builtin("field"), fields=(field,), params={"field": field})


def warner_estimate(reports: Any, T: Any, outputs: Sequence[Any] | None = None) -> np.ndarray:  # noqa: N803
    """Unbiased input frequencies from reports of a square invertible ``T``: ``f = o T^{-1}``.

    ``reports`` are output labels (``outputs``, default indices). For 2-coin RR and 1000 users
    this is ``(y - 250)/500`` (Paper IV §2.3). A ``T`` that cannot tell its inputs apart
    (singular or ill-conditioned) is refused with
    :class:`dprivacy.local.estimation.NotIdentifiableError`; for any ``T`` and standard errors
    see :func:`dprivacy.local.estimation.estimate_frequencies`.

    Examples
    --------
    >>> warner_estimate([0] * 400 + [1] * 600, [[0.75, 0.25], [0.25, 0.75]]).round(6).tolist()
    [0.3, 0.7]
    """
    Tm = np.asarray(T, dtype=float)  # noqa: N806
    if Tm.ndim != 2 or Tm.shape[0] != Tm.shape[1]:
        raise ValidationError(f"T has shape {Tm.shape}: Warner's estimate inverts a square T; "
                              "use estimate_frequencies for any T")
    check_identifiable(Tm)
    k = Tm.shape[1]
    if outputs is not None:
        index = {v: i for i, v in enumerate(outputs)}
        r = np.fromiter((index[v] for v in reports), dtype=np.intp)
    else:
        r = np.asarray(reports, dtype=np.intp).ravel()
    counts = np.bincount(r, minlength=k).astype(float)
    o = counts / max(r.size, 1)
    return np.linalg.solve(Tm.T, o)


def warner_variance(f: Any, n: int, eps: float, k: int) -> np.ndarray:
    """Var of the k-RR frequency estimate: ``q(1-q)/(n(p-q)^2) + f(1-p-q)/(n(p-q))`` (Wang et al. 2017)."""
    e = math.exp(_eps(eps))
    p, q = e / (e + k - 1), 1.0 / (e + k - 1)
    return _pure_variance(np.asarray(f, dtype=float), n, p, q)


def _pure_variance(f: np.ndarray, n: int, p: float, q: float) -> np.ndarray:
    return q * (1 - q) / (n * (p - q) ** 2) + f * (1 - p - q) / (n * (p - q))


# ------------------------------------------------------------------------------------ RAPPOR
def rappor_bit(eps: float) -> np.ndarray:
    """Per-bit matrix of one-time RAPPOR: keep a bit w.p. ``e^{eps/2}/(1+e^{eps/2})``."""
    return rr_matrix(_eps(eps) / 2.0, 2)


def rappor_query(qid: str, eps: float, field: str, categories: Sequence[Any] | None = None, *,
                 k: int | None = None, cohort: int = 0) -> Query:
    """One-time RAPPOR with one hash (unary encoding): cost ``eps`` over one-hot inputs.

    ``categories`` gives an exact one-hot code; else the value is hashed to one of ``k`` bits of
    the ``cohort`` (a Bloom filter with one hash).
    """
    if categories is not None:
        k = len(categories)
        params: dict[str, Any] = {"field": field, "categories": list(categories)}
    else:
        if k is None or k < 2:
            raise ValidationError("give categories or a number of bits k >= 2")
        params = {"field": field, "k": int(k), "cohort": int(cohort)}
    T = ProductRandomiser(rappor_bit(eps), length=int(k), domain="one_hot")  # noqa: N806
    return Query(qid, T, Code.builtin("one_hot"), fields=(field,), params=params)


def rappor_estimate(reports: Any, eps: float) -> np.ndarray:
    """Unbiased bit frequencies ``(mean bit - q)/(p - q)`` (Erlingsson et al. 2014, one hash)."""
    R = np.asarray(reports, dtype=float)  # noqa: N806
    p = rappor_bit(eps)[1, 1]
    q = 1.0 - p
    return (R.mean(axis=0) - q) / (p - q)


def rappor_variance(f: Any, n: int, eps: float) -> np.ndarray:
    """Var of :func:`rappor_estimate` per category (Wang et al. 2017 with ``p + q = 1``)."""
    p = float(rappor_bit(eps)[1, 1])
    return _pure_variance(np.asarray(f, dtype=float), n, p, 1.0 - p)


# ------------------------------------------------------------------------ numeric (mean) queries
def _binary_rr(eps: float) -> MatrixRandomiser:
    return MatrixRandomiser(rr_matrix(eps, 2), inputs=[-1, 1], outputs=[-1, 1])


def basic_randomiser_query(qid: str, eps: float, field: str, m: int, seed: int) -> Query:
    """The Bassily–Smith basic randomiser (Paper IV Alg. 3): input ``x ∈ {±1/√m}^m ∪ {0}``.

    The reply is ``(j, z_j)``; ``j`` comes from the public seed (per user, see ``derive_seed``).
    """
    return Query(qid, _binary_rr(eps), Code.builtin("basic_randomiser"),
                 Code.builtin("basic_randomiser"), fields=(field,), seed=int(seed),
                 params={"field": field, "m": int(m), "eps": _eps(eps)})


def basic_randomiser_estimate(replies: Sequence[Any], m: int) -> np.ndarray:
    """Unbiased estimate of the users' mean vector: the average of ``z_j e_j``."""
    out = np.zeros(int(m))
    for j, z in replies:
        out[int(j)] += float(z)
    return out / max(len(replies), 1)


def duchi_query(qid: str, eps: float, field: str) -> Query:
    """Duchi et al.'s mean of ``x ∈ [-1, 1]`` (Nguyễn et al.'s fixed version): reply ``±C``."""
    return Query(qid, _binary_rr(eps), Code.builtin("duchi"), Code.builtin("scale"), fields=(field,),
                 params={"field": field, "eps": _eps(eps)})


def duchi_estimate(replies: Sequence[Any]) -> float:
    """The mean of the replies (unbiased for the mean of x)."""
    return float(np.mean(np.asarray(replies, dtype=float)))


def duchi_variance(x: Any, eps: float) -> float:
    """Var of :func:`duchi_estimate`: ``sum_i (C^2 - x_i^2) / n^2`` with ``C = (e^eps+1)/(e^eps-1)``."""
    return mean_variance(np.asarray(x, dtype=float), rr_scale(eps) ** 2)


def harmony_query(qid: str, eps: float, field: str, d: int, seed: int) -> Query:
    """Harmony (Nguyễn et al. 2016): mean of vectors in ``[-1, 1]^d``; reply ``(j, d·C·b)``."""
    return Query(qid, _binary_rr(eps), Code.builtin("harmony"), Code.builtin("harmony"),
                 fields=(field,), seed=int(seed), params={"field": field, "d": int(d), "eps": _eps(eps)})


def harmony_estimate(replies: Sequence[Any], d: int) -> np.ndarray:
    """Unbiased estimate of the mean vector from the ``(j, value)`` replies."""
    return basic_randomiser_estimate(replies, d)


def harmony_variance(X: Any, eps: float) -> np.ndarray:  # noqa: N803
    """Per-coordinate Var of :func:`harmony_estimate`: ``sum_i (d C^2 - x_ik^2) / n^2``."""
    X = np.atleast_2d(np.asarray(X, dtype=float))  # noqa: N806
    return mean_variance(X, X.shape[1] * rr_scale(eps) ** 2)


def mean_variance(X: np.ndarray, second_moment: float) -> Any:  # noqa: N803
    """Var of the mean of n independent unbiased replies with ``E[reply^2] = second_moment``."""
    n = X.shape[0]
    return (n * second_moment - np.sum(X ** 2, axis=0)) / n ** 2
