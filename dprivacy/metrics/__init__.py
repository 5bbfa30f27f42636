"""The metric family: each metric turns a universe into the budget eps_ij = d_X(chi_i, chi_j).

==================================================  ==============================================
metric                                              eps_ij
==================================================  ==============================================
``Euclidean(eps_per_unit)``                         eps_per_unit x Euclidean distance of the points
``Geodesic(eps_per_km, model="sphere"|"wgs84")``    eps_per_km x distance in km of (lat, lon) points
``BlowfishThreshold(theta, eps, rule="A"|"B")``     Blowfish's distance-threshold policies
``Discrete(eps)``                                   eps between any two distinct elements (plain DP)
``AttributeWeighted(eps)``                          sum_k eps_k over the attributes that differ
``ValueWeighted(rule="min"|"max"|"hub")``           per-value budgets combined per attribute
                                                    (paper eq. (3))
``ElementWise(eps)``                                (eps_i + eps_j) / 2: a budget per element
``Graph`` / ``Matrix``                              shortest paths of a weighted graph / any matrix
==================================================  ==============================================

A budget per unit of distance ``a`` means: an observer's odds between two elements at distance
d change by at most e^(a d) (docs/theory.md, "Choosing ε per unit of distance"). A matrix that
breaks the triangle inequality is replaced by its shortest-path closure, with a
:class:`ClosureWarning`; infinite entries mean "no constraint".

Examples
--------
>>> import numpy as np, dprivacy as dp
>>> U = dp.Universe.from_points(np.array([[0.0, 0.0], [3.0, 4.0]]))
>>> float(Euclidean(eps_per_unit=0.1).eps_min(U))
0.5
"""

from dprivacy.metrics.attribute import AttributeWeighted, Discrete, ElementWise, ValueWeighted
from dprivacy.metrics.base import (
    DENSE_LIMIT,
    ClosureWarning,
    Metric,
    shortest_path_closure,
    validate_budget,
)
from dprivacy.metrics.geometric import BlowfishThreshold, Euclidean, Geodesic, haversine_km
from dprivacy.metrics.graph import Graph, Matrix

__all__ = [
    "DENSE_LIMIT", "AttributeWeighted", "BlowfishThreshold", "ClosureWarning", "Discrete",
    "ElementWise", "Euclidean", "Geodesic", "Graph", "Matrix", "Metric", "ValueWeighted",
    "haversine_km", "shortest_path_closure", "validate_budget",
]
