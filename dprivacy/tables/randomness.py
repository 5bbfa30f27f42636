"""Where a protected table's randomness comes from: the secure source, or the data owner's seed.

The analyst cannot choose or seed any random draw: the aggregation and sampling methods of
:class:`~dprivacy.tables.Queryable` and :class:`~dprivacy.tables.ProPerTable` take no ``rng`` and
no ``secure`` argument. Each table (and every table derived from it) draws from one
:class:`NoiseSource`, fixed by the data owner when the table is created:

* ``noise_seed=None`` (the default): Laplace noise and exponential-mechanism choices come from
  OpenDP's floating-point-safe exact samplers (Canonne, Kamath & Steinke 2020; Mironov 2012),
  which read the operating system's CSPRNG; uniform draws and sampling keys come from the same
  CSPRNG (:mod:`secrets`). Nothing is reproducible, by design.
* ``noise_seed=<int>``: a numpy ``Generator`` seeded by the data owner draws everything, so a
  simulation can be re-run exactly. It is NOT floating-point-safe and whoever knows the seed
  knows the noise: use it for simulations and tests only, never for a release to an analyst.

Privacy condition: none by itself; the mechanisms that call it (see
:mod:`dprivacy.tables.aggregations`) choose the scales and weights.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from dprivacy import discrete_noise, gaussian_noise, noise
from dprivacy.errors import ValidationError

__all__ = ["NoiseSource"]


class NoiseSource:
    """The randomness of one protected data source (see the module doc).

    Parameters:
        seed: None (secure, the default) or a non-negative int chosen by the data owner for
            reproducible simulations (not floating-point-safe; never for real releases).

    Examples:
        >>> NoiseSource().seeded
        False
        >>> a, b = NoiseSource(3), NoiseSource(3)
        >>> a.add_laplace(10.0, 1.0) == b.add_laplace(10.0, 1.0)
        True
    """

    __slots__ = ("_gen",)

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            self._gen: np.random.Generator | None = None
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValidationError(
                    f"noise_seed = {seed!r}: expected None (secure noise) or an int >= 0"
                )
            self._gen = np.random.default_rng(int(seed))

    @property
    def seeded(self) -> bool:
        """True if the data owner fixed a seed (reproducible, not floating-point-safe)."""
        return self._gen is not None

    def add_laplace(self, values: Any, scale: Any) -> Any:
        """``values + Lap(scale)`` (exact and floating-point-safe unless seeded)."""
        if self._gen is None:
            return noise.add_laplace(values, scale, secure=True)
        return noise.add_laplace(values, scale, rng=self._gen, secure=False)

    def discrete_laplace(self, scale: Any) -> np.ndarray:
        """Integer noise, discrete Laplace of ``scale`` per entry (exact; see
        :mod:`dprivacy.discrete_noise`), to be added to integer answers."""
        if self._gen is None:
            return discrete_noise.discrete_laplace(scale, secure=True)
        return discrete_noise.discrete_laplace(scale, rng=self._gen, secure=False)

    def add_gaussian(self, values: Any, sigma: Any) -> Any:
        """``values + N(0, sigma²)`` (OpenDP's exact, floating-point-safe sampler unless seeded)."""
        if self._gen is None:
            return gaussian_noise.add_gaussian(values, sigma, secure=True)
        return gaussian_noise.add_gaussian(values, sigma, rng=self._gen, secure=False)

    def add_discrete_gaussian(self, value: int, sigma: float) -> float:
        """An integer answer plus exact discrete Gaussian noise (integer arithmetic)."""
        if self._gen is None:
            z = gaussian_noise.discrete_gaussian(sigma, 1, secure=True)
        else:
            z = gaussian_noise.discrete_gaussian(sigma, 1, rng=self._gen, secure=False)
        return float(int(value) + int(z[0]))

    def choice(self, log_weights: Any) -> int:
        """An index k with probability ∝ exp(log_weights[k]) (the exponential mechanism)."""
        if self._gen is None:
            return noise.exponential_choice(log_weights, secure=True)
        return noise.exponential_choice(log_weights, rng=self._gen, secure=False)

    def uniform(self) -> float:
        """A uniform draw from [0, 1) with 53 random bits."""
        if self._gen is None:
            return secrets.randbits(53) / float(1 << 53)
        return float(self._gen.random())

    def secret(self) -> int:
        """A 128-bit key for a sampler (keyed hashing or a keyed counter-based generator)."""
        if self._gen is None:
            return secrets.randbits(128)
        hi, lo = (int(v) for v in self._gen.integers(0, 1 << 63, size=2, dtype=np.int64))
        return (hi << 64) | lo

    def release_rng(self) -> tuple[np.random.Generator | None, bool]:
        """``(rng, secure)`` to hand to a mechanism's ``release`` (d_X releases on tables)."""
        return self._gen, self._gen is None
