"""Strategy mechanisms against per-query rescaling: total expected squared error side by side.

For each workload the script designs (1) the eps_min-DP Laplace baseline (scale Delta F / eps_min on
every query, Definition 4), (2) the exact (w, beta) design (the convex program of docs/theory.md;
graph and line metrics on their edges) and (3) an optimised strategy mechanism
(:func:`dprivacy.design_strategy`: release A x + Lap(1)^p, answer F A^+ y), and reports the total
expected squared error of each: m 2 (Delta F / eps_min)^2, sum_k 2 / beta_k^2 and 2 ||F A^+||_F^2.
Every strategy is checked independently of the library's scans: the ratio
||A (e_i - e_j)||_1 / eps_ij over all pairs from the dense budget matrix (N <= 2048), or over all
edges plus 200 000 random pairs (larger N).  A second table gives the error against N on a line
with all range queries (the plot).  Privacy condition of a strategy:
||A (e_i - e_j)||_1 <= eps_ij for every pair.

A third table repeats the random-points workload on independently drawn instances (seeds
1..5: points uniform in the 10 x 10 square and dense uniform queries), so that its figure is not
one lucky draw.

Run:  python -m experiments.strategy_vs_scaling [--quick] [--seed S] [--only SUBSTRING]
Output: strategy.csv (workload, N, m, method, error, seconds, max_ratio, lower_bound),
strategy_vs_n.csv, strategy_points_seeds.csv, strategy.png and strategy.md (the tables).
``--only`` runs the workloads whose name contains SUBSTRING and writes strategy_only.csv and
strategy_only.md instead (no plot, no table against N, no seeds table).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy import metrics
from experiments import _common as C

NAME = "strategy"
COLUMNS = ["workload", "N", "m", "method", "error", "seconds", "max_ratio", "lower_bound"]
BASE, WB, STRAT, PREFIX = "eps_min-DP baseline", "exact (w, beta)", "strategy", "prefix sums"


def _ranges(N: int, count: int | None, rng: np.random.Generator) -> dp.Workload:  # noqa: N803
    if count is None:
        return dp.Workload.range_queries(N, [(a, b) for a in range(N) for b in range(a, N)])
    ends = np.sort(rng.integers(0, N, size=(count, 2)), axis=1)
    import scipy.sparse as sp

    rows = np.concatenate([np.full(b - a + 1, k) for k, (a, b) in enumerate(ends)])
    cols = np.concatenate([np.arange(a, b + 1) for a, b in ends])
    return dp.Workload(sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(count, N)))


def _rectangles(g: int, count: int, rng: np.random.Generator) -> dp.Workload:
    rows = []
    for _ in range(count):
        x0, x1 = np.sort(rng.integers(0, g, 2))
        y0, y1 = np.sort(rng.integers(0, g, 2))
        r = np.zeros((g, g))
        r[x0:x1 + 1, y0:y1 + 1] = 1.0
        rows.append(r.ravel())
    return dp.Workload(np.array(rows))


def workloads(quick: bool, seed: int) -> list[tuple[str, dp.Universe, metrics.Metric, dp.Workload]]:
    """The issue's workloads (smaller with ``quick``)."""
    rng = np.random.default_rng(seed)

    def line(N: int) -> dp.Universe:  # noqa: N803
        return dp.Universe.from_points(np.arange(N, dtype=float)[:, None])

    e01 = metrics.Euclidean(0.1)
    out = []
    n64, n256, nbig = (16, 48, 300) if quick else (64, 256, 8192)
    out.append((f"line {n64}, all ranges", line(n64), e01, _ranges(n64, None, rng)))
    out.append((f"line {n256}, {'200' if quick else '2000'} random ranges", line(n256), e01,
                _ranges(n256, 200 if quick else 2000, rng)))
    out.append((f"line {nbig}, {'200' if quick else '2000'} random ranges", line(nbig), e01,
                _ranges(nbig, 200 if quick else 2000, rng)))
    g = 8 if quick else 32
    grid = dp.Universe.from_points(np.array([[a, b] for a in range(g) for b in range(g)], float))
    out.append((f"grid {g}x{g}, {'100' if quick else '500'} rectangles", grid, e01,
                _rectangles(g, 100 if quick else 500, rng)))
    npts = 40 if quick else 150
    pts = dp.Universe.from_points(rng.uniform(0, 10, (npts, 2)))
    out.append((f"{npts} random points, 10 dense queries", pts, e01,
                dp.Workload(rng.random((10, npts)))))
    U, cities = C.cities_universe()
    if quick:
        cities = cities.head(60).reset_index(drop=True)
        U = dp.Universe.from_points(cities[["latitude", "longitude"]].to_numpy())
    crng = np.random.default_rng(0)  # the demo's queries (dprivacy demo, --seed 0, --m 5)
    F = np.vstack([crng.uniform(0, 1, size=(5, U.N)), cities["elevation"].to_numpy() / 1000])
    out.append((f"{U.N} US cities, demo workload", U, metrics.Geodesic(eps_per_km=0.1), dp.Workload(F)))
    d = 4 if quick else 8
    prod = dp.Universe.from_domains({k: list(range(d)) for k in "abc"})
    out.append((f"attributes {d}x{d}x{d}, 2-way marginals", prod,
                metrics.AttributeWeighted({"a": 1.0, "b": 1.0, "c": 1.0}),
                dp.Workload.marginals(prod, k=2)))
    return out


def independent_ratio(A: np.ndarray, U: dp.Universe, M: metrics.Metric, seed: int) -> float:
    """max ||A e_i - A e_j||_1 / eps_ij without the library's scans: every pair of the dense
    budget matrix (N <= 2048), else every edge of the metric and 200 000 random pairs."""
    N = A.shape[1]  # noqa: N806
    worst = 0.0
    if N <= 2048:
        eps = M.budget(U)
        for i in range(N - 1):
            d = np.abs(A[:, i:i + 1] - A[:, i + 1:]).sum(axis=0)
            e = eps[i, i + 1:]
            ok = np.isfinite(e) & (d > 0)
            if ok.any():
                worst = max(worst, float(np.max(d[ok] / e[ok])))
        return worst
    rng = np.random.default_rng(seed)
    I, J = rng.integers(0, N, 200_000), rng.integers(0, N, 200_000)  # noqa: N806, E741
    keep = I != J
    I, J = I[keep], J[keep]  # noqa: N806, E741
    e = M.edges(U)
    if e is not None:
        I, J = np.r_[I, e[0]], np.r_[J, e[1]]  # noqa: N806, E741
    # the budget of each pair straight from the metric's rows (no constraint set)
    eps = np.concatenate([M.block(U, I[s:s + 256])[np.arange(min(256, I.size - s)), J[s:s + 256]]
                          for s in range(0, I.size, 256)])
    for s in range(0, I.size, 4096):
        ii, jj = I[s:s + 4096], J[s:s + 4096]
        d = np.abs(A[:, ii] - A[:, jj]).sum(axis=0)
        worst = max(worst, float(np.max(d / eps[s:s + 4096])))
    return worst


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR,
        only: str | None = None) -> pd.DataFrame:
    """Error of the baseline, the exact (w, beta) design and the strategy on every workload
    (those whose name contains ``only``, if given)."""
    rows = []
    limit = 15.0 if quick else 240.0
    name_out = NAME if only is None else f"{NAME}_only"
    chosen = [w for w in workloads(quick, seed) if only is None or only in w[0]]
    for name, U, M, W in C.progress(chosen, "workloads"):
        N, m = U.N, W.m  # noqa: N806
        base = m * 2 * (W.sensitivity() / M.eps_min(U)) ** 2
        rows.append({"workload": name, "N": N, "m": m, "method": BASE, "error": base})
        t0 = time.perf_counter()
        wb = dp.design(W, U, M, method="exact")
        t_wb = time.perf_counter() - t0
        fin = np.isfinite(wb.beta)
        rows.append({"workload": name, "N": N, "m": m, "method": WB, "seconds": t_wb,
                     "error": float(np.sum(2 / wb.beta[fin] ** 2)),
                     "max_ratio": float(wb.report.get("max_ratio", np.nan))})
        t0 = time.perf_counter()
        d = dp.design_strategy(W, U, M, baseline=wb if N <= 2048 else None, time_limit=limit,
                               rounds=3 if quick else 20)
        t_s = time.perf_counter() - t0
        if "identity" in d.report["starts"] and d.basis.kind == "tree":
            rows.append({"workload": name, "N": N, "m": m, "method": PREFIX,
                         "error": d.report["starts"]["identity"]})
        A = d.strategy
        rows.append({"workload": name, "N": N, "m": m, "method": STRAT, "seconds": t_s,
                     "error": d.expected_squared_error(),
                     "max_ratio": independent_ratio(A, U, M, seed),
                     "lower_bound": d.lower_bound if d.lower_bound is not None else np.nan})
        C.write_csv(pd.DataFrame(rows, columns=COLUMNS), outdir, name_out)  # partial results so far
    df = pd.DataFrame(rows, columns=COLUMNS)
    C.write_csv(df, outdir, name_out)
    if only is not None:
        write_markdown(df, None, None, outdir, quick, name_out)
        return df
    vs_n = error_vs_n(quick)
    C.write_csv(vs_n, outdir, f"{NAME}_vs_n")
    seeds = points_seeds(quick)
    C.write_csv(seeds, outdir, f"{NAME}_points_seeds")
    plot(vs_n, outdir)
    write_markdown(df, vs_n, seeds, outdir, quick)
    return df


def points_seeds(quick: bool, seeds: tuple[int, ...] = (1, 2, 3, 4, 5)) -> pd.DataFrame:
    """The random-points workload on independent instances: (w, beta) and strategy errors, their
    ratio, the lower bound and the strategy's seconds per seed."""
    npts = 40 if quick else 150
    rows = []
    for s in seeds:
        rng = np.random.default_rng(s)
        U = dp.Universe.from_points(rng.uniform(0, 10, (npts, 2)))
        W = dp.Workload(rng.random((10, npts)))
        M = metrics.Euclidean(0.1)
        wb = dp.design(W, U, M, method="exact")
        t0 = time.perf_counter()
        d = dp.design_strategy(W, U, M, baseline=wb, time_limit=15.0 if quick else 240.0,
                               rounds=3 if quick else 20)
        t_s = time.perf_counter() - t0
        err_wb = float(np.sum(2 / wb.beta[np.isfinite(wb.beta)] ** 2))
        err = d.expected_squared_error()
        rows.append({"seed": s, WB: err_wb, STRAT: err, "ratio": err_wb / err,
                     "lower_bound": d.lower_bound, "seconds": t_s,
                     "max_ratio": independent_ratio(d.strategy, U, M, s)})
    return pd.DataFrame(rows)


def error_vs_n(quick: bool) -> pd.DataFrame:
    """Total error against N on a line (eps_ij = 0.1 |i - j|) with all range queries."""
    rows = []
    for N in ((8, 16, 24) if quick else (16, 32, 64, 128)):  # noqa: N806
        U = dp.Universe.from_points(np.arange(N, dtype=float)[:, None])
        M = metrics.Euclidean(0.1)
        W = _ranges(N, None, np.random.default_rng(0))
        wb = dp.design(W, U, M, method="exact")
        d = dp.design_strategy(W, U, M, baseline=wb, time_limit=15.0 if quick else 60.0)
        rows += [{"N": N, "method": BASE, "error": W.m * 2 * (W.sensitivity() / M.eps_min(U)) ** 2},
                 {"N": N, "method": WB, "error": float(np.sum(2 / wb.beta ** 2))},
                 {"N": N, "method": STRAT, "error": d.expected_squared_error()}]
    return pd.DataFrame(rows)


def plot(vs_n: pd.DataFrame, outdir: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, g in vs_n.groupby("method", sort=False):
        ax.loglog(g["N"], g["error"], marker="o", label=method)
    ax.set_xlabel("N (points on a line, all range queries)")
    ax.set_ylabel("total expected squared error (log)")
    ax.set_title("eps_ij = 0.1 |i - j|: rescaling vs strategy")
    ax.legend()
    C.save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    t = df.pivot_table(index=["workload", "N", "m"], columns="method", values="error",
                       sort=False).reset_index()
    t["(w,beta) / strategy"] = t[WB] / t[STRAT]
    return t


def _g(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.4g}"


def _load() -> str:
    """The 1-minute load average (the timings depend on what else ran), or 'unknown'."""
    try:
        import os

        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "unknown"


def write_markdown(df: pd.DataFrame, vs_n: pd.DataFrame | None, seeds: pd.DataFrame | None,
                   outdir: Path, quick: bool, name: str = NAME) -> None:
    s = summarize(df)
    sec = df[df["method"] == STRAT].set_index("workload")
    lines = [f"# Strategy mechanisms vs (w, beta) rescaling{' (--quick)' if quick else ''}", "",
             "Total expected squared error over the workload, one run of "
             "`python -m experiments.strategy_vs_scaling`"
             f"{' --quick' if quick else ''} on the 2-core development machine; 1-minute load "
             f"average when the table was written: {_load()}.", "",
             "| workload | N | m | eps_min-DP | exact (w, beta) | prefix sums | strategy | "
             "(w,beta)/strategy | lower bound | strategy s | max ratio (independent) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in s.iterrows():
        st = sec.loc[r["workload"]]
        lines.append(f"| {r['workload']} | {r['N']} | {r['m']} | {_g(r[BASE])} | {_g(r[WB])} | "
                     f"{_g(r.get(PREFIX, np.nan))} | {_g(r[STRAT])} | "
                     f"{r['(w,beta) / strategy']:.3g} | {_g(st['lower_bound'])} | "
                     f"{st['seconds']:.1f} | {st['max_ratio']:.12g} |")
    if vs_n is not None:
        lines += ["", "Error against N (line, all ranges):", "", "| N | method | error |",
                  "|---|---|---|"]
        lines += [f"| {r['N']} | {r['method']} | {r['error']:.4g} |" for _, r in vs_n.iterrows()]
    if seeds is not None:
        npts = 40 if quick else 150
        lines += ["", f"{npts} random points, 10 dense queries, on independent instances (seed s: "
                  f"points uniform in the 10 x 10 square, then the queries, from "
                  f"numpy.random.default_rng(s)); the lower bound holds for every strategy:", "",
                  "| seed | exact (w, beta) | strategy | (w,beta)/strategy | lower bound | "
                  "strategy/bound | strategy s | max ratio (independent) |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['seed']} | {_g(r[WB])} | {_g(r[STRAT])} | {r['ratio']:.3g} | "
                  f"{_g(r['lower_bound'])} | {r[STRAT] / r['lower_bound']:.3g} | "
                  f"{r['seconds']:.1f} | {r['max_ratio']:.12g} |" for _, r in seeds.iterrows()]
    Path(outdir).mkdir(parents=True, exist_ok=True)
    (Path(outdir) / f"{name}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--only", default=None, help="run only the workloads whose name contains this")
    known, rest = pre.parse_known_args(argv)

    def run_only(quick: bool, seed: int, outdir: Path) -> pd.DataFrame:
        return run(quick=quick, seed=seed, outdir=outdir, only=known.only)

    return C.main(NAME, __doc__, run_only, summarize, rest)


if __name__ == "__main__":
    main(sys.argv[1:])
