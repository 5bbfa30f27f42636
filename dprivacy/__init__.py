"""dprivacy: design d_X-private mechanisms for linear queries by optimisation.

The privacy budget follows a metric d_X on the data universe: eps_ij = d_X(chi_i, chi_j) bounds the
privacy loss of moving one record from element i to element j (Definition 2).
"""

from dprivacy import data, errors, metrics, noise
from dprivacy._version import __version__
from dprivacy.accounting import Accountant
from dprivacy.audit import AuditResult, audit
from dprivacy.config import MechanismConfig
from dprivacy.design import LOSSES, METHODS, Design, design, improvement_factor
from dprivacy.group import group_privacy_loss
from dprivacy.implicit_workload import ImplicitWorkload
from dprivacy.mechanisms import (
    DXMWEM,
    DXExponential,
    DXLaplace,
    DXSmallDB,
    Laplace,
    StrategyDesign,
    StrategyMechanism,
    design_strategy,
)
from dprivacy.universe import Universe
from dprivacy.workload import Workload

__all__ = [
    "Accountant", "LOSSES", "METHODS", "AuditResult", "DXExponential", "DXLaplace", "DXMWEM", "DXSmallDB",
    "Design", "Laplace", "MechanismConfig", "Universe", "Workload", "audit", "data", "design",
    "__version__", "errors", "group_privacy_loss", "improvement_factor", "metrics", "noise",
    "ImplicitWorkload", "StrategyDesign", "StrategyMechanism", "design_strategy",
]
