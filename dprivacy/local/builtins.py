"""Pre- and post-processors shipped with dprivacy (the case studies of Paper IV §4).

Builtins run in the agent's own process: they are the user's installed code, not the analyst's.
A builtin ``pre`` gets ``(data, params, seed, rng)`` where ``data`` holds only the fields the query
lists, ``seed`` is the query's public seed and ``rng`` the agent's private generator; a builtin
``post`` gets ``(z, params, seed, rng)`` with ``z`` the output of T. Whatever a pre returns is
domain-enforced by the agent, so a builtin may return garbage (e.g. ``None`` for an unknown
category) without revealing anything.

Privacy condition: none here (pre-processing is free for plain local DP, Paper IV Theorem 2;
post-processing is free, Theorem 1); the cost is that of T.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dprivacy.local.limits import DEFAULT_LIMITS

__all__ = ["POSTS", "PRES", "bloom_bit", "derive_seed", "public_index", "rr_scale"]

Pre = Callable[[Mapping[str, Any], Mapping[str, Any], "int | None", np.random.Generator], Any]
Post = Callable[[Any, Mapping[str, Any], "int | None", np.random.Generator], Any]


def rr_scale(eps: float) -> float:
    """``c_eps = (e^eps + 1) / (e^eps - 1)`` (Bassily–Smith, Duchi et al.; Paper V Note 8).

    Examples
    --------
    >>> round(rr_scale(2.0), 12)  # = coth(1), the replies of Paper V Note 10
    1.313035285499
    """
    return (math.exp(eps) + 1) / (math.exp(eps) - 1)


def derive_seed(seed: int | None, user: str) -> int | None:
    """The public seed one user's processors see: sha256 of the query seed and the user's id.

    Each user thus draws independent public randomness (Bassily–Smith's j) that the aggregator
    can recompute from the seed and the id.

    Examples
    --------
    >>> derive_seed(7, "u1") == derive_seed(7, "u1") != derive_seed(7, "u2")
    True
    """
    if seed is None:
        return None
    return int.from_bytes(hashlib.sha256(f"{seed}:{user}".encode()).digest()[:8], "big")


def public_index(seed: int | None, m: int) -> int:
    """The public coordinate j in [0, m) from the shared seed (Paper IV Alg. 3, line 1).

    The seed each user sees is already a 64-bit hash (:func:`derive_seed`), so ``seed mod m`` is
    uniform up to ``m / 2^64``.
    """
    if seed is None:
        raise ValueError("this processor needs the query's public seed")
    return int(seed) % int(m)


def bloom_bit(value: Any, k: int, cohort: int = 0) -> int:
    """One-hash Bloom filter position of ``value`` in ``k`` bits for a cohort (RAPPOR's encoding)."""
    h = hashlib.sha256(f"{cohort}:{value}".encode()).digest()
    return int.from_bytes(h[:8], "big") % k


def _field(data: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    name = params.get("field")
    if name is None:
        (name,) = tuple(data)  # the single requested field
    return data[name]


def pre_field(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
              rng: np.random.Generator) -> Any:
    """Return the requested field (Warner's randomised response: T acts on the value itself)."""
    return _field(data, params)


def pre_category(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
                 rng: np.random.Generator) -> Any:
    """Index of the field's value in ``params['categories']`` (None if absent: enforced)."""
    v = _field(data, params)
    cats = list(params["categories"])
    return cats.index(v) if v in cats else None


def pre_one_hot(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
                rng: np.random.Generator) -> Any:
    """One-hot vector of the value: by its index in ``categories``, or its one-hash Bloom bit
    among ``k`` bits (one-time RAPPOR with one hash, Erlingsson et al. 2014).

    ``k`` is the analyst's: a ``k`` above the longest product randomiser a query may carry gives
    None (no T could take the vector) before anything is allocated, so the step stays within
    its schedule (``k = 2·10⁸`` built a 1.6 GB list that held the agent for seconds)."""
    v = _field(data, params)
    if "categories" in params:
        cats = list(params["categories"])
        if v not in cats:
            return None
        i, k = cats.index(v), len(cats)
    else:
        k = int(params["k"])
        if not 0 < k <= DEFAULT_LIMITS.max_length:  # no randomiser has more coordinates
            return None
        i = bloom_bit(v, k, int(params.get("cohort", 0)))
    out = [0] * k
    out[i] = 1
    return out


def pre_basic_randomiser(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
                         rng: np.random.Generator) -> Any:
    """Pre of the Bassily–Smith basic randomiser (Paper IV Alg. 3) on ``x ∈ {±1/√m}^m ∪ {0}``.

    Returns the sign of ``x_j`` (``j`` from the public seed) in {-1, 1}, or a uniform sign when
    ``x = 0``. T then keeps the sign with probability e^eps/(1+e^eps).
    """
    x = np.asarray(_field(data, params), dtype=float)
    m = int(params["m"])
    if x.shape != (m,):
        return None
    if not np.any(x):
        return int(rng.choice([-1, 1]))
    j = public_index(seed, m)
    return 1 if x[j] > 0 else -1


def pre_duchi(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
              rng: np.random.Generator) -> Any:
    """Randomised rounding of ``x ∈ [-1, 1]`` to ±1 with ``Pr[+1] = (1 + x)/2`` (Duchi et al. 1-D,
    as fixed by Nguyễn et al.); T is then binary randomised response."""
    x = float(_field(data, params))
    if not -1.0 <= x <= 1.0:
        return None
    return 1 if rng.random() < (1.0 + x) / 2.0 else -1


def pre_harmony(data: Mapping[str, Any], params: Mapping[str, Any], seed: int | None,
                rng: np.random.Generator) -> Any:
    """Harmony (Nguyễn et al. 2016): coordinate ``j`` (public seed) of ``x ∈ [-1, 1]^d``, rounded to ±1."""
    x = np.asarray(_field(data, params), dtype=float)
    d = int(params["d"])
    if x.shape != (d,) or np.any(np.abs(x) > 1):
        return None
    j = public_index(seed, d)
    return 1 if rng.random() < (1.0 + x[j]) / 2.0 else -1


def post_scale(z: Any, params: Mapping[str, Any], seed: int | None, rng: np.random.Generator) -> Any:
    """``z · (e^eps + 1)/(e^eps − 1)`` (Paper V Scenario Note 8; Duchi et al.'s ±C)."""
    return float(z) * rr_scale(float(params["eps"]))


def post_basic_randomiser(z: Any, params: Mapping[str, Any], seed: int | None,
                          rng: np.random.Generator) -> Any:
    """``(j, z_j)`` with ``z_j = sign · c_eps · √m`` (Paper IV Alg. 3, Post)."""
    m = int(params["m"])
    return [public_index(seed, m), float(z) * rr_scale(float(params["eps"])) * math.sqrt(m)]


def post_harmony(z: Any, params: Mapping[str, Any], seed: int | None, rng: np.random.Generator) -> Any:
    """``(j, d · C · z)``: an unbiased estimate of ``x`` placed at coordinate j."""
    d = int(params["d"])
    return [public_index(seed, d), float(z) * d * rr_scale(float(params["eps"]))]


PRES: dict[str, Pre] = {
    "field": pre_field, "category": pre_category, "one_hot": pre_one_hot,
    "basic_randomiser": pre_basic_randomiser, "duchi": pre_duchi, "harmony": pre_harmony,
}
POSTS: dict[str, Post] = {
    "scale": post_scale, "basic_randomiser": post_basic_randomiser, "harmony": post_harmony,
}
