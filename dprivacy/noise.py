"""Noise samplers for dprivacy: floating-point-safe by default, and the rng policy.

Every mechanism of the paper ends in one of two random draws:

* **Laplace noise** — the d_X-private Laplace mechanism, eq. (5) / Theorem 1, adds ``Lap(1/beta_k)``
  to query k; the ε-DP baseline (Definition 4) adds ``Lap(Δf/ε)``.
* **Exponential-mechanism choice** — Definition 9 / Theorem 3 (and SmallDB, MWEM, Algorithms 1-2)
  draw an output r with probability ∝ ``exp(β u(x, r) / 2)``; callers pass the log-weights
  ``β u(x, r) / 2`` and this module samples in log space.

Privacy condition: this module only samples; the privacy guarantee (e.g. ``u_k·|F_ki − F_kj| ≤
ε_ij`` of Theorem 1) is checked by the mechanism that chooses the scale or the log-weights.

**Floating-point safety (Mironov 2012).** Textbook Laplace sampling ``-b·sign(U)·ln(1-2|U|)`` in
floating point has a porous output set that depends on the true answer, which leaks it. The
secure path (``secure=True``, the default) delegates to OpenDP (``opendp`` >= 0.12, the
OpenDP project's vetted samplers):

* Laplace: ``opendp.measurements.make_laplace`` on ``vector_domain(atom_domain(T=float))``
  with the default granularity ``k = -1074``, i.e. the *finest* lattice ``2^-1074·Z``: every
  finite float input is exactly on the lattice (no snapping), discrete Laplace noise with scale
  ``scale / 2^k`` is sampled exactly in arbitrary-precision integer arithmetic (Canonne, Kamath &
  Steinke 2020), the sum is formed exactly, and only the final result is rounded to the nearest
  float (post-processing). Output granularity is therefore "full float precision".
  :func:`add_laplace` passes the true answers through this exact path and is the fully safe way
  to release ``values + noise``. :func:`laplace` returns noise alone (the exact sample rounded to
  a float); adding it to an answer in float arithmetic afterwards is outside OpenDP's proof, so
  mechanisms should prefer :func:`add_laplace`.
* Exponential choice: ``opendp.measurements.make_noisy_max`` with the
  ``zero_concentrated_divergence`` output measure, which OpenDP implements as report-noisy-max
  with *Gumbel* noise compared exactly (lazily refined arbitrary-precision samples). Gumbel-max
  with scale 1 is exactly the softmax / exponential-mechanism distribution
  ``P(k) ∝ exp(log_weights[k])``. (OpenDP's ``max_divergence`` measure would give
  permute-and-flip, a *different* distribution, so it is not used.) Only the sampler is used
  here; OpenDP's zCDP privacy map is irrelevant, the ε-DP accounting of Theorem 3 is dprivacy's.

**rng policy.** OpenDP draws from the operating system's CSPRNG and cannot be seeded. Hence with
``secure=True`` the ``rng`` argument is validated but *not used* for the noise; results are not
reproducible, by design. For reproducible simulations (experiments, tests) pass
``secure=False`` and a seed or ``numpy.random.Generator``: the fast path draws with numpy
(``Generator.laplace`` and Gumbel-max with ``Generator.gumbel``) and is NOT floating-point-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np
import opendp.prelude as dp
from opendp.mod import GLOBAL_FEATURES

from dprivacy.errors import ValidationError

__all__ = ["resolve_rng", "laplace", "add_laplace", "exponential_choice"]

logger = logging.getLogger(__name__)
_FEATURES_LOCK = threading.Lock()

Rng = np.random.Generator | int | None  # the ``rng`` argument of every random function


def resolve_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Return a numpy Generator: ``rng`` itself, ``default_rng(seed)`` for an int, new for None."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValidationError(f"rng seed = {rng}: a seed must be a non-negative integer")
        return np.random.default_rng(int(rng))
    raise ValidationError(
        f"rng = {rng!r} ({type(rng).__name__}): pass a numpy.random.Generator, an int seed or None"
    )


def _fast_rng(rng: np.random.Generator | int | None, secure: bool) -> np.random.Generator | None:
    """The Generator for the fast path; on the secure path only validate ``rng`` (it is unused)
    and return None, so that ``gen is None`` exactly when ``secure``."""
    if secure:
        if rng is not None and not isinstance(rng, np.random.Generator):
            resolve_rng(rng)  # raises on a bad seed; a valid one is deliberately unused
        return None
    return resolve_rng(rng)


def _check_scale(scale: Any, size: int | tuple[int, ...] | None) -> np.ndarray:
    """Validate ``scale`` (finite, >= 0) and broadcast it to the output shape."""
    try:
        s = np.asarray(scale, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"scale = {scale!r}: expected a float or an array of floats") from exc
    if not np.all(np.isfinite(s)):
        raise ValidationError(
            "scale contains NaN or infinity: a Laplace scale must be finite "
            "(use 0 for an exact answer; an infinite scale means the query cannot be answered)"
        )
    if np.any(s < 0):
        raise ValidationError(f"scale min = {s.min()}: a Laplace scale must be >= 0")
    if size is None:
        return s
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    try:
        return np.broadcast_to(s, shape)
    except ValueError as exc:
        raise ValidationError(
            f"scale of shape {s.shape} does not broadcast to size {shape}"
        ) from exc


@contextmanager
def _opendp_contrib() -> Iterator[None]:
    """Enable OpenDP's ``"contrib"`` feature only while our own samplers are *built*.

    OpenDP asks users to opt in to its contrib features (``dp.enable_features("contrib")``), a
    process-wide switch. dprivacy does not flip it for the whole process at import: it enables
    the feature around the construction of its two measurements (OpenDP checks features when a
    measurement is made, not when it is invoked) and restores the previous state afterwards, so
    a program that never enabled contrib still has it disabled after using dprivacy, and one
    that did keeps it. Constructions are serialised by a lock.
    """
    with _FEATURES_LOCK:
        already = "contrib" in GLOBAL_FEATURES
        if not already:
            dp.enable_features("contrib")
        try:
            yield
        finally:
            if not already:
                dp.disable_features("contrib")


@lru_cache(maxsize=256)
def _laplace_measurement(scale: float) -> Any:
    """OpenDP float Laplace measurement on vectors (finest lattice k = -1074), cached per scale."""
    with _opendp_contrib():
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
        logger.debug("building OpenDP Laplace measurement, scale %g", scale)
        return dp.m.make_laplace(*space, scale=scale)


@lru_cache(maxsize=1)
def _gumbel_max_measurement() -> Any:
    """OpenDP report-noisy-max with Gumbel(1) noise: P(k) ∝ exp(score_k)."""
    with _opendp_contrib():
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
        return dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=1.0)


def _secure_add(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """values + Laplace(scales) computed exactly by OpenDP; one call per distinct positive scale."""
    flat_v = values.ravel()
    flat_s = scales.ravel()
    out = flat_v.astype(float, copy=True)
    for b in np.unique(flat_s):
        if b == 0.0:
            continue  # scale 0: exact answer, no noise
        idx = np.flatnonzero(flat_s == b)
        out[idx] = _laplace_measurement(float(b))(flat_v[idx].tolist())
    return out.reshape(values.shape)


def laplace(
    scale: Any,
    size: int | tuple[int, ...] | None = None,
    *,
    rng: np.random.Generator | int | None = None,
    secure: bool = True,
) -> np.ndarray | float:
    """Centred Laplace noise ``Lap(scale)`` (density ∝ exp(-|z|/scale), variance 2·scale²).

    Used by the Laplace mechanisms (Definition 4, eq. (5), Theorem 1): the scale of query k is
    ``1 / beta[k]``. Privacy condition (checked by the caller): ``u_k |F_ki - F_kj| <= eps_ij``.

    Args:
        scale: float or array, finite and >= 0; scale 0 gives exactly 0 noise.
        size: output shape as in numpy; ``scale`` must broadcast to it. None: the shape of scale.
        rng: seed or Generator. Used only when ``secure=False``; with ``secure=True`` the noise
            comes from OpenDP's unseedable CSPRNG and ``rng`` is ignored (after validation).
        secure: True (default) = OpenDP's exact sampler (floating-point-safe); False = numpy's
            ``Generator.laplace`` (fast, reproducible, NOT safe against Mironov 2012).

    Returns:
        a float if both ``scale`` is a scalar and ``size`` is None, else an array of the shape.
        Prefer :func:`add_laplace` to release ``answer + noise`` with the full guarantee.
    """
    gen = _fast_rng(rng, secure)
    s = _check_scale(scale, size)
    if gen is None:  # secure
        noise = _secure_add(np.zeros(s.shape), s)
    else:
        noise = gen.laplace(0.0, 1.0, size=s.shape) * s
    if noise.shape == () and size is None:
        return float(noise)
    return noise


def add_laplace(
    values: Any,
    scale: Any,
    *,
    rng: np.random.Generator | int | None = None,
    secure: bool = True,
) -> np.ndarray | float:
    """Release ``values + Lap(scale)`` elementwise; the fully floating-point-safe form.

    With ``secure=True`` the true values enter OpenDP's exact sampler (every float is on its
    lattice, the sum is exact, the result is rounded once), so the output distribution does not
    leak low-order bits of ``values`` (Mironov 2012). Same scale, rng and secure rules as
    :func:`laplace`; ``scale`` broadcasts to the shape of ``values``. Privacy condition (checked
    by the caller): Theorem 1, ``u_k |F_ki - F_kj| <= eps_ij``.
    """
    gen = _fast_rng(rng, secure)
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"values = {values!r}: expected floats") from exc
    if not np.all(np.isfinite(v)):
        raise ValidationError("values contain NaN or infinity: only finite answers can be released")
    s = _check_scale(scale, v.shape if v.shape else None)
    if s.shape != v.shape:
        raise ValidationError(f"scale of shape {s.shape} does not match values of shape {v.shape}")
    if gen is None:  # secure
        out = _secure_add(v, s)
    else:
        out = v + gen.laplace(0.0, 1.0, size=v.shape) * s
    if out.shape == ():
        return float(out)
    return out


def exponential_choice(
    log_weights: Any,
    *,
    rng: np.random.Generator | int | None = None,
    secure: bool = True,
) -> int:
    """Sample an index k with probability ``exp(log_weights[k]) / Σ_j exp(log_weights[j])``.

    The exponential mechanism (Definition 6; d_X form Definition 9, Theorem 3; SmallDB and MWEM's
    selection steps) with ``log_weights[r] = β u(x, r) / 2``. Sampling is by Gumbel-max in log
    space: no exponentials are formed, so huge utilities (e.g. offsets of 1e6) cannot overflow.
    ``-inf`` entries have probability 0 and are never returned. Privacy condition (checked by the
    caller): Theorem 3, ``β Δu_ij <= eps_ij`` for every constrained pair.

    Args:
        log_weights: 1-D array-like of floats; no NaN or +inf; at least one finite entry.
        rng: as in :func:`laplace` (ignored when ``secure=True``; OpenDP's CSPRNG is used).
        secure: True (default) = OpenDP's exact Gumbel report-noisy-max; False = numpy's
            ``Generator.gumbel`` + argmax (fast, reproducible, not floating-point-safe).
    """
    gen = _fast_rng(rng, secure)
    try:
        lw = np.asarray(log_weights, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"log_weights = {log_weights!r}: expected floats") from exc
    if lw.ndim != 1 or lw.size == 0:
        raise ValidationError(f"log_weights has shape {lw.shape}: expected a non-empty 1-D array")
    if np.any(np.isnan(lw)):
        raise ValidationError(f"log_weights[{int(np.flatnonzero(np.isnan(lw))[0])}] is NaN")
    if np.any(lw == np.inf):
        raise ValidationError(
            f"log_weights[{int(np.flatnonzero(lw == np.inf)[0])}] = +inf: weights must be finite "
            "(use -inf for impossible outputs)"
        )
    live = np.flatnonzero(np.isfinite(lw))
    if live.size == 0:
        raise ValidationError("every log_weight is -inf: there is nothing to choose")
    if live.size == 1:
        return int(live[0])
    if gen is None:  # secure
        return int(live[_gumbel_max_measurement()(lw[live].tolist())])
    return int(live[np.argmax(lw[live] + gen.gumbel(size=live.size))])
