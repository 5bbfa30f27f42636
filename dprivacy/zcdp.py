"""From metric zCDP to (eps_ij, delta) per pair (docs/theory.md, "Gaussian noise and metric zCDP").

A release that is rho-zCDP per unit of the metric gives the pair (i, j) at distance d the zCDP
parameter ``rho d``; two conversions to approximate DP for that pair:

* :func:`zcdp_eps` -- for any rho'-zCDP mechanism (Bun & Steinke 2016, Proposition 1.3):
  ``eps = rho' + 2 sqrt(rho' ln(1/delta))``;
* :func:`gaussian_eps` -- the exact curve of the continuous Gaussian mechanism (Balle & Wang 2018,
  Theorem 8): with ``mu = ||Delta / sigma||_2`` the smallest eps with
  ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) <= delta``. A design at rho per unit has
  ``mu_ij <= sqrt(2 rho d_ij)`` on every pair, and the curve rises in mu.

Examples
--------
>>> round(zcdp_eps(0.5, 1e-6), 4)
5.7565
>>> gaussian_eps(1.0, 1e-6) < zcdp_eps(0.5, 1e-6)
True
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm

from dprivacy.errors import ValidationError

__all__ = ["gaussian_delta", "gaussian_eps", "zcdp_eps"]


def _check_delta(delta: float) -> float:
    d = float(delta)
    if not 0 < d < 1:
        raise ValidationError(f"delta = {delta!r}: a probability strictly between 0 and 1")
    return d


def zcdp_eps(rho: float, delta: float) -> float:
    """``rho + 2 sqrt(rho ln(1/delta))``: (eps, delta)-DP of a rho-zCDP mechanism."""
    r = float(rho)
    if not (r >= 0 and math.isfinite(r)):
        raise ValidationError(f"rho = {rho!r}: expected a finite number >= 0")
    return r + 2.0 * math.sqrt(r * math.log(1.0 / _check_delta(delta)))


def gaussian_delta(mu: float, eps: float) -> float:
    """The exact delta of the Gaussian mechanism with ``mu = ||shift / sigma||`` at ``eps``."""
    if mu <= 0:
        return 0.0
    return float(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu))


def gaussian_eps(mu: float, delta: float) -> float:
    """The smallest eps >= 0 with :func:`gaussian_delta` (mu, eps) <= delta (Balle & Wang)."""
    d = _check_delta(delta)
    m = float(mu)
    if not (m >= 0 and math.isfinite(m)):
        raise ValidationError(f"mu = {mu!r}: expected a finite number >= 0")
    if m == 0 or gaussian_delta(m, 0.0) <= d:
        return 0.0
    hi = 1.0
    while gaussian_delta(m, hi) > d:
        hi *= 2.0
    e = float(brentq(lambda x: gaussian_delta(m, x) - d, 0.0, hi, xtol=1e-12, rtol=1e-12))
    while gaussian_delta(m, e) > d:  # the root to the safe side
        e = e * (1 + 1e-12) + 1e-15
    return e
