"""Baselines for d_X-local randomisers on a finite set of locations, at the same privacy.

* :func:`exponential_randomiser`: ``T[x, z] ∝ exp(-eps[x, z] / 2)`` over the N locations, which is
  ``eps``-private for every pair (a triangle-inequality argument; checked by ``check_dx``).
* :func:`planar_laplace_loss`: the planar Laplace mechanism of geo-indistinguishability (Andrés
  et al., CCS 2013) with ``eps_per_unit`` per unit of Euclidean distance, followed by remapping
  to the nearest location; ``eps_per_unit·d_2``-private by post-processing. Its expected loss is
  estimated by Monte Carlo (with a standard error).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from dprivacy.noise import resolve_rng

__all__ = ["exponential_randomiser", "planar_laplace_loss", "planar_laplace_sample"]


def exponential_randomiser(eps: Any) -> np.ndarray:
    """The exponential mechanism ``T[x, z] ∝ exp(-eps[x, z]/2)`` (``eps`` a metric).

    Examples
    --------
    >>> from dprivacy.local.cost import check_dx
    >>> d = np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))
    >>> check_dx(exponential_randomiser(d), d).ok
    True
    """
    e = np.asarray(eps, dtype=float)
    w = np.exp(-(e - e.min(axis=1, keepdims=True)) / 2.0)
    return w / w.sum(axis=1, keepdims=True)


def planar_laplace_sample(points: Any, eps_per_unit: float, size: int, rng: Any = None) -> np.ndarray:
    """``size`` draws of the planar Laplace noise around each point: array (N, size, 2)."""
    g = resolve_rng(rng)
    p = np.asarray(points, dtype=float)
    r = g.gamma(2.0, 1.0 / float(eps_per_unit), size=(p.shape[0], size))  # radius density ε² r e^{-εr}
    theta = g.uniform(0.0, 2 * np.pi, size=(p.shape[0], size))
    return p[:, None, :] + np.stack([r * np.cos(theta), r * np.sin(theta)], axis=-1)


def planar_laplace_loss(points: Any, eps_per_unit: float, loss: Any, prior: Any = None, *,
                        samples: int = 2000, rng: Any = None) -> tuple[float, float]:
    """Expected loss (and its Monte Carlo standard error) of planar Laplace + nearest-location remap.

    Parameters
    ----------
    points : array (N, 2)
        Planar coordinates (the unit of ``eps_per_unit``).
    eps_per_unit : float
    loss : array (N, N)
        ``loss[x, z]`` of reporting location z for true location x.
    prior : array (N,), optional (default uniform)
    samples : int
        Draws per location.
    """
    p = np.asarray(points, dtype=float)
    n = p.shape[0]
    pi = np.full(n, 1.0 / n) if prior is None else np.asarray(prior, dtype=float)
    noisy = planar_laplace_sample(p, eps_per_unit, samples, rng)
    _, z = cKDTree(p).query(noisy.reshape(-1, 2))
    per = np.asarray(loss, dtype=float)[np.repeat(np.arange(n), samples), z].reshape(n, samples)
    mean = float(np.sum(pi * per.mean(axis=1)))
    se = float(np.sqrt(np.sum(pi ** 2 * per.var(axis=1, ddof=1) / samples)))
    return mean, se
