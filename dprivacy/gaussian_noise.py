"""Gaussian noise: an exact discrete Gaussian for integer answers, OpenDP's continuous Gaussian
otherwise (both floating-point-safe by default).

**Discrete Gaussian** (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential
Privacy"): ``P(Z = z) ∝ exp(-z^2 / (2 sigma^2))`` on the integers. For integer answers a and a'
the Rényi divergence of order alpha between ``a + Z`` and ``a' + Z`` is at most
``alpha (a - a')^2 / (2 sigma^2)`` (their zCDP bound for the discrete Gaussian, the same as
for the continuous Gaussian), so the privacy condition of a Gaussian design (docs/theory.md,
"Gaussian noise and metric zCDP") holds unchanged when every answer is an integer. Sampling
is Algorithm 3 of the same paper, in exact rational arithmetic: with ``sigma^2 = a/b`` (the
float sigma is the exact rational n/d, so ``sigma^2 = n^2/d^2``) and ``t = floor(sigma) + 1``,

1. Y is discrete Laplace of scale t (:func:`dprivacy.discrete_noise.discrete_laplace`, exact,
   batched);
2. Y is kept with probability ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``, a Bernoulli drawn
   exactly by Algorithm 1 of the paper (``exp(-gamma)`` for a rational gamma: ``floor(gamma)``
   Bernoulli(e^-1) draws, then the fractional part by the alternating-series loop), every
   Bernoulli(p/q) being a uniform integer below q compared with p (uniform by rejection);
3. rejected candidates are redrawn; the first kept candidate of each output is returned.

No floating-point number enters a decision, so given uniform random bits the output is exactly
discrete-Gaussian distributed. Bits come from the operating system's CSPRNG (:func:`os.urandom`)
by default, or from a seeded numpy Generator with ``secure=False`` (reproducible simulations).

**Continuous Gaussian**: with ``secure=True`` the answers go through OpenDP's
``make_gaussian`` on ``vector_domain(atom_domain(T=float))`` (OpenDP samples a discrete Gaussian
on the lattice ``2^-1074 Z`` exactly, adds it exactly and rounds the result once), the
floating-point-safe counterpart of :func:`dprivacy.noise.add_laplace`; ``secure=False`` is
numpy's ``Generator.normal`` (fast, reproducible, NOT floating-point-safe).
"""

from __future__ import annotations

import logging
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import opendp.prelude as odp

from dprivacy.discrete_noise import (
    Bytes,
    add_integer_noise,
    discrete_laplace,
    integer_values,
    numpy_bytes,
    os_bytes,
)
from dprivacy.errors import ValidationError
from dprivacy.noise import Rng, _fast_rng, _opendp_contrib, resolve_rng

__all__ = ["MAX_SIGMA", "discrete_gaussian", "add_discrete_gaussian", "add_gaussian", "gaussian"]

logger = logging.getLogger(__name__)

MAX_SIGMA = 2.0**30
"""Largest sigma of the exact discrete sampler (its Laplace proposal has scale floor(sigma)+1)."""


def _check_sigma(sigma: Any, shape: tuple[int, ...] | None, *, limit: float = np.inf) -> np.ndarray:
    try:
        s = np.asarray(sigma, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"sigma = {sigma!r}: expected a float or an array of floats") from exc
    if s.size and (not np.all(np.isfinite(s)) or np.any(s < 0) or np.any(s > limit)):
        raise ValidationError(
            f"a Gaussian noise sigma must be finite, >= 0 (0 = exact answer) and <= {limit:g}; "
            f"got min {np.min(s)}, max {np.max(s)}")
    if shape is None:
        return s
    try:
        return np.broadcast_to(s, shape)
    except ValueError as exc:
        raise ValidationError(f"sigma of shape {s.shape} does not broadcast to {shape}") from exc


# ----------------------------------------------------------------------- exact discrete sampler
def _randbelow(n: int, rand: Bytes) -> int:
    """Uniform integer in [0, n) (n >= 1) from uniform bytes, by rejection."""
    k = (n - 1).bit_length()
    if k == 0:
        return 0
    nbytes, mask = (k + 7) // 8, (1 << k) - 1
    while True:
        r = int.from_bytes(rand(nbytes).tobytes(), "little") & mask
        if r < n:
            return r


def _bernoulli(p: int, q: int, rand: Bytes) -> bool:
    """True with probability p/q exactly (0 <= p <= q, q >= 1)."""
    return _randbelow(q, rand) < p


def _bernoulli_exp_le1(p: int, q: int, rand: Bytes) -> bool:
    """True with probability exp(-p/q) for 0 <= p/q <= 1 (Algorithm 1 of Canonne, Kamath &
    Steinke): K = 1, 2, ... while Bernoulli(gamma/K) succeeds; True iff the stopping K is odd."""
    k = 1
    while _bernoulli(p, q * k, rand):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(gamma: Fraction, rand: Bytes) -> bool:
    """True with probability exp(-gamma) exactly, gamma >= 0 rational."""
    whole = gamma.numerator // gamma.denominator
    for _ in range(whole):
        if not _bernoulli_exp_le1(1, 1, rand):
            return False
    frac = gamma - whole
    return _bernoulli_exp_le1(frac.numerator, frac.denominator, rand)


def _sample_one_sigma(n: int, sigma: float, rand: Bytes) -> np.ndarray:
    """n exact discrete Gaussians of one sigma > 0 (Algorithm 3, batched proposals)."""
    s = Fraction(sigma)
    s2 = s * s
    t = int(s) + 1  # floor(sigma) + 1
    out = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        y = discrete_laplace(np.full(2 * todo.size, float(t)), _bytes=rand)
        filled = []
        pos = 0
        for idx in todo.tolist():
            while pos < y.size:
                cand = int(y[pos])
                pos += 1
                gamma = (abs(cand) - s2 / t) ** 2 / (2 * s2)
                if _bernoulli_exp(gamma, rand):
                    out[idx] = cand
                    filled.append(idx)
                    break
            else:
                break  # proposals used up: redraw for the rest
        todo = np.setdiff1d(todo, np.asarray(filled, dtype=np.int64), assume_unique=True)
    return out


def discrete_gaussian(sigma: Any, size: int | tuple[int, ...] | None = None, *, rng: Rng = None,
                      secure: bool = True, _bytes: Bytes | None = None) -> np.ndarray:
    """Exact discrete Gaussian noise (int64), ``P(z) ∝ exp(-z^2 / (2 sigma^2))``.

    Parameters:
        sigma: float or array, each in [0, :data:`MAX_SIGMA`]; 0 gives exactly 0.
        size: output shape (``sigma`` broadcasts to it); None: the shape of ``sigma``.
        rng: used only with ``secure=False`` (a seed or Generator; reproducible).
        secure: True (default): bits from the OS CSPRNG; False: from numpy's ``rng``.

    Examples
    --------
    >>> z = discrete_gaussian(3.0, 5, rng=0, secure=False)
    >>> z.dtype, z.shape
    (dtype('int64'), (5,))
    """
    shape = np.shape(sigma) if size is None else (
        (size,) if isinstance(size, (int, np.integer)) else tuple(size))
    sg = _check_sigma(sigma, shape, limit=MAX_SIGMA).ravel()
    rand = _bytes if _bytes is not None else (
        os_bytes if secure else numpy_bytes(resolve_rng(rng)))
    out = np.zeros(sg.size, dtype=np.int64)
    for s in np.unique(sg[sg > 0]).tolist():
        idx = np.flatnonzero(sg == s)
        out[idx] = _sample_one_sigma(idx.size, float(s), rand)
    return out.reshape(shape)


def add_discrete_gaussian(values: Any, sigma: Any, *, rng: Rng = None,
                          secure: bool = True) -> np.ndarray:
    """Release ``values + Z``, Z exact discrete Gaussian of ``sigma`` (values: integers; the sum
    is exact integer arithmetic, returned as floats)."""
    vi = integer_values(values, "discrete Gaussian")
    return add_integer_noise(vi, discrete_gaussian(sigma, vi.shape, rng=rng, secure=secure))


# ----------------------------------------------------------------------- continuous (OpenDP)
@lru_cache(maxsize=256)
def _gaussian_measurement(sigma: float) -> Any:
    """OpenDP float Gaussian measurement on vectors (lattice 2^-1074), cached per sigma."""
    with _opendp_contrib():
        space = odp.vector_domain(odp.atom_domain(T=float, nan=False)), odp.l2_distance(T=float)
        logger.debug("building OpenDP Gaussian measurement, sigma %g", sigma)
        return odp.m.make_gaussian(*space, scale=sigma)


def add_gaussian(values: Any, sigma: Any, *, rng: Rng = None, secure: bool = True
                 ) -> np.ndarray | float:
    """Release ``values + N(0, sigma^2)`` elementwise (``sigma`` broadcasts to the values).

    ``secure=True`` (default): OpenDP's exact sampler (floating-point-safe, ``rng`` unused);
    ``secure=False``: numpy's seedable ``Generator.normal`` (simulations only). sigma 0 = exact.
    """
    gen = _fast_rng(rng, secure)
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"values = {values!r}: expected floats") from exc
    if not np.all(np.isfinite(v)):
        raise ValidationError("values contain NaN or infinity: only finite answers can be released")
    s = _check_sigma(sigma, v.shape)
    if gen is None:
        flat_v, flat_s = v.ravel(), s.ravel()
        out = flat_v.astype(float, copy=True)
        for b in np.unique(flat_s).tolist():
            if b == 0.0:
                continue
            idx = np.flatnonzero(flat_s == b)
            out[idx] = _gaussian_measurement(float(b))(flat_v[idx].tolist())
        res = out.reshape(v.shape)
    else:
        res = v + gen.normal(0.0, 1.0, size=v.shape) * s
    if res.shape == ():
        return float(res)
    return res


def gaussian(sigma: Any, size: int | tuple[int, ...] | None = None, *, rng: Rng = None,
             secure: bool = True) -> np.ndarray | float:
    """Centred Gaussian noise N(0, sigma^2) (see :func:`add_gaussian` for the secure path)."""
    shape = np.shape(sigma) if size is None else (
        (size,) if isinstance(size, (int, np.integer)) else tuple(size))
    s = _check_sigma(sigma, shape)
    out = add_gaussian(np.zeros(shape), s, rng=rng, secure=secure)
    return out if np.ndim(out) or size is not None or np.ndim(sigma) else float(out)
