"""Optimal Gaussian strategies against the Laplace strategies, at equal (eps_ij, delta) per pair.

For every workload of ``experiments/strategy_vs_scaling.py`` and ``experiments/strategy_implicit.py``
(plus all ranges of a line of 8192 points) the script designs the optimal Gaussian strategy
(:func:`solvers.strategy.gaussian.solve_gaussian`: release ``A x + N(0, I)``, answer by least
squares) under the per-pair budgets that make the release (eps_ij, delta)-DP for every move
i -> j by the analytic Gaussian mechanism (Balle and Wang 2018): b_ij = Delta_ij^2 with Delta_ij
the largest sensitivity for which ``Phi(D/2 - eps/D) - e^eps Phi(-D/2 - eps/D) <= delta`` at
sigma = 1, eps_ij the metric's budget and delta = 1e-6.  It reports the Gaussian strategy's total
expected squared error, the dual lower bound and the certified gap, the design time and
iterations, the Laplace strategy's error at eps_ij (pure eps_ij-d_X privacy, a stronger
guarantee), and the largest per-pair delta of the Gaussian strategy recomputed from its columns
(every pair; it must be <= 1e-6).

The Laplace errors are those measured by ``experiments.strategy_vs_scaling`` and
``experiments.strategy_implicit`` (read from experiments/results/strategy.csv and
strategy_implicit.csv, same workloads and seeds); ``--quick`` designs small versions of both
here instead.

Run:  python -m experiments.gaussian_vs_laplace [--quick] [--only SUBSTRING [--update]]
Output: gaussian_vs_laplace.csv and gaussian_vs_laplace.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import log_ndtr, ndtr

import dprivacy as dp
from experiments import _common as C
from experiments import strategy_implicit, strategy_vs_scaling
from solvers.strategy.gaussian import GaussianSolution, pair_budgets, solve_gaussian
from solvers.strategy.gaussian_active import solve_gaussian_active, workload_factor
from solvers.strategy.gaussian_line import interval_sums, line_ranges_strategy
from solvers.strategy.objective import gram
from solvers.strategy.optimize import blas_threads

NAME = "gaussian_vs_laplace"
DELTA = 1e-6
COLUMNS = ["workload", "N", "m", "laplace_error", "gaussian_error", "dual_bound",
           "certified_gap", "iterations", "seconds", "laplace/gaussian", "max_delta", "method",
           "load"]
#: Beyond this many elements only structured cases are designed (one dense eigendecomposition
#: of N x N per step is minutes there on this machine).
DENSE_MAX = 2048


def _even_line_ranges(U: dp.Universe, W: object) -> bool:
    """All ranges of evenly spaced points on a line (the closed-form case)."""
    if not isinstance(W, dp.ImplicitWorkload) or W.kind != "ranges" or U.coords is None:
        return False
    x = np.asarray(U.coords, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 1 or U.N < 3:
        return False
    step = np.diff(x[:, 0])
    return bool(np.all(step > 0) and np.allclose(step, step[0], rtol=1e-12))


def _line(U: dp.Universe, M: dp.metrics.Metric, seed: int) -> tuple[GaussianSolution, float]:
    """The closed-form optimum (solvers.strategy.gaussian_line) under per-length budgets, and
    the largest per-pair delta: exact for every length from the interval sums, and recomputed
    from the strategy's columns on the edges and 20 000 random pairs."""
    N = U.N  # noqa: N806
    eps_len = np.asarray(M.block(U, np.array([0])), dtype=np.float64).ravel()  # eps(0, l)
    b = np.r_[np.inf, max_sensitivity(eps_len[1:]) ** 2 * (1 - 1e-12)]
    sol = line_ranges_strategy(N, b)
    c = sol.error / ((N - 2) * np.sqrt(N + 1.0) + np.sqrt(2.0))  # the scale of the strategy
    worst = float(analytic_delta(eps_len[1:], np.sqrt(interval_sums(N)[1:] / c)).max())
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, N, 20_000), rng.integers(0, N, 20_000)
    i, j = np.r_[i, np.arange(N - 1)], np.r_[j, np.arange(1, N)]
    keep = i != j
    i, j = i[keep], j[keep]
    sens = np.concatenate([np.linalg.norm(sol.A[:, i[s:s + 512]] - sol.A[:, j[s:s + 512]], axis=0)
                           for s in range(0, i.size, 512)])
    worst = max(worst, float(analytic_delta(eps_len[np.abs(i - j)], sens).max()))
    return sol, worst


def analytic_delta(eps: np.ndarray, sens: np.ndarray) -> np.ndarray:
    """delta of the Gaussian mechanism with sigma = 1 and l2 sensitivity ``sens`` at eps (exact
    analytic-Gaussian curve; 0 where sens = 0)."""
    eps = np.asarray(eps, dtype=np.float64)
    s = np.maximum(np.asarray(sens, dtype=np.float64), 1e-300)
    a = s / 2 - eps / s
    b = -s / 2 - eps / s
    d = ndtr(a) - np.exp(eps + log_ndtr(b))
    return np.where(np.asarray(sens) > 0, np.maximum(d, 0.0), 0.0)


def max_sensitivity(eps: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """The largest l2 sensitivity Delta with analytic_delta(eps, Delta) <= delta (bisection,
    vectorised over the distinct eps)."""
    u, inv = np.unique(np.asarray(eps, dtype=np.float64).ravel(), return_inverse=True)
    lo, hi = np.zeros_like(u), np.ones_like(u)
    for _ in range(200):
        bad = analytic_delta(u, hi) <= delta
        if not bad.any():
            break
        lo = np.where(bad, hi, lo)
        hi = np.where(bad, 2 * hi, hi)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        ok = analytic_delta(u, mid) <= delta
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo[inv].reshape(np.shape(eps))


def per_pair_budgets(eps: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """b_ij = Delta_ij^2 (module doc); eps: the (N, N) metric budgets, inf on the diagonal."""
    B = np.full(eps.shape, np.inf)
    fin = np.isfinite(eps)
    B[fin] = max_sensitivity(eps[fin], delta) ** 2 * (1 - 1e-12)
    return B


def max_pair_delta(A: np.ndarray, eps: np.ndarray) -> float:
    """Largest delta over every pair of the Gaussian strategy A at eps_ij, from the columns."""
    N = A.shape[1]  # noqa: N806
    worst = 0.0
    step = max(1, 2**23 // max(N * A.shape[0], 1))
    for r0 in range(0, N, step):
        r1 = min(N, r0 + step)
        diff = A[:, r0:r1, None] - A[:, None, :]
        sens = np.sqrt(np.einsum("pij,pij->ij", diff, diff))
        e = eps[r0:r1]
        fin = np.isfinite(e)
        worst = max(worst, float(analytic_delta(e[fin], sens[fin]).max(initial=0.0)))
    return worst


def _grid_coarse_to_fine(U: dp.Universe, M: dp.metrics.Metric, W: dp.ImplicitWorkload,
                         tol: float, time_limit: float) -> tuple[GaussianSolution, float]:
    """All rectangles of a g x g grid above the dense size: solve the (g/2) x (g/2) grid, average
    its dual weights by displacement, and start the dense ascent at g x g from them (each step
    is one N x N eigendecomposition, so only a few fit in the time limit; the gap is what it
    certifies then)."""
    nx, ny = W.shape_
    h = dp.ImplicitWorkload.all_rectangles(nx // 2, ny // 2)
    Uh = dp.Universe.from_points(np.array([[a, b] for a in range(nx // 2)
                                           for b in range(ny // 2)], float))
    coarse = solve_gaussian(h.gram(), per_pair_budgets(pair_budgets(M.constraint_set(Uh), 0.5)),
                            tol=tol, time_limit=time_limit / 3)
    xy = np.asarray(Uh.coords, dtype=int)
    dx = xy[:, None, 0] - xy[None, :, 0] + nx // 2
    dy = xy[:, None, 1] - xy[None, :, 1] + ny // 2
    table = np.zeros((nx, ny))
    count = np.zeros((nx, ny))
    np.add.at(table, (dx, dy), coarse.weights)
    np.add.at(count, (dx, dy), 1.0)
    table = np.where(count > 0, table / np.maximum(count, 1.0), 0.0)
    fx = np.asarray(U.coords, dtype=int)
    ddx = np.clip(fx[:, None, 0] - fx[None, :, 0] + nx // 2, 0, nx - 1)
    ddy = np.clip(fx[:, None, 1] - fx[None, :, 1] + ny // 2, 0, ny - 1)
    mu0 = table[ddx, ddy]
    eps = pair_budgets(M.constraint_set(U), 0.5)
    with blas_threads(int(os.environ.get("GVL_THREADS", "1"))):
        sol = solve_gaussian(W.gram(), per_pair_budgets(eps), tol=tol, mu0=mu0,
                             time_limit=time_limit * 2 / 3)
    return sol, max_pair_delta_gram(sol.A, eps)


def max_pair_delta_gram(A: np.ndarray, eps: np.ndarray) -> float:
    """As :func:`max_pair_delta`, with the squared sensitivities from the Gram matrix A'A (large
    N: one matrix product instead of N^2 column differences)."""
    X = A.T @ A
    d = np.diag(X)
    sens = np.sqrt(np.maximum(d[:, None] + d[None, :] - 2.0 * X, 0.0))
    fin = np.isfinite(eps)
    return float(analytic_delta(eps[fin], sens[fin]).max(initial=0.0))


def cases(quick: bool, seed: int) -> list[tuple[str, dp.Universe, dp.metrics.Metric, object]]:
    """The workloads of both strategy benchmarks (small with ``quick``), plus the 8192-point line."""
    out: list[tuple[str, dp.Universe, dp.metrics.Metric, object]] = [
        (n, U, M, W) for n, U, M, W in strategy_vs_scaling.workloads(quick, seed)]
    e01 = dp.metrics.Euclidean(0.1)
    out += [(n, U, e01, W) for n, W, U, _ in strategy_implicit.cases(quick)]
    if not quick:
        U = dp.Universe.from_points(np.arange(8192, dtype=float)[:, None])
        out.append(("line 8192, all ranges", U, e01, dp.ImplicitWorkload.all_ranges(8192)))
    return out


def _gram(W: object) -> np.ndarray:
    if isinstance(W, dp.ImplicitWorkload):
        return W.gram()
    return gram(W.F, False)  # type: ignore[attr-defined]


def _laplace_results() -> dict[str, float]:
    """Laplace strategy errors measured by the two strategy benchmarks, by workload name."""
    out: dict[str, float] = {}
    p = C.RESULTS_DIR / "strategy.csv"
    if p.exists():
        df = pd.read_csv(p)
        for _, r in df[df["method"] == "strategy"].iterrows():
            out[r["workload"]] = float(r["error"])
    p = C.RESULTS_DIR / "strategy_implicit.csv"
    if p.exists():
        for _, r in pd.read_csv(p).iterrows():
            out[r["workload"]] = float(r["strategy_error"])
    return out


def _laplace_here(U: dp.Universe, M: dp.metrics.Metric, W: object) -> float:
    d = dp.design_strategy(W, U, M, time_limit=10.0, rounds=1)
    return float(d.expected_squared_error())


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR,
        only: str | None = None, tol: float = 1e-3, time_limit: float = 600.0,
        update: bool = False) -> pd.DataFrame:
    """One row per workload (those whose name contains ``only``); ``update`` replaces those
    rows in the existing gaussian_vs_laplace.csv (and rewrites its table) instead."""
    rows = []
    known = {} if quick else _laplace_results()
    name_out = NAME if only is None or update else f"{NAME}_only"
    old = pd.read_csv(Path(outdir) / f"{NAME}.csv") if update else None
    chosen = [c for c in cases(quick, seed) if only is None or only in c[0]]
    for name, U, M, W in C.progress(chosen, "workloads"):
        N = U.N  # noqa: N806
        t0 = time.perf_counter()
        if _even_line_ranges(U, W) and N > DENSE_MAX:
            sol, worst = _line(U, M, seed)
            how = "closed form (edge dual)"
        elif N > DENSE_MAX and isinstance(W, dp.Workload) and W.m <= DENSE_MAX:
            eps = pair_budgets(M.constraint_set(U), 0.5)
            B = per_pair_budgets(eps)
            with blas_threads(int(os.environ.get("GVL_THREADS", "1"))):
                sol = solve_gaussian_active(workload_factor(W.F), B, tol=tol,
                                            time_limit=time_limit)
            worst = max_pair_delta_gram(sol.A, eps)
            how = "active set (low rank)"
        elif N > DENSE_MAX and isinstance(W, dp.ImplicitWorkload) and W.kind == "rectangles":
            sol, worst = _grid_coarse_to_fine(U, M, W, tol, time_limit)
            how = "dense, warm start from the half grid"
        elif N > DENSE_MAX:
            rows.append({"workload": name, "N": N, "m": W.m,  # type: ignore[attr-defined]
                         "laplace_error": known.get(name, np.nan), "method": "not run: N "
                         f"above {DENSE_MAX} without a structured solver"})
            continue
        else:
            eps = pair_budgets(M.constraint_set(U), 0.5)  # every pair's eps_ij
            B = per_pair_budgets(eps)
            with blas_threads(int(os.environ.get("GVL_THREADS", "1"))):
                sol = solve_gaussian(_gram(W), B, tol=tol, time_limit=time_limit)
            worst = max_pair_delta(sol.A, eps)
            how = "dual ascent"
        secs = time.perf_counter() - t0
        lap = _laplace_here(U, M, W) if quick else known.get(name, np.nan)
        rows.append({"workload": name, "N": N, "m": W.m,  # type: ignore[attr-defined]
                     "laplace_error": lap, "gaussian_error": sol.error, "dual_bound": sol.bound,
                     "certified_gap": sol.gap, "iterations": sol.iterations, "seconds": secs,
                     "laplace/gaussian": lap / sol.error, "max_delta": worst, "method": how,
                     "load": os.getloadavg()[0]})
        C.write_csv(_merged(old, rows), outdir, name_out)
    df = _merged(old, rows)
    C.write_csv(df, outdir, name_out)
    write_markdown(df, outdir, quick, name_out)
    return df


def _merged(old: pd.DataFrame | None, rows: list[dict]) -> pd.DataFrame:
    new = pd.DataFrame(rows, columns=COLUMNS)
    if old is None:
        return new
    out = old.reindex(columns=COLUMNS)
    for _, r in new.iterrows():
        hit = out["workload"] == r["workload"]
        if hit.any():
            out.loc[hit, COLUMNS] = r[COLUMNS].to_numpy()
        else:
            out = pd.concat([out, new[new["workload"] == r["workload"]]], ignore_index=True)
    return out


def write_markdown(df: pd.DataFrame, outdir: Path, quick: bool, name: str = NAME) -> None:
    def g(v: float) -> str:
        return "n/a" if not np.isfinite(v) else f"{v:.4g}"
    load = os.getloadavg()
    lines = [
        "# Optimal Gaussian strategies against the Laplace strategies",
        "",
        f"`python -m experiments.gaussian_vs_laplace{' --quick' if quick else ''}` on "
        f"the 2-core machine (load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the "
        "end of the last run, shared), one BLAS thread.  Gaussian: unit-variance rows, every pair (eps_ij, "
        f"delta = {DELTA:g})-DP by the analytic Gaussian; Laplace: the strategy of "
        "`design_strategy` at eps_ij (pure).  Errors are total expected squared errors; "
        "`gap` = (Gaussian error - dual bound) / Gaussian error, certified; `max delta` is "
        "recomputed from the strategy's columns over every pair.",
        "`load`: the 1-minute load average at the end of the run (or row) that produced the row "
        "(rows may come from later `--only NAME --update` runs).",
        "",
        "| workload | N | m | Laplace error | Gaussian error | dual bound | certified gap | "
        "iterations | seconds | Laplace / Gaussian | max delta | method | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        if not np.isfinite(r["gaussian_error"]):
            lines.append(f"| {r['workload']} | {r['N']} | {r['m']} | {g(r['laplace_error'])} | "
                         f"| | | | | | | {r['method']} | |")
            continue
        lines.append(f"| {r['workload']} | {r['N']} | {r['m']} | {g(r['laplace_error'])} | "
                     f"{g(r['gaussian_error'])} | {g(r['dual_bound'])} | "
                     f"{100 * r['certified_gap']:.3f} % | {r['iterations']} | "
                     f"{r['seconds']:.1f} | {g(r['laplace/gaussian'])} | {r['max_delta']:.9g} | "
                     f"{r['method']} | {g(r.get('load', np.nan))} |")
    Path(outdir).mkdir(parents=True, exist_ok=True)
    (Path(outdir) / f"{name}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None)
    ap.add_argument("--outdir", type=Path, default=None)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--update", action="store_true",
                    help="replace the --only rows in the existing table")
    args = ap.parse_args(argv)
    outdir = args.outdir or C.default_outdir(args.quick)
    t0 = time.perf_counter()
    df = run(args.quick, args.seed, outdir, args.only, args.tol, args.time_limit, args.update)
    print(C.format_table(df))
    print(f"[{NAME}] {time.perf_counter() - t0:.1f} s; wrote {outdir / (NAME + '.csv')}")
    return df


if __name__ == "__main__":
    main(sys.argv[1:])
