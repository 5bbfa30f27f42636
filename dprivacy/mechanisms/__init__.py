"""d_X-private mechanisms (and their eps-DP baselines) built from a solved Design.

Every mechanism checks its privacy condition over all constrained pairs (or the edges of a
graph metric) when it is built, and refuses to exist otherwise:

==============================  ==================================  ==========================================
class                           paper                               privacy condition checked
==============================  ==================================  ==========================================
``DXLaplace(W, d)``             eq. (5), Theorem 1                  sum_k beta_k w_k |F_ki - F_kj| <= eps_ij
``Laplace(W, eps)``             Definition 4 (the eps-DP baseline)  the same, with one eps for every pair
``DXExponential(utility, d)``   Definition 9, Theorem 3             beta max_r w_r |U_ri - U_rj| <= eps_ij
``DXSmallDB(W, d, size=...)``   Algorithm 1, Theorem 5              beta max_f w_f |f_i - f_j| <= eps_ij
``DXMWEM(W, d, T=...)``         Algorithm 2, Theorem 7              2 T beta max_f w_f |f_i - f_j| <= eps_ij
``StrategyMechanism``           strategy matrix A (see its module)  ||A (e_i - e_j)||_1 <= eps_ij
``DXGaussian(W, d)``            per-query Gaussian noise, zCDP      sum_k (dF_k / sigma_k)^2 <= 2 rho eps_ij
==============================  ==================================  ==========================================

(dF_k = F_ki - F_kj.) A release draws floating-point-safe noise by default (OpenDP) and charges an
:class:`~dprivacy.Accountant` when given one (k releases on the same records are
k·d_X-private). The docs page "Mechanisms, budgets and configs" walks through each.

Examples
--------
>>> import numpy as np, dprivacy as dp
>>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
>>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
>>> mech = DXLaplace(W, dp.design(W, U, M), universe=U, metric=M)
>>> mech.release(np.array([2, 0, 1]), secure=False, rng=0).shape
(1,)
"""

from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.gaussian import DXGaussian
from dprivacy.mechanisms.laplace import DXLaplace, Laplace
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB
from dprivacy.mechanisms.strategy import StrategyDesign, StrategyMechanism, design_strategy

__all__ = ["DXMWEM", "DXExponential", "DXGaussian", "DXLaplace", "DXSmallDB", "Laplace", "StrategyDesign",
           "StrategyMechanism", "design_strategy"]
