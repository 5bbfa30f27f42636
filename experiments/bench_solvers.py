"""Benchmark of the design solvers: time, objective, gap to exact, peak memory.

Universes: N random points in the unit square with the Euclidean metric eps_ij = ||p_i - p_j||
(dense budget matrix up to N = 5000, a block oracle beyond), and the attribute-weighted metric on
binary attributes {0,1}^d (d = round(log2 N), so N' = 2^d) given by its Hamming-graph edges (paper
Appendix C; docs/theory.md, "Graph metrics need only their edges"). Queries: i.i.d. uniform [0, 1]
coefficients. Every (metric, N, m) cell runs in its own subprocess; ``peak_rss_mb`` is that
process's ru_maxrss after the method ran (cumulative over the methods run before it in the cell, an
honest upper bound on the method's own peak).

Privacy condition of every design measured: sum_k u_k |F_ki - F_kj| <= eps_ij on all pairs
(``max_ratio`` column, from the full verification scan).

With n records (n = N_RECORDS = 1000, squared loss, N <= 2000, m <= 10): ``exact_n`` is the joint
(w, u) optimum (solvers.joint), ``shrink_n`` the w = 1 exact optimum followed by the optimal
shrinkage w (its time includes the exact solve), ``bcd_n`` block coordinate descent; their
``gap_to_exact`` is relative to ``exact_n``.

Run:  python experiments/bench_solvers.py [--quick] [--seed 0] [--sizes 200,741,2000,5000,20000]
      [--ms 1,10,50] [--metrics euclid,attribute] [--merge]
``--merge`` re-runs only the selected cells and replaces their rows in the existing CSV.
Writes experiments/results/bench_solvers.csv and .png and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ["closed_form", "exact", "naive", "equal_split", "uniform", "budget_sharing",
         "exact_n", "shrink_n", "bcd_n"]
N_RECORDS = 1000.0  # n of the with-n methods


# ---------------------------------------------------------------------------------- instances
def euclid(N: int, m: int, rng: np.random.Generator):  # noqa: ANN201
    from scipy.spatial.distance import cdist

    from solvers import ConstraintSet

    P = rng.random((N, 2))
    F = rng.random((m, N))
    if N <= 5000:
        eps = cdist(P, P)
        return F, ConstraintSet.dense(eps), eps

    def block(rows: np.ndarray) -> np.ndarray:
        return cdist(P[rows], P)

    return F, ConstraintSet.oracle(N, block), None


def attribute(N: int, m: int, rng: np.random.Generator):  # noqa: ANN201
    """{0,1}^d with d(x, x') = sum_k eps_k 1[x_k != x'_k]; edges = pairs differing in one bit."""
    from solvers import ConstraintSet

    d = max(1, round(math.log2(N)))
    n_el = 2**d
    w = rng.uniform(0.5, 2.0, d)
    idx = np.arange(n_el)
    ei, ej, ee = [], [], []
    for k in range(d):
        lo = idx[(idx >> k) & 1 == 0]
        ei.append(lo)
        ej.append(lo | (1 << k))
        ee.append(np.full(lo.size, w[k]))
    F = rng.random((m, n_el))
    cs = ConstraintSet.edges(np.concatenate(ei), np.concatenate(ej), np.concatenate(ee), n_el)
    eps = None
    if n_el <= 1024:  # dense all-pairs matrix for the naive formulation
        bits = ((idx[:, None] >> np.arange(d)[None, :]) & 1).astype(float)
        eps = np.abs(bits[:, None, :] - bits[None, :, :]) @ w
    return F, cs, eps


def skip_reason(metric: str, N: int, m: int, method: str) -> str | None:
    """Combinations that are pointless or do not fit the 15-minute budget (stated in the table)."""
    if method == "closed_form" and m != 1:
        return "m > 1"
    if method != "closed_form" and m == 1 and N > 5000:
        return "m = 1: closed form is optimal"
    if method == "naive" and (N > 741 or m > 10):
        return "N^2 m too large for one cvxpy problem"
    if method.endswith("_n") and (N > 2000 or m > 10):
        return "bcd: several exact solves per cycle; small cells only"
    if metric == "euclid" and N > 5000 and m > 1:
        return "N^2 m / 2 = %.0e pair-queries per scan: over the time budget" % (N * N * m / 2)
    if metric == "euclid" and N >= 5000 and m >= 50 and method in ("budget_sharing", "exact"):
        return "N = 5000, m = 50: over the time budget"
    return None


# ---------------------------------------------------------------------------------- one cell
def run_cell(metric: str, N: int, m: int, seed: int) -> list[dict]:
    from solvers import design, shrinkage
    from solvers.naive import naive_exact
    from solvers.verify import objective

    warnings.simplefilter("ignore")
    rng = np.random.default_rng([seed, N, m, metric == "euclid"])
    F, cs, eps = (euclid if metric == "euclid" else attribute)(N, m, rng)
    n_el = F.shape[1]
    rows = []
    for method in ORDER:
        row = {"metric": metric, "N": n_el, "m": m, "method": method}
        reason = skip_reason(metric, N, m, method)
        if method == "naive" and reason is None and eps is None:
            reason = "no dense matrix"
        if reason:
            rows.append({**row, "skipped": reason})
            continue
        t0 = time.perf_counter()
        if method == "naive":
            u, status, raw = naive_exact(F, eps, "squared")
            secs = time.perf_counter() - t0
            obj = objective("squared", np.ones(m), u, F)
            row.update(seconds=secs, objective=obj, status=status, raw_max_ratio=raw,
                       max_ratio=cs.scan(F, u).max_ratio,
                       n_used=int(np.isfinite(eps[np.triu_indices(n_el, 1)]).sum()))
        elif method == "shrink_n":  # the pre-joint behaviour: w = 1 optimum, then w*(u)
            r = design(F, cs, method="exact", loss="squared")
            w, _ = shrinkage(r.u, F, N_RECORDS, "squared")
            obj = objective("squared", w, r.u / w, F, N_RECORDS)
            rep = r.report
            row.update(seconds=time.perf_counter() - t0, objective=obj, status=rep["status"],
                       max_ratio=rep["max_ratio"], n_used=rep["n_constraints_used"],
                       iterations=rep["iterations"], scaled_back=rep["scaled_back"])
        else:
            n = N_RECORDS if method.endswith("_n") else None
            r = design(F, cs, method=method.removesuffix("_n"), loss="squared", n=n)
            rep = r.report
            row.update(seconds=time.perf_counter() - t0, objective=r.objective,
                       status=rep["status"], max_ratio=rep["max_ratio"],
                       n_used=rep["n_constraints_used"], iterations=rep["iterations"],
                       scaled_back=rep["scaled_back"])
            if method == "exact_n":
                row.update(global_optimum=rep["global_optimum"],
                           convex_region=rep["convex_region"], lower_bound=rep["lower_bound"])
        row["n_constraints"] = cs.n_constraints
        row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- driver
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N in {200, 741}, m in {1, 10}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", type=str, default=None, help="comma list of N")
    ap.add_argument("--ms", type=str, default=None, help="comma list of m")
    ap.add_argument("--metrics", type=str, default="euclid,attribute")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--merge", action="store_true",
                    help="replace only the re-run cells' rows in the existing CSV")
    ap.add_argument("--cell", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        metric, N, m = args.cell.split(",")
        print(json.dumps(run_cell(metric, int(N), int(m), args.seed)))
        return 0
    sizes = [200, 741] if args.quick else [200, 741, 2000, 5000, 20000]
    ms = [1, 10] if args.quick else [1, 10, 50]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    if args.ms:
        ms = [int(s) for s in args.ms.split(",")]
    rows: list[dict] = []
    t_all = time.perf_counter()
    from tqdm import tqdm

    cells = [(mt, N, m) for mt in args.metrics.split(",") for N in sizes for m in ms]
    for metric, N, m in tqdm(cells, desc="cells"):
        proc = subprocess.run([sys.executable, __file__, "--cell", f"{metric},{N},{m}",
                               "--seed", str(args.seed)], capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append({"metric": metric, "N": N, "m": m, "method": "*",
                         "skipped": "cell failed: " + proc.stderr.strip().splitlines()[-1]})
            continue
        rows.extend(json.loads(proc.stdout.strip().splitlines()[-1]))
    total = time.perf_counter() - t_all
    import pandas as pd

    df = pd.DataFrame(rows)
    csv = args.out / "bench_solvers.csv"
    if args.merge and csv.exists():
        old = pd.read_csv(csv).drop(columns=["gap_to_exact", "naive_over_exact_time"],
                                    errors="ignore")
        keys = set(zip(df.metric, df.N, df.m, strict=True))
        keep = [k not in keys for k in zip(old.metric, old.N, old.m, strict=True)]
        df = pd.concat([old[keep], df], ignore_index=True)
        order = {(mt, N, m): i for i, (mt, N, m) in enumerate(
            sorted(set(zip(df.metric, df.N, df.m, strict=True)),
                   key=lambda k: (k[0] != "euclid", k[1], k[2])))}
        df["_o"] = [order[k] for k in zip(df.metric, df.N, df.m, strict=True)]
        df = df.sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)
    df = add_gaps(df)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "bench_solvers.csv", index=False)
    print_table(df)
    plot(df, args.out / "bench_solvers.png")
    with_n = df[df.method.isin(["exact_n", "shrink_n", "bcd_n"]) & df.seconds.notna()]
    if len(with_n):
        print(f"\nwith n = {N_RECORDS:g} records (squared loss):")
        cols = [c for c in ["metric", "N", "m", "method", "seconds", "objective", "gap_to_exact",
                            "global_optimum", "convex_region", "lower_bound"] if c in df]
        print(with_n[cols].to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    print(f"\ntotal wall time {total:.1f} s; wrote {args.out / 'bench_solvers.csv'} and .png")
    return 0


def add_gaps(df):  # noqa: ANN001, ANN201
    """gap_to_exact = objective / exact objective - 1 (bcd_n, shrink_n against exact_n: with n);
    naive_over_exact_time = naive seconds / exact seconds in the same cell."""
    import pandas as pd

    keys = ["metric", "N", "m"]
    if "objective" not in df:
        return df
    for meth, col in (("exact", "exact_obj"), ("exact_n", "exact_n_obj"), ("exact", "exact_s"),
                      ("naive", "naive_s")):
        src = "seconds" if col.endswith("_s") else "objective"
        base = df[df.method == meth][keys + [src]].rename(columns={src: col})
        df = pd.merge(df, base, on=keys, how="left")
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.where(df.method.isin(["bcd_n", "shrink_n"]), df.objective / df.exact_n_obj - 1,
                       df.objective / df.exact_obj - 1)
    df["gap_to_exact"] = np.where(df.method == "exact_n", np.nan, gap)
    df["naive_over_exact_time"] = np.where(df.method == "naive", df.naive_s / df.exact_s, np.nan)
    return df.drop(columns=["exact_obj", "exact_n_obj", "exact_s", "naive_s"])


def print_table(df) -> None:  # noqa: ANN001
    cols = ["metric", "N", "m", "method", "seconds", "objective", "gap_to_exact",
            "naive_over_exact_time", "max_ratio",
            "n_used", "n_constraints", "peak_rss_mb", "status", "skipped"]
    cols = [c for c in cols if c in df.columns]
    with __import__("pandas").option_context("display.width", 250, "display.max_rows", 500,
                                              "display.max_colwidth", 60):
        print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def plot(df, path: Path) -> None:  # noqa: ANN001
    """Seconds against N per (metric, m) panel; one colour per method in every panel and one
    legend for the figure (outside the panels); x ticks at the benchmarked sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    done = df[df.get("seconds").notna()] if "seconds" in df else df.iloc[:0]
    metrics = sorted(done.metric.unique())
    ms = sorted(done.m.unique())
    methods = sorted(done.method.unique())
    cmap = plt.get_cmap("tab10")
    style = {meth: (cmap(k % 10), "os^Dv<>ph*"[k % 10]) for k, meth in enumerate(methods)}
    fig, axes = plt.subplots(len(metrics), len(ms), figsize=(4.2 * len(ms), 3.3 * len(metrics) + 0.8),
                             squeeze=False, layout="constrained")
    for a, metric in enumerate(metrics):
        for b, m in enumerate(ms):
            ax = axes[a][b]
            sub = done[(done.metric == metric) & (done.m == m)]
            for method, g in sub.groupby("method"):
                color, marker = style[method]
                ax.loglog(g.N, g.seconds, "-", marker=marker, color=color, label=method)
            sizes = sorted(sub.N.unique())
            ax.xaxis.set_major_locator(FixedLocator(sizes))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
            ax.set_title(f"{metric}, m = {m}", fontsize=10)
            ax.set_xlabel("N (universe size)")
            ax.set_ylabel("seconds")
            ax.grid(True, which="major", alpha=0.3)
    handles = [plt.Line2D([], [], color=style[k][0], marker=style[k][1], label=k) for k in methods]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(methods), 9),
               fontsize=8, frameon=False)
    try:  # one resolution for every figure of the experiments
        from experiments._common import DPI
    except ImportError:  # run as a script: experiments/ is sys.path[0]
        from _common import DPI  # type: ignore[no-redef]
    fig.savefig(path, dpi=DPI)
    plt.close(fig)

if __name__ == "__main__":
    raise SystemExit(main())
