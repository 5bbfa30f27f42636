"""Exact, vectorised discrete Laplace noise for integer-valued answers (floating-point-safe).

**Distribution.** The discrete Laplace distribution of scale b > 0 on the integers,
``P(Z = z) = (1 - q) / (1 + q) · q^|z|`` with ``q = exp(-1/b)`` (Canonne, Kamath & Steinke 2020,
"The Discrete Gaussian for Differential Privacy", Definition 3 with t/s = b). Scale 0 gives Z = 0.

**Privacy.** For integer answers a and a' the output y = a + Z has
``P(y | a) / P(y | a') = q^(|y-a| - |y-a'|) <= q^(-|a-a'|) = exp(|a - a'| / b)``: the same bound as
continuous Laplace noise of scale b. So the d_X Laplace mechanism of eq. (5) keeps its guarantee
(Theorem 1: ``u_k |F_ki - F_kj| <= eps_ij``) and its per-record cost when answer k is released
with discrete noise of scale ``1/beta_k``, provided every coefficient ``w_k F_ki`` is an integer
(then every answer and every neighbour's change of it is an integer).

**Exactness (no floating point anywhere).** The scale b is a float, i.e. an exact rational t/s
(``float.as_integer_ratio``). Algorithm 2 of Canonne, Kamath & Steinke draws X geometric with
``P(X >= x) = exp(-x/t)`` as X = U + t·V and returns ``±floor(X/s)``:

* U uniform on {0, ..., t-1}: uniform 64-bit words masked to the bit length of t-1, redrawn
  when >= t (rejection, so exactly uniform);
* U is kept with probability exp(-U/t), a Bernoulli drawn exactly by Algorithm 1 of the same
  paper (K = 1, 2, ...: stop at the first failure of Bernoulli(γ/K) = Bernoulli(U/t) ∧
  Bernoulli(1/K); keep if K is odd). Each Bernoulli(a/c) compares uniform random bytes with
  the base-256 digits of a/c computed by integer long division, stopping at the first
  differing digit;
* V with ``P(V >= v) = e^-v``: V counts the thresholds e^-1, e^-2, ... that a uniform real
  R in [0, 1) lies below. R's first 64 bits W fix the answer unless W equals ⌊e^-v·2^64⌋ for
  some v (probability about 2^-58); those rare draws extend R with further words and compare
  them with more digits of e^-v, computed with :mod:`decimal` at rising precision until the
  digits are certain (:func:`_exp_neg_floor`), so the decision is exact;
* ⌊X/s⌋ in int64 when X < 2^62, else with Python integers (a magnitude beyond 2^62 is stored
  as 2^62: with scales <= 2^40 that needs V > 2^21, probability below e^-2000000);
* the sign is a fair bit, and (sign -, magnitude 0) is rejected so that 0 is not counted twice.

Every comparison is between integers (int64/uint64 below 2^63, or Python integers in the rare
overflow branches), so the sample is exactly discrete-Laplace distributed given uniform random
bits. Adding it to an integer answer is integer arithmetic; the released value is that exact
integer (converted to a float only for the return type: exact up to 2^53 in magnitude, beyond
that the rounding is post-processing of an exact release). As the noise does not depend on the
answers it can be drawn before the answers are known (e.g. while the engine computes them).
Candidates are drawn in batches and the first accepted candidate of each output is kept, which
is rejection sampling: the kept candidate has the conditional law of Algorithm 2.

**Randomness.** Secure by default: bytes come from the operating system's CSPRNG
(:func:`os.urandom`); with ``secure=False`` and a seed or ``numpy.random.Generator`` the same exact
algorithm reads its bytes from numpy (reproducible simulations; whoever knows the seed knows the
noise). The grid of the output is the integers.
"""

from __future__ import annotations

import decimal
import math
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from dprivacy.errors import ValidationError
from dprivacy.noise import Rng, resolve_rng

__all__ = ["MAX_SCALE", "discrete_laplace", "add_discrete_laplace", "add_integer_noise",
           "integer_coefficients"]

MAX_SCALE = 2.0**40
"""Largest scale of the vectorised sampler (larger scales: use the continuous sampler)."""

Bytes = Callable[[int], np.ndarray]
"""A source of uniform random bytes: n -> uint8 array of length n."""

_BATCH = 2  # candidates drawn per missing output and round (acceptance is above 1/2)
_XMAX = np.int64(2**62)


def os_bytes(n: int) -> np.ndarray:
    """n uniform bytes from the operating system's CSPRNG."""
    return np.frombuffer(os.urandom(n), dtype=np.uint8)


def numpy_bytes(gen: np.random.Generator) -> Bytes:
    """A byte source reading a numpy Generator (reproducible, for simulations and tests)."""
    return lambda n: gen.integers(0, 256, size=n, dtype=np.uint8)


def _words(rand: Bytes, n: int) -> np.ndarray:
    return rand(8 * n).view(np.uint64) if n else np.zeros(0, np.uint64)


# ----------------------------------------------------------------------- exact primitives
def _uniform_below(bound: np.ndarray, rand: Bytes) -> np.ndarray:
    """U uniform on {0, ..., bound-1} for each entry (bound: int64 >= 1, < 2^62), by rejection."""
    b = bound.astype(np.uint64)
    mask = b - np.uint64(1)
    for sh in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(sh)
    out = _words(rand, b.size) & mask
    bad = np.flatnonzero(out >= b)
    while bad.size:
        out[bad] = _words(rand, bad.size) & mask[bad]
        bad = bad[out[bad] >= b[bad]]
    return out.astype(np.int64)


def _bernoulli(a: np.ndarray, c: np.ndarray, rand: Bytes) -> np.ndarray:
    """True with probability a/c exactly (int64, 0 <= a <= c, 1 <= c < 2^55): uniform bytes
    compared with the base-256 digits of a/c (long division) up to the first difference."""
    num = a.astype(np.int64) * 256  # a <= c < 2^55: no overflow
    d, rem = np.divmod(num, c)
    b = rand(a.size)
    out = b < d  # R < a/c (d may be 256 when a = c: always)
    tie = np.flatnonzero((b == d) & (rem != 0))  # equal digit, a/c's expansion goes on
    if tie.size:  # probability <= 1/256 per entry
        out[tie] = _bernoulli(rem[tie], c[tie], rand)
    return out


def _bern_exp_frac(u: np.ndarray, t: np.ndarray, rand: Bytes) -> np.ndarray:
    """True with probability exp(-u/t) exactly (0 <= u < t < 2^53): Algorithm 1 of Canonne,
    Kamath & Steinke (γ = u/t <= 1): K = 1, 2, ... until Bernoulli(γ/K) fails; True iff that K
    is odd. Bernoulli(u/(t·K)) is one comparison while t·K < 2^55 (K <= 4), else the product of
    the independent Bernoulli(u/t) and Bernoulli(1/K)."""
    out = np.zeros(u.size, dtype=bool)
    act = np.arange(u.size)
    k = 1
    while act.size:
        ua, ta = u[act], t[act]
        if k <= 4:
            ok = _bernoulli(ua, ta * k, rand)
        else:
            both = _bernoulli(np.concatenate([ua, np.ones(act.size, np.int64)]),
                              np.concatenate([ta, np.full(act.size, k, np.int64)]), rand)
            ok = both[: act.size] & both[act.size:]
        if k % 2 == 1:
            out[act[~ok]] = True  # stopped at an odd K
        act = act[ok]
        k += 1
    return out


def _exp_neg_floor(v: int, bits: int) -> int:
    """⌊e^-v · 2^bits⌋ exactly (v >= 1): decimal at rising precision until the floor is certain
    (e^-v is irrational, so the value is never an integer and the loop ends)."""
    prec = bits * 31 // 100 + 30
    while True:
        with decimal.localcontext() as ctx:
            ctx.prec = prec
            e = decimal.Decimal(-v).exp()  # correctly rounded: error <= 1/2 ulp
            x = e * (decimal.Decimal(2) ** bits)  # two roundings more: 3/2 ulp in all
            slack = decimal.Decimal(10) ** (x.adjusted() - prec + 2)  # > 3/2 ulp of x
            lo, hi = math.floor(x - slack), math.floor(x + slack)
        if lo == hi:
            return int(lo)
        prec *= 2


@lru_cache(maxsize=1)
def _thresholds() -> np.ndarray:
    """⌊e^-v · 2^64⌋ for v = 1..45 (uint64, strictly decreasing; the last is 0)."""
    return np.array([_exp_neg_floor(v, 64) for v in range(1, 46)], dtype=np.uint64)


def _geometric_e(n: int, rand: Bytes) -> np.ndarray:
    """V with P(V >= v) = e^-v: the number of v >= 1 with R <= e^-v, R uniform in [0, 1)."""
    w = _words(rand, n)
    th = _thresholds()
    below = w[:, None] < th[None, :]  # R·2^64 < W + 1 <= ⌊e^-v 2^64⌋ < e^-v 2^64: decided yes
    v = below.sum(axis=1).astype(np.int64)  # a prefix v = 1..V (thresholds decrease)
    # W = ⌊e^-v 2^64⌋ for the next threshold: R may lie on either side; decide exactly
    tie = np.flatnonzero(w == th[np.minimum(v, th.size - 1)])
    for i in tie:
        v[i] = _geometric_tail(int(w[i]), int(v[i]), rand)
    return v


def _geometric_tail(w: int, v: int, rand: Bytes) -> int:
    """V given R's first word w and that R <= e^-u for u <= v; exact, with more words of R."""
    words = [w]
    while True:
        u = v + 1  # is R <= e^-u ? compare R's words with e^-u's bits, extending R as needed
        j = 1
        while True:
            bits = 64 * j
            r_prefix = 0
            for x in words[:j]:
                r_prefix = (r_prefix << 64) | x
            f = _exp_neg_floor(u, bits)
            if r_prefix < f:  # R < (prefix + 1)/2^bits <= f/2^bits < e^-u
                v = u
                break
            if r_prefix > f:  # R >= prefix/2^bits > e^-u
                return v
            j += 1
            if len(words) < j:
                words.append(int(_words(rand, 1)[0]))


def _combine(u: np.ndarray, v: np.ndarray, t: np.ndarray, s: np.ndarray, scale: np.ndarray
             ) -> np.ndarray:
    """⌊(u + t·v) / s⌋ exactly (int64 when u + t·v < 2^62, Python integers otherwise; ``s`` may
    be clipped at 2^62, ``scale`` = t/s gives the exact s for the Python branch)."""
    small = v <= (_XMAX // t) - 1  # then u + t·v < t·(v + 1) <= 2^62
    y = np.zeros(u.size, dtype=np.int64)
    sm = np.flatnonzero(small)
    y[sm] = (u[sm] + t[sm] * v[sm]) // np.minimum(s[sm], _XMAX)  # s >= 2^62 > x: same floor
    for i in np.flatnonzero(~small):
        num, den = float(scale[i]).as_integer_ratio()  # num = t[i]; den: s unclipped
        big = (int(u[i]) + num * int(v[i])) // den
        y[i] = min(big, 2**62)  # a magnitude beyond 2^62 (scale <= 2^40: never) saturates
    return y


def _sample(t: np.ndarray, s: np.ndarray, scale: np.ndarray, rand: Bytes) -> np.ndarray:
    """Discrete Laplace of scale t/s (int64 t in [1, 2^53], s >= 1 clipped at 2^62, ``scale``
    the float t/s): Algorithm 2 of Canonne, Kamath & Steinke, batched."""
    n = t.size
    out = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        idx = np.repeat(todo, _BATCH)
        tt, ss, sc = t[idx], s[idx], scale[idx]
        u = _uniform_below(tt, rand)
        keep = _bern_exp_frac(u, tt, rand)
        v = _geometric_e(idx.size, rand)
        y = _combine(u, v, tt, ss, sc)
        neg = (rand(idx.size) & 1).astype(bool)
        ok = keep & ~(neg & (y == 0))
        z = np.where(neg, -y, y)
        # the first accepted candidate of each output (rows of _BATCH candidates)
        okm = ok.reshape(-1, _BATCH)
        has = okm.any(axis=1)
        first = np.argmax(okm, axis=1)
        zm = z.reshape(-1, _BATCH)
        out[todo[has]] = zm[np.flatnonzero(has), first[has]]
        todo = todo[~has]
    return out


# ----------------------------------------------------------------------- public functions
def _params(scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t, s) with scale = t/s exactly, per entry (positive scales only)."""
    t = np.empty(scale.size, dtype=np.int64)
    s = np.empty(scale.size, dtype=np.int64)
    uniq, inv = np.unique(scale, return_inverse=True)
    ts = np.empty(uniq.size, dtype=np.int64)
    ss = np.empty(uniq.size, dtype=np.int64)
    for j, b in enumerate(uniq.tolist()):
        num, den = float(b).as_integer_ratio()
        ts[j], ss[j] = num, min(den, 2**62)  # den >= 2^62 > every X drawn: same floor (_combine)
    t[:], s[:] = ts[inv], ss[inv]
    return t, s


def _check_scale(scale: object, shape: tuple[int, ...]) -> np.ndarray:
    try:
        s = np.asarray(scale, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"scale = {scale!r}: expected a float or an array of floats") from exc
    if not np.all(np.isfinite(s)) or np.any(s < 0) or np.any(s > MAX_SCALE):
        raise ValidationError(
            f"discrete Laplace scales must be finite, >= 0 and <= {MAX_SCALE:g}; got min "
            f"{np.min(s) if s.size else 0}, max {np.max(s) if s.size else 0}")
    try:
        return np.broadcast_to(s, shape).ravel()
    except ValueError as exc:
        raise ValidationError(f"scale of shape {s.shape} does not broadcast to {shape}") from exc


def discrete_laplace(scale: Any, size: int | tuple[int, ...] | None = None, *,
                     rng: Rng = None, secure: bool = True,
                     _bytes: Bytes | None = None) -> np.ndarray:
    """Discrete Laplace noise (int64) of the given scale(s), ``P(z) ∝ exp(-|z|/scale)``.

    Parameters:
        scale: float or array, each in [0, :data:`MAX_SCALE`]; 0 gives exactly 0.
        size: output shape (``scale`` broadcasts to it); None: the shape of ``scale``.
        rng: used only with ``secure=False`` (a seed or Generator; reproducible).
        secure: True (default): bytes from the OS CSPRNG; False: from numpy's ``rng``.

    Returns:
        int64 array of the output shape. Add it to integer answers with
        :func:`add_integer_noise` (exact integer arithmetic).
    """
    shape = np.shape(scale) if size is None else (
        (size,) if isinstance(size, (int, np.integer)) else tuple(size))
    sc = _check_scale(scale, shape)
    rand = _bytes if _bytes is not None else (
        os_bytes if secure else numpy_bytes(resolve_rng(rng)))
    out = np.zeros(sc.size, dtype=np.int64)
    live = np.flatnonzero(sc > 0)
    if live.size:
        t, s = _params(sc[live])
        out[live] = _sample(t, s, sc[live], rand)
    return out.reshape(shape)


def add_integer_noise(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``values + noise`` for int64 arrays, exactly (Python integers where int64 could overflow),
    returned as floats (exact below 2^53 in magnitude; rounding beyond is post-processing)."""
    v = np.asarray(values, dtype=np.int64)
    z = np.asarray(noise, dtype=np.int64)
    if v.shape != z.shape:
        raise ValidationError(f"values of shape {v.shape} and noise of shape {z.shape} differ")
    safe = (np.abs(v) < 2**61) & (np.abs(z) < 2**61)
    if bool(safe.all()):
        return (v + z).astype(float)
    return np.array([float(int(a) + int(b)) for a, b in zip(v.ravel(), z.ravel(), strict=True)],
                    dtype=float).reshape(v.shape)


def integer_values(values: object, noise: str) -> np.ndarray:
    """``values`` as int64, refused unless every value is an integer (``noise`` names the noise
    in the message)."""
    try:
        v = np.asarray(values)
        vi = v.astype(np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValidationError(f"values = {values!r}: expected integers") from exc
    if not np.array_equal(vi, v):
        raise ValidationError(f"values must be integers for {noise} noise")
    return vi


def add_discrete_laplace(values: object, scale: object, *, rng: Rng = None,
                         secure: bool = True) -> np.ndarray:
    """Release ``values + Z`` with Z discrete Laplace of ``scale`` (values: integers)."""
    vi = integer_values(values, "discrete Laplace")
    return add_integer_noise(vi, discrete_laplace(scale, vi.shape, rng=rng, secure=secure))


def integer_coefficients(w: np.ndarray, F: Any, limit: int = 2**20) -> bool:
    """True if every product ``w_k · F_ki`` is exactly an integer of magnitude <= ``limit``
    (decided on the exact binary values, no rounding): then every answer ``w_k F_k x`` of an
    integer histogram x is an integer. ``F``: a dense (m, N) array or a scipy sparse matrix."""
    w = np.asarray(w, dtype=float)
    if sp.issparse(F):
        coo = sp.coo_array(cast(Any, F))
        rows = np.asarray(coo.row, dtype=np.int64)
        fv = np.asarray(coo.data, dtype=float)
    else:
        Fd = np.asarray(F, dtype=float)
        nz = np.nonzero(Fd)
        rows, fv = nz[0].astype(np.int64), Fd[nz]
    wv = w[rows]
    keep = wv != 0
    fv, wv = fv[keep], wv[keep]
    if fv.size == 0:
        return True
    mf, ef = np.frexp(fv)  # value = m·2^e, 0.5 <= |m| < 1: m·2^53 is an exact integer
    mw, ew = np.frexp(wv)
    if not (np.all(np.isfinite(fv)) and np.all(np.isfinite(wv))):
        return False
    af = np.abs((mf * 2.0**53).astype(np.int64))
    aw = np.abs((mw * 2.0**53).astype(np.int64))
    tz = _trailing_zeros(af) + _trailing_zeros(aw)
    # the product is (af·aw) · 2^(ef + ew - 106): an integer iff 2-adic valuation >= 0
    if np.any(tz + ef.astype(np.int64) + ew.astype(np.int64) - 106 < 0):
        return False
    return bool(np.all(np.abs(wv * fv) <= limit))


def _trailing_zeros(a: np.ndarray) -> np.ndarray:
    low = a & -a  # lowest set bit (a > 0): a power of two below 2^53, exact as a float
    return np.log2(low.astype(float)).astype(np.int64)
