"""The metric family: each metric turns a universe into the budget eps_ij = d_X(chi_i, chi_j)."""

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
