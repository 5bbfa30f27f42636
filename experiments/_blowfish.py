"""Shared computation of Fig 4 and Fig 5: Blowfish threshold metrics on synthetic points (§4.4).

Data of paper §4.1 (N points on a grid, spec §7.2 P1/P3), random U[0, 1] single queries, the
d_X Laplace mechanism with w = 1 and the closed form beta* (spec §3.8), squared loss.  Metrics
(spec §8.3): ``BlowfishThreshold(theta, eps, rule, smooth)`` with rule "A" (secret graph of pairs
within theta + shortest-path closure) or "B" (already metrics), smooth=False = d_theta^1,
smooth=True = d_theta^2.

RMSE is computed analytically, not by sampling: a Laplace variable of scale b has RMSE sqrt(2) b,
so the d_X mechanism has RMSE sqrt(2) / beta* and the baseline (the eps_min-DP Laplace mechanism,
the only eps-DP Laplace that is d_X-private, spec §3.1) sqrt(2) Delta f / eps_min.  Both are exact
expectations (w = 1, no bias).  IF = RMSE_baseline / RMSE_dX (spec §3.9).
Privacy condition of every design: beta* |f_i - f_j| <= d_theta(i, j) for every constrained pair.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.data import synthetic_points
from experiments import _common as C

COLUMNS = ["rule", "metric", "theta", "eps", "query", "noise_scale", "baseline_scale", "IF",
           "rmse_dx", "rmse_baseline"]
#: spec §7.2 P8 placeholders {5, 10, 20, 50} grid units, extended by 100 and 200 to show large theta.
THETAS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
EPS = (0.1, 1.0)


def sizes(quick: bool) -> dict:
    """Universe and sweep sizes; quick keeps the full run's point density (N / grid² = 1e-3)."""
    if quick:
        return {"N": 150, "grid": 400, "queries": 20, "thetas": (10.0, 30.0, 100.0), "eps": EPS}
    return {"N": 1000, "grid": 1000, "queries": 200, "thetas": THETAS, "eps": EPS}


@cache
def _table(quick: bool, seed: int) -> pd.DataFrame:
    s = sizes(quick)
    rng = np.random.default_rng(seed)
    U = dp.Universe.from_points(synthetic_points(s["N"], s["grid"], rng=rng))
    F = dp.Workload.random_uniform(s["queries"], s["N"], rng=rng).dense()
    configs = [(r, sm, th, e) for r in ("A", "B") for sm in (False, True)
               for th in s["thetas"] for e in s["eps"]]
    parts = []
    for rule, smooth, theta, eps in C.progress(configs, "blowfish metrics"):
        M = dp.metrics.BlowfishThreshold(theta=theta, eps=eps, rule=rule, smooth=smooth)
        t = C.single_query_if(F, U, M)
        if theta == s["thetas"][0] and eps == s["eps"][0]:
            C.check_against_design(F, U, M, t, k=1)
        t["rmse_dx"] = np.sqrt(2) * t["noise_scale"]
        t["rmse_baseline"] = np.sqrt(2) * t["baseline_scale"]
        t.insert(0, "eps", eps)
        t.insert(0, "theta", theta)
        t.insert(0, "metric", "d2" if smooth else "d1")
        t.insert(0, "rule", rule)
        parts.append(t)
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def table(quick: bool, seed: int) -> pd.DataFrame:
    """Per (rule, metric, theta, eps, query): designed and baseline noise, IF and RMSE.

    Cached per (quick, seed) so that Fig 4 and Fig 5 share one computation in ``run_all``.
    """
    return _table(bool(quick), int(seed)).copy()
