"""d_X-private mechanisms (and their eps-DP baselines) built from a solved Design."""

from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.laplace import DXLaplace, Laplace
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB
from dprivacy.mechanisms.strategy import StrategyDesign, StrategyMechanism, design_strategy

__all__ = ["DXMWEM", "DXExponential", "DXLaplace", "DXSmallDB", "Laplace", "StrategyDesign",
           "StrategyMechanism", "design_strategy"]
