"""dprivacy: design d_X-private mechanisms for linear queries by optimisation.

The privacy budget follows a metric d_X on the data universe: eps_ij = d_X(chi_i, chi_j) bounds the
privacy loss of moving one record from element i to element j (Definition 2).

The names below load on first use (``dprivacy.Universe`` imports :mod:`dprivacy.universe`), so
``import dprivacy`` and the ``dprivacy`` command start quickly; solvers and their libraries (cvxpy,
scipy.optimize, POT) load only when a design or a transport problem needs them.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from dprivacy._version import __version__

if TYPE_CHECKING:
    from dprivacy import data, errors, metrics, noise
    from dprivacy.accounting import Accountant
    from dprivacy.audit import AuditResult, audit
    from dprivacy.config import MechanismConfig
    from dprivacy.design import LOSSES, METHODS, Design, design, improvement_factor
    from dprivacy.gaussian_design import GaussianDesign
    from dprivacy.group import group_privacy_loss
    from dprivacy.implicit_workload import ImplicitWorkload
    from dprivacy.mechanisms import (
        DXMWEM,
        DXExponential,
        DXGaussian,
        DXLaplace,
        DXSmallDB,
        Laplace,
        StrategyDesign,
        StrategyMechanism,
        design_strategy,
    )
    from dprivacy.universe import Universe
    from dprivacy.workload import Workload

#: public name -> the module that defines it (a submodule's own name maps to itself)
_WHERE = {
    "data": "dprivacy.data", "errors": "dprivacy.errors", "metrics": "dprivacy.metrics",
    "noise": "dprivacy.noise",
    "Accountant": "dprivacy.accounting", "AuditResult": "dprivacy.audit", "audit": "dprivacy.audit",
    "MechanismConfig": "dprivacy.config",
    "LOSSES": "dprivacy.design", "METHODS": "dprivacy.design", "Design": "dprivacy.design",
    "design": "dprivacy.design", "improvement_factor": "dprivacy.design",
    "group_privacy_loss": "dprivacy.group", "ImplicitWorkload": "dprivacy.implicit_workload",
    "DXMWEM": "dprivacy.mechanisms", "DXExponential": "dprivacy.mechanisms",
    "DXGaussian": "dprivacy.mechanisms", "GaussianDesign": "dprivacy.gaussian_design",
    "DXLaplace": "dprivacy.mechanisms", "DXSmallDB": "dprivacy.mechanisms",
    "Laplace": "dprivacy.mechanisms", "StrategyDesign": "dprivacy.mechanisms",
    "StrategyMechanism": "dprivacy.mechanisms", "design_strategy": "dprivacy.mechanisms",
    "Universe": "dprivacy.universe", "Workload": "dprivacy.workload",
}

__all__ = [
    "Accountant", "LOSSES", "METHODS", "AuditResult", "DXExponential", "DXLaplace", "DXMWEM", "DXSmallDB",
    "Design", "Laplace", "MechanismConfig", "Universe", "Workload", "audit", "data", "design",
    "__version__", "errors", "group_privacy_loss", "improvement_factor", "metrics", "noise",
    "ImplicitWorkload", "StrategyDesign", "StrategyMechanism", "design_strategy", "DXGaussian",
    "GaussianDesign",
]


#: public functions that share their name with the submodule defining them
_SHADOWED = frozenset({"audit", "design"})


class _Package(types.ModuleType):
    """This package's module type: importing the submodule ``dprivacy.design`` (or ``audit``)
    leaves ``dprivacy.design`` the function, as the eager imports used to."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the submodule stays reachable through sys.modules
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'dprivacy' has no attribute {name!r}")
    module = importlib.import_module(where)
    is_module = where == f"dprivacy.{name}" and name not in _SHADOWED
    value = module if is_module else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function (__setattr__ would drop a function)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
