"""Metrics from the geometry of point universes: Euclidean, geodesic and Blowfish thresholds.

Location privacy (paper §4.1, §4.3): eps_ij = eps * ||p_i - p_j||.  Blowfish (paper §4.4): a
budget eps inside a distance threshold theta, with two readings A and B (docs/tutorials/blowfish.md).

Each of these metrics offers a geometric index (:meth:`Metric.geometric_index`): points phi_i and
a constant c with ``eps_ij >= c * ||phi_i - phi_j||`` (up to rounding margins), which makes the
solvers' scans over all pairs exact branch and bound (:mod:`solvers.pruned`) instead of N^2 / 2
evaluations. Euclidean: phi = the points; geodesic: phi = Earth-centred 3-D coordinates in km (a
straight chord is never longer than the geodesic, on the sphere or on the WGS84 ellipsoid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from weakref import WeakKeyDictionary

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.metrics.base import DENSE_LIMIT, Metric
from dprivacy.universe import Universe

if TYPE_CHECKING:
    from solvers.pruned import GeometricIndex

#: Mean Earth radius (IUGG), km, for the spherical model.
EARTH_RADIUS_KM = 6371.0088
#: WGS84 semi-major axis (km) and flattening.
WGS84_A_KM = 6378.137
WGS84_F = 1 / 298.257223563
#: Rounding margins of the chord bound for geodesics: relative, and absolute in km (1 micrometre).
_GEO_RTOL, _GEO_ATOL_KM = 1e-9, 1e-9

PairFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


_INDEXES: WeakKeyDictionary[Universe, dict[str, GeometricIndex]] = WeakKeyDictionary()
_EPS_MIN: WeakKeyDictionary[Universe, dict[str, float]] = WeakKeyDictionary()


def _cached_index(metric: Metric, universe: Universe, build: Callable[[], GeometricIndex]
                  ) -> GeometricIndex:
    """One index (k-d tree, neighbour pairs) per (universe object, metric value): universe
    coordinates are read-only and metrics are frozen, so it never goes stale."""
    per = _INDEXES.setdefault(universe, {})
    key = repr(metric)
    if key not in per:
        per[key] = build()
    return per[key]


def _eps_min(metric: Metric, universe: Universe) -> float:
    """eps_min of a metric with a geometric index: the dense path below PRUNE_MIN_N elements,
    else exact nearest-neighbour search (:meth:`ConstraintSet.min_positive_eps`); cached per (universe
    object, metric value) like the index."""
    import solvers.constraints as sc

    if universe.N <= DENSE_LIMIT and universe.N < sc.PRUNE_MIN_N:
        return Metric.eps_min(metric, universe)
    per = _EPS_MIN.setdefault(universe, {})
    key = repr(metric)
    if key not in per:
        per[key] = float(metric.constraint_set(universe).min_positive_eps())
    return per[key]


def _euclid_pairs(c: np.ndarray, scale: float) -> PairFn:
    def pair(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        d = c[i] - c[j]
        return scale * np.sqrt(np.einsum("pd,pd->p", d, d))
    return pair


def ecef_km(latlon: np.ndarray, model: str = "sphere") -> np.ndarray:
    """Earth-centred 3-D coordinates (km) of (latitude, longitude) degree pairs, on the sphere of
    the mean Earth radius or on the WGS84 ellipsoid. The straight chord between two of them is a
    lower bound on their geodesic distance."""
    lat, lon = np.radians(latlon[:, 0]), np.radians(latlon[:, 1])
    if model == "sphere":
        r = np.full(lat.shape, EARTH_RADIUS_KM)
        z = EARTH_RADIUS_KM * np.sin(lat)
    else:
        e2 = WGS84_F * (2 - WGS84_F)
        r = WGS84_A_KM / np.sqrt(1 - e2 * np.sin(lat) ** 2)
        z = r * (1 - e2) * np.sin(lat)
    return np.c_[r * np.cos(lat) * np.cos(lon), r * np.cos(lat) * np.sin(lon), z]


def wgs84_km(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """WGS84 geodesic distances (km) between paired (lat, lon) degree arrays a, b of shape (P, 2):
    pyproj's ``Geod.inv`` (Karney's algorithm, as geopy's ``geodesic``), vectorised."""
    from pyproj import Geod

    _, _, dist = Geod(ellps="WGS84").inv(a[:, 1], a[:, 0], b[:, 1], b[:, 0])
    return np.asarray(dist, dtype=float) / 1000.0


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
    """eps_ij = eps_per_unit * ||p_i - p_j||_2 (geo-indistinguishability style, paper §4.1, §4.3)."""

    eps_per_unit: float = 1.0

    def __post_init__(self) -> None:
        _positive("eps_per_unit", self.eps_per_unit)

    def _check_universe(self, universe: Universe) -> None:
        _coords(universe, "Euclidean")

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        c = _coords(universe, "Euclidean")
        from scipy.spatial.distance import cdist

        return self.eps_per_unit * cdist(c[np.asarray(rows)], c)

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        return self.block(universe, np.arange(universe.N))

    def edges(self, universe: Universe) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """On a line (1-D points) the metric is the path metric of the sorted points: the N - 1
        gaps between neighbours are its edges (docs/theory.md, "Graph metrics need only their
        edges"), so every design constrains N - 1 pairs instead of N (N - 1) / 2.  None in 2-D+."""
        c = _coords(universe, "Euclidean")
        if c.shape[1] != 1 or universe.N < 2:
            return None
        order = np.argsort(c[:, 0], kind="stable").astype(np.int64)
        gaps = np.diff(c[order, 0])
        return order[:-1], order[1:], float(self.eps_per_unit) * gaps

    def geometric_index(self, universe: Universe) -> GeometricIndex:
        """eps_ij = eps_per_unit ||p_i - p_j|| >= eps_per_unit (1 - 1e-9) ||p_i - p_j||."""
        c = _coords(universe, "Euclidean")
        from solvers.pruned import GeometricIndex

        return _cached_index(self, universe, lambda: GeometricIndex(
            c, float(self.eps_per_unit), rtol=1e-9, all_finite=True))

    def pair_budget(self, universe: Universe) -> PairFn:
        return _euclid_pairs(_coords(universe, "Euclidean"), float(self.eps_per_unit))

    def eps_min(self, universe: Universe) -> float:
        """Smallest positive budget; for N above the dense limit by nearest neighbours (exact)."""
        return _eps_min(self, universe)


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
    Earth radius.  ``model="wgs84"``: the ellipsoidal geodesic of Karney's algorithm through
    pyproj's ``Geod`` (vectorised; geopy's ``geodesic`` uses the same algorithm and serves as the
    test oracle).  Both are true metrics.  Universe coordinates must be (lat, lon) in degrees.
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

    def _km(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Distances (km) of paired rows of a and b."""
        if self.model == "sphere":
            la1, lo1 = np.radians(a[:, 0]), np.radians(a[:, 1])
            la2, lo2 = np.radians(b[:, 0]), np.radians(b[:, 1])
            h = (np.sin((la2 - la1) / 2) ** 2
                 + np.cos(la1) * np.cos(la2) * np.sin((lo2 - lo1) / 2) ** 2)
            return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
        return wgs84_km(a, b)

    def block(self, universe: Universe, rows: np.ndarray) -> np.ndarray:
        self._check_universe(universe)
        c = _coords(universe, "Geodesic")
        rows = np.asarray(rows)
        if self.model == "sphere":
            return self.eps_per_km * haversine_km(c[rows], c)
        n = len(c)
        a = np.repeat(c[rows], n, axis=0)
        b = np.tile(c, (len(rows), 1))
        out = wgs84_km(a, b).reshape(len(rows), n)
        out[np.arange(len(rows)), rows] = 0.0
        return self.eps_per_km * out

    def _raw_budget(self, universe: Universe) -> np.ndarray:
        if self.model == "sphere":
            return self.block(universe, np.arange(universe.N))
        c = _coords(universe, "Geodesic")
        i, j = np.triu_indices(len(c), 1)
        out = np.zeros((len(c), len(c)))
        out[i, j] = out[j, i] = wgs84_km(c[i], c[j])
        return self.eps_per_km * out

    def geometric_index(self, universe: Universe) -> GeometricIndex:
        """eps_ij >= eps_per_km * (chord between the Earth-centred points, km), with margins
        rtol = 1e-9 and atol = 1 micrometre for the rounding of both computations."""
        self._check_universe(universe)
        c = _coords(universe, "Geodesic")
        from solvers.pruned import GeometricIndex

        return _cached_index(self, universe, lambda: GeometricIndex(
            ecef_km(c, self.model), float(self.eps_per_km), rtol=_GEO_RTOL, atol=_GEO_ATOL_KM,
            all_finite=True))

    def pair_budget(self, universe: Universe) -> PairFn:
        c = _coords(universe, "Geodesic")

        def pair(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            return self.eps_per_km * self._km(c[i], c[j])
        return pair

    def eps_min(self, universe: Universe) -> float:
        """Smallest positive budget; for N above the dense limit by nearest neighbours (exact)."""
        return _eps_min(self, universe)


@dataclass(frozen=True, repr=False)
class BlowfishThreshold(Metric):
    """Blowfish distance-threshold metrics d_theta^1 / d_theta^2 (paper §4.4; the readings A and B
    are explained in docs/tutorials/blowfish.md).

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
        from scipy.spatial.distance import cdist

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
