"""The design report the command prints: noise per query against the eps_min-DP baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dprivacy.design import Design, improvement_factor
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe
from dprivacy.workload import Workload

if TYPE_CHECKING:
    import pandas as pd


def design_table(W: Workload, U: Universe, M: Metric, d: Design) -> pd.DataFrame:  # noqa: N803
    """Per query: range, baseline scale Delta F / eps_min, designed scale 1 / beta_k, w_k, IF_k,
    the noise the query would get if released on its own (``alone_noise``: the single-query
    optimum of paper §4.1, max_ij |f_i - f_j| / eps_ij, never above ``designed_noise`` when
    w_k = 1, since m queries released together share the budget), and ``IF_alone``, the same
    baseline over ``alone_noise`` (so IF_alone >= IF whenever w_k = 1: one baseline for both).

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> t = design_table(W, U, M, dp.design(W, U, M, method="closed_form"))
    >>> list(t.columns)[:4]
    ['query', 'range', 'baseline_noise', 'designed_noise']
    """
    import pandas as pd

    eps_min, dF = M.eps_min(U), W.sensitivity()
    per = np.asarray(improvement_factor(W, U, M, d, per_query=True), dtype=float)
    cs = M.constraint_set(U)
    c, _, _ = cs.row_lipschitz(W.dense(), memory_bytes=2**26)
    baseline = np.full(W.m, dF / eps_min)
    with np.errstate(divide="ignore", invalid="ignore"):
        alone_if = np.where(c > 0, baseline / c, np.inf)
    return pd.DataFrame({"query": W.query_names(), "range": W.ranges(),
                         "baseline_noise": baseline, "designed_noise": d.noise_scale, "w": d.w,
                         "IF": per, "alone_noise": c, "IF_alone": alone_if})


def report_text(W: Workload, U: Universe, M: Metric, d: Design) -> str:  # noqa: N803
    """The summary line, the per-query table and the geometric-mean IF, as printed."""
    t = design_table(W, U, M, d)
    if t["IF"].isna().any():  # w = 0: the query is answered by 0, not released
        t["IF"] = [f"{v:.4g}" if v == v else "w=0" for v in t["IF"]]
    return "\n".join([
        f"universe N = {U.N}, metric {M!r}, eps_min = {M.eps_min(U):.6g}, "
        f"Delta F = {W.sensitivity():.6g}, m = {W.m} queries",
        f"design: method {d.method}, loss {d.loss}, max privacy ratio "
        f"{d.max_ratio(W):.9f} (<= 1 is private)",
        t.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
        f"geometric-mean IF: {float(improvement_factor(W, U, M, d)):.4g}",
        "(baseline_noise: Laplace scale of the eps_min-DP baseline, Delta F / eps_min, on every "
        "query;\n designed_noise: 1 / beta_k; IF = baseline_noise / designed_noise (w=0: the query "
        "is answered by 0, or w <= 1e-9 is numerically zero, and it is left out);\n alone_noise: "
        "the noise if the query were released on its own, with the whole budget (the m queries\n "
        "above share it, so alone_noise <= designed_noise); IF_alone = baseline_noise / "
        "alone_noise, the same baseline)"])
