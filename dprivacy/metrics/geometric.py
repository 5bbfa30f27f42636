"""Metrics from the geometry of point universes: Euclidean, geodesic and Blowfish thresholds.

Location privacy (paper §4.1, §4.3; spec §8.3): eps_ij = eps * ||p_i - p_j||.  Blowfish (paper
§4.4; spec §8.3): a budget eps inside a distance threshold theta, with two readings A and B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.spatial.distance import cdist

from dprivacy.errors import ValidationError
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe

#: Mean Earth radius (IUGG), km, for the spherical model.
EARTH_RADIUS_KM = 6371.0088


def _positive(name: str, value: float, *, allow_inf: bool = False) -> float:
    v = float(value)
    if np.isnan(v) or v < 0 or (np.isinf(v) and not allow_inf):
        raise ValidationError(f"{name} = {value}: must be a non-negative finite number")
    return v


def _coords(universe: Universe, who: str) -> np.ndarray:
    if universe.coords is None:
        raise ValidationError(
            f"{who} needs a universe of points (Universe.from_points or coords=...)"
        )
    return universe.coords


@dataclass(frozen=True, repr=False)
class Euclidean(Metric):
    """eps_ij = eps_per_unit * ||p_i - p_j||_2 (geo-indistinguishability style, spec §8.3)."""

    eps_per_unit: float = 1.0

    def __post_init__(self) -> None:
        _positive("eps_per_unit", self.eps_per_unit)

    def _check_universe(self, universe: Universe) -> None:
        _coords(universe, "Euclidean")

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        c = _coords(universe, "Euclidean")
        return self.eps_per_unit * cdist(c[np.asarray(rows)], c)

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))


def haversine_km(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Great-circle distances (km) between (lat, lon) degree arrays a (n, 2) and b (m, 2)."""
    la1, lo1 = np.radians(a[:, 0])[:, None], np.radians(a[:, 1])[:, None]
    la2, lo2 = np.radians(b[:, 0])[None, :], np.radians(b[:, 1])[None, :]
    h = np.sin((la2 - la1) / 2) ** 2 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


@dataclass(frozen=True, repr=False)
class Geodesic(Metric):
    """eps_ij = eps_per_km * geodesic distance (km) between (latitude, longitude) points.

    ``model="sphere"``: vectorised great-circle (haversine) distance on a sphere of the mean
    Earth radius.  ``model="wgs84"``: geopy's ellipsoidal geodesic (Karney), exact but O(N^2)
    Python calls.  Both are true metrics.  Universe coordinates must be (lat, lon) in degrees.
    """

    eps_per_km: float = 1.0
    model: Literal["sphere", "wgs84"] = "sphere"

    def __post_init__(self) -> None:
        _positive("eps_per_km", self.eps_per_km)
        if self.model not in ("sphere", "wgs84"):
            raise ValidationError(f"model must be 'sphere' or 'wgs84', got {self.model!r}")

    def _check_universe(self, universe: Universe) -> None:
        c = _coords(universe, "Geodesic")
        if c.shape[1] != 2:
            raise ValidationError("Geodesic needs 2-D (latitude, longitude) coordinates")
        if np.any(np.abs(c[:, 0]) > 90) or np.any(np.abs(c[:, 1]) > 180):
            raise ValidationError(
                "Geodesic coordinates must be (latitude in [-90, 90], longitude in [-180, 180])"
            )

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        self._check_universe(universe)
        c = _coords(universe, "Geodesic")
        rows = np.asarray(rows)
        if self.model == "sphere":
            return self.eps_per_km * haversine_km(c[rows], c)
        from geopy.distance import geodesic

        out = np.zeros((len(rows), len(c)))
        for r, i in enumerate(rows):
            for j in range(len(c)):
                if i != j:
                    out[r, j] = geodesic(tuple(c[i]), tuple(c[j])).km
        return self.eps_per_km * out

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        if self.model == "sphere":
            return self.block(universe, np.arange(universe.N))
        from geopy.distance import geodesic

        c = _coords(universe, "Geodesic")
        n = len(c)
        out = np.zeros((n, n))
        for i in range(n):
            for j in range(i + 1, n):
                out[i, j] = out[j, i] = geodesic(tuple(c[i]), tuple(c[j])).km
        return self.eps_per_km * out


@dataclass(frozen=True, repr=False)
class BlowfishThreshold(Metric):
    """Blowfish distance-threshold metrics d_theta^1 / d_theta^2 (paper §4.4, spec §8.3).

    With delta_ij the Euclidean distance of the points:

    * reading ``"A"`` (graph + closure): pairs with delta_ij <= theta are secret pairs (edges)
      with budget ``eps`` (``smooth=False``, d^1) or ``eps * delta_ij / theta`` (``smooth=True``,
      d^2); other pairs get the shortest-path closure (eps x hops), +inf across components.
    * reading ``"B"`` (already metrics): d^1 = eps * max(1, delta_ij/theta), d^2 = eps*delta_ij/theta.
    """

    theta: float = 1.0
    eps: float = 1.0
    rule: Literal["A", "B"] = "A"
    smooth: bool = False

    def __post_init__(self) -> None:
        if not float(self.theta) > 0:
            raise ValidationError(f"theta = {self.theta}: the threshold must be positive")
        _positive("eps", self.eps)
        if self.rule not in ("A", "B"):
            raise ValidationError(f"rule must be 'A' (graph + closure) or 'B', got {self.rule!r}")

    def _check_universe(self, universe: Universe) -> None:
        _coords(universe, "BlowfishThreshold")

    def _delta(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        c = _coords(universe, "BlowfishThreshold")
        return cdist(c[np.asarray(rows)], c)

    def edges(self, universe: Universe):
        if self.rule != "A":
            return None
        c = _coords(universe, "BlowfishThreshold")
        from scipy.spatial import cKDTree

        pairs = cKDTree(c).query_pairs(self.theta, output_type="ndarray")
        if pairs.size == 0:
            e = np.zeros(0, dtype=np.int64)
            return e, e, np.zeros(0)
        i, j = pairs[:, 0], pairs[:, 1]
        delta = np.linalg.norm(c[i] - c[j], axis=1)
        w = self.eps * delta / self.theta if self.smooth else np.full(len(i), float(self.eps))
        return i.astype(np.int64), j.astype(np.int64), w

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        if self.rule == "A":
            return self.budget(universe)[np.asarray(rows)]
        d = self._delta(universe, rows)
        if self.smooth:
            return self.eps * d / self.theta
        out = self.eps * np.maximum(1.0, d / self.theta)
        out[d == 0] = 0.0
        return out

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        if self.rule == "B":
            return self.block(universe, np.arange(universe.N))
        from dprivacy.metrics.base import shortest_path_closure

        n = universe.N
        a = np.full((n, n), np.inf)
        np.fill_diagonal(a, 0.0)
        i, j, w = self.edges(universe)
        a[i, j] = w
        a[j, i] = w
        return shortest_path_closure(a)
