"""The design report the command prints: noise per query against the eps_min-DP baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


#: rows the report shows without --all-rows (every row when the workload has at most this many)
WORST = 10


def _exact_warning(names: list[str], exact: np.ndarray, m: int) -> str | None:
    if exact.size == 0:
        return None
    shown = ", ".join(repr(names[k]) for k in exact[:5]) + (", ..." if exact.size > 5 else "")
    return (f"warning: {exact.size} of {m} queries ({shown}) are released EXACTLY, with no "
            "noise: their answer never changes when a record moves (e.g. the total count); "
            "d_X-privacy hides where a record is, not how many records there are")


def _error_lines(var: np.ndarray, lower_bound: float | None) -> list[str]:
    total = float(np.sum(var))
    line = (f"expected total squared error {total:.6g} (RMSE {np.sqrt(total / var.size):.6g} "
            f"per query)")
    if lower_bound is not None and lower_bound > 0:
        gap = total / lower_bound - 1.0
        line += (f"; certified lower bound {lower_bound:.6g} (no strategy does better), gap "
                 f"{100 * gap:.3g} %")
    return [line]


def _rows(table: pd.DataFrame, std: np.ndarray, all_rows: bool) -> list[str]:
    """The worst queries by standard deviation (every row with ``all_rows`` or a short list)."""
    m = len(table)
    if all_rows or m <= WORST:
        head = "every query:"
        shown = table
    else:
        order = np.argsort(-std, kind="stable")[:WORST]
        head = (f"the {WORST} worst of {m} queries (largest standard deviation; every row: "
                "--all-rows):")
        shown = table.iloc[order]
    return [head, shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")]


def summary_text(W: Any, U: Universe, M: Metric, d: Any, *,  # noqa: N803
                 all_rows: bool = False) -> str:
    """The report of any design, (w, beta) or strategy, in one format: the inputs, the method
    and its privacy ratio, the expected total squared error and RMSE (with the certified lower
    bound and its gap when known), the exact-answer warning, and the worst queries by standard
    deviation (every row with ``all_rows``)."""
    import pandas as pd

    head = f"universe N = {U.N}, metric {M!r}, m = {W.m} queries"
    if getattr(d, "is_kron", False):
        return _kron_text(W, d, head)
    names = W.query_names()
    if getattr(d, "method", "") == "strategy" or hasattr(d, "basis"):
        var = np.asarray(d.query_variances(), dtype=float)
        std = np.sqrt(np.maximum(var, 0.0))
        lines = [head,
                 f"design: method strategy, {d.p} noisy measurements answer the {W.m} queries by "
                 f"least squares ({d.report.get('start', '?')} start, {d.basis.kind} basis), "
                 f"max privacy ratio {d.max_ratio:.9f} (<= 1 is private)"]
        lines += _error_lines(var, d.lower_bound)
        exact = np.flatnonzero(std <= 1e-9 * max(float(std.max(initial=0.0)), 1e-300))
        table = pd.DataFrame({"query": names, "std": std})
    else:
        t = design_table(W, U, M, d)
        std = np.sqrt(2.0) * np.asarray(d.noise_scale, dtype=float)
        lines = [head + f", eps_min = {M.eps_min(U):.6g}, Delta F = {W.sensitivity():.6g}",
                 f"design: method {d.method}, loss {d.loss}, max privacy ratio "
                 f"{d.max_ratio(W):.9f} (<= 1 is private)"]
        lb = d.report.get("lower_bound") if isinstance(d.report, dict) else None
        lines += _error_lines(std ** 2, None if lb is None else float(lb))
        if np.any(np.asarray(d.w) < 1):
            lines[-1] += " (noise only; w < 1 adds the shrinkage bias)"
        exact = np.flatnonzero(np.isinf(d.beta) & (np.asarray(d.w) > 0))
        if t["IF"].isna().any():  # w = 0: the query is answered by 0, not released
            t["IF"] = [f"{v:.4g}" if v == v else "w=0" for v in t["IF"]]
        t.insert(1, "std", std)
        table = t
    warn = _exact_warning(names, exact, W.m)
    if warn:
        lines.append(warn)
    lines += _rows(table, std, all_rows)
    if "IF" in table.columns:
        lines.append(f"geometric-mean IF: {float(improvement_factor(W, U, M, d)):.4g}")
        lines.append(
            "(std: standard deviation of the noise, sqrt(2) / beta_k; baseline_noise: Laplace "
            "scale of the eps_min-DP baseline,\n Delta F / eps_min; designed_noise: 1 / beta_k; "
            "IF = baseline_noise / designed_noise; alone_noise: the noise if the query\n were "
            "released on its own; IF_alone = baseline_noise / alone_noise)")
    else:
        row_noise = "N(0, 1)" if getattr(d, "noise", "laplace") == "gaussian" else "Lap(1)"
        lines.append("(std: standard deviation of each least-squares answer; the noise of each "
                     f"measurement is {row_noise})")
    return "\n".join(lines)


def _kron_text(W: Any, d: Any, head: str) -> str:  # noqa: N803
    """The report of a Kronecker strategy: the same lines, from the per-axis factors (the m
    per-query variances are scanned a block at a time, the names of the worst few only)."""
    from dprivacy.mechanisms.kron_strategy import kron_report

    r = kron_report(W, d)
    lines = [head,
             f"design: method strategy, {d.p} noisy measurements ("
             + ("every cell and " if d.C.cells else "")
             + f"a Kronecker product {d.C.Bx.shape[0]} x {d.C.By.shape[0]} of per-axis "
             f"strategies) answer the {W.m} "
             f"queries by least squares ({d.report.get('start', '?')} start), max privacy ratio "
             f"{d.max_ratio:.9f} (<= 1 is private; a proved upper bound over every pair)"]
    total = float(r["total"])
    line = (f"expected total squared error {total:.6g} (RMSE {np.sqrt(total / W.m):.6g} per "
            "query)")
    if d.lower_bound is not None and d.lower_bound > 0:
        line += (f"; certified lower bound {d.lower_bound:.6g} (no strategy does better), gap "
                 f"{100 * (total / d.lower_bound - 1.0):.3g} %")
    lines.append(line)
    ident = d.report.get("identity_error")
    if ident:
        lines.append(f"each cell measured once instead: expected total squared error "
                     f"{float(ident):.6g} ({float(ident) / total:.3g} x this strategy's)")
    if r["exact"]:
        lines.append(f"warning: {r['exact']} of {W.m} queries (e.g. the whole grid, the total "
                     "count) are released EXACTLY, with no noise: their answer never changes "
                     "when a record moves; d_X-privacy hides where a record is, not how many "
                     "records there are")
    lines.append(f"the {len(r['worst'])} worst of {W.m} queries (largest standard deviation; "
                 "--all-rows is not available for a Kronecker strategy):")
    width = max(len(n) for n, _ in r["worst"])
    lines.append(f"{'query':>{width}}  std")
    lines += [f"{n:>{width}}  {np.sqrt(v):.4g}" for n, v in r["worst"]]
    lines.append("(std: standard deviation of each least-squares answer; the noise of each "
                 "measurement is Lap(1))")
    return "\n".join(lines)


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
