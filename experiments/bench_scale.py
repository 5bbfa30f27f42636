"""Designer at scale: exact designs for N up to 10^6 elements, and the full-scan kernel.

Cells (each in its own subprocess; ``peak_rss_mib`` is that process's peak resident memory):

* ``design``: ``dp.design`` on N random points (unit square, Euclidean; or uniform on the sphere,
  geodesic km), m = 1 (closed form) or m = 10 (exact, squared loss), i.i.d. U[0, 1] queries.
  Scans are exact branch and bound through the metric's geometric index. For N <= 2e4 the
  design's maximum ratio is recomputed by a FULL scan over all pairs (``full_max_ratio``).
* ``versus``: N = 20 000, m = 10, exact: ``dp.design`` (pruned) against ``solvers.design`` on the
  same budgets without the index (every pass a full scan), same run: speed-up and optimum gap.
* ``kernel``: one full, unprunable scan (Euclidean budgets through a block oracle, no index,
  m = 10, top 40): the previous formulation (an (m, rows, cols) difference array per block,
  replicated here from ``ConstraintSet.blocks``) against the distance kernel, serially and on
  1 and 2 local processes; pairs per second.

Privacy condition of every design (Theorem 1): sum_k u_k |F_ki - F_kj| <= eps_ij on all pairs
(``max_ratio`` from the solver's final scan; ``full_max_ratio`` by a full scan where N <= 2e4).

Run:  python -m experiments.bench_scale [--quick] [--seed 0] [--sizes 10000,100000,1000000]
      [--ms 1,10] [--metrics euclid,geodesic] [--cells design,versus,kernel] [--outdir DIR]
Writes bench_scale.csv / .png (experiments/results/, or results/quick/ with --quick) and prints
the table and each target of the issue, met or missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


# ----------------------------------------------------------------------------------- instances
def universe(metric: str, N: int, rng: np.random.Generator):  # noqa: ANN201
    import dprivacy as dp

    if metric == "euclid":
        return dp.Universe.from_points(rng.random((N, 2))), dp.metrics.Euclidean(1.0)
    lat = np.degrees(np.arcsin(rng.uniform(-1, 1, N)))
    lon = rng.uniform(-180, 180, N)
    return dp.Universe.from_points(np.c_[lat, lon]), dp.metrics.Geodesic(0.1)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def full_ratio(U, M, F: object, u: np.ndarray) -> float:  # noqa: ANN001
    """max ratio by a full scan over all pairs (the metric's budget oracle, no index)."""
    from solvers import ConstraintSet

    cs = ConstraintSet.oracle(U.N, lambda rows: M.block(U, rows))
    return float(cs.scan(F, u).max_ratio)


# ----------------------------------------------------------------------------------- cells
def cell_design(metric: str, N: int, m: int, seed: int) -> dict:
    import dprivacy as dp

    rng = np.random.default_rng([seed, N, m, metric == "euclid"])
    U, M = universe(metric, N, rng)
    W = dp.Workload(rng.random((m, N)))
    method = "closed_form" if m == 1 else "exact"
    t0 = time.perf_counter()
    d = dp.design(W, U, M, method=method, loss="squared")
    secs = time.perf_counter() - t0
    rep = d.report
    row = {"cell": "design", "metric": metric, "N": N, "m": m, "method": method,
           "seconds": secs, "objective": d.objective, "max_ratio": rep["max_ratio"],
           "passes": rep["passes"]["passes"], "pruned_passes": rep["passes"]["pruned"],
           "full_passes": rep["passes"]["full"],
           "pairs_evaluated": rep["passes"]["pairs_evaluated"],
           "pairs_total": N * (N - 1) // 2, "verified_by": rep["verified_by"],
           "status": rep.get("status"), "peak_rss_mib": rss_mib()}
    if N <= 20_000:
        t1 = time.perf_counter()
        row["full_max_ratio"] = full_ratio(U, M, W.F, d.u)
        row["full_scan_seconds"] = time.perf_counter() - t1
    return row


def cell_versus(N: int, m: int, seed: int) -> dict:
    import dprivacy as dp
    import solvers
    from solvers import ConstraintSet

    rng = np.random.default_rng([seed, N, m, 2])
    U, M = universe("euclid", N, rng)
    W = dp.Workload(rng.random((m, N)))
    t0 = time.perf_counter()
    d = dp.design(W, U, M, method="exact")
    t_pruned = time.perf_counter() - t0
    cs_full = ConstraintSet.oracle(N, lambda rows: M.block(U, rows), pair=M.pair_budget(U),
                                   n_constraints=N * (N - 1) // 2)
    t0 = time.perf_counter()
    r = solvers.design(W.F, cs_full, method="exact")
    t_full = time.perf_counter() - t0
    t1 = time.perf_counter()
    fr = float(cs_full.scan(W.F, d.u).max_ratio)
    return {"cell": "versus", "metric": "euclid", "N": N, "m": m, "method": "exact",
            "seconds": t_pruned, "full_path_seconds": t_full, "speedup": t_full / t_pruned,
            "objective": d.objective, "full_path_objective": r.objective,
            "objective_rel_gap": abs(d.objective / r.objective - 1),
            "max_ratio": d.report["max_ratio"], "full_max_ratio": fr,
            "full_scan_seconds": time.perf_counter() - t1,
            "passes": d.report["passes"]["passes"], "full_passes": r.report["passes"]["full"],
            "pairs_evaluated": d.report["passes"]["pairs_evaluated"],
            "pairs_total": N * (N - 1) // 2, "peak_rss_mib": rss_mib()}


def legacy_scan(cs, F: np.ndarray, u: np.ndarray, k: int) -> float:  # noqa: ANN001
    """The scan as it was before this issue (per block: (m, rows, cols) |differences|, a
    tensordot, the ratio, its maximum and top k) -- the 'today' of the throughput target."""
    from solvers.scan_types import TopK, safe_ratio

    best = 0.0
    top = TopK(k)
    for b in cs.blocks(F, 2**30):
        num = np.tensordot(u, b.ad, axes=1)
        ratio = safe_ratio(num, b.eps).ravel()
        ratio[~(b.eps < np.inf).ravel()] = -1.0
        if ratio.size:
            best = max(best, float(ratio.max()))
            top.add_block(b, ratio)
    return best


def cell_kernel(N: int, m: int, seed: int) -> list[dict]:
    from scipy.spatial.distance import cdist

    from solvers import ConstraintSet
    from solvers.distributed import LocalProcesses

    rng = np.random.default_rng([seed, N, m, 3])
    P = rng.random((N, 2))
    F = rng.random((m, N))
    u = rng.random(m)
    cs = ConstraintSet.oracle(N, lambda rows: cdist(P[rows], P), n_constraints=N * (N - 1) // 2)
    pairs = N * (N - 1) / 2
    rows = []
    runs = [("legacy", None, 1), ("kernel", None, 1), ("kernel_processes", LocalProcesses(1), 1),
            ("kernel_processes", LocalProcesses(2), 2)]
    ref = None
    for name, engine, procs in runs:
        t0 = time.perf_counter()
        if name == "legacy":
            best = legacy_scan(cs, F, u, 40)
        else:
            best = float((cs if engine is None else cs.with_engine(engine)).scan(F, u, k=40).max_ratio)
        secs = time.perf_counter() - t0
        ref = best if ref is None else ref
        rows.append({"cell": "kernel", "metric": "euclid_no_index", "N": N, "m": m,
                     "method": f"{name}_{procs}p", "seconds": secs, "processes": procs,
                     "pairs_per_second": pairs / secs, "pairs_per_second_per_core": pairs / secs / procs,
                     "max_ratio": best, "max_ratio_rel_diff": abs(best / ref - 1),
                     "pairs_total": int(pairs), "peak_rss_mib": rss_mib()})
    return rows


# ----------------------------------------------------------------------------------- driver
def run_cell(spec: str, seed: int) -> list[dict]:
    kind, metric, N, m = spec.split(",")
    if kind == "design":
        return [cell_design(metric, int(N), int(m), seed)]
    if kind == "versus":
        return [cell_versus(int(N), int(m), seed)]
    return cell_kernel(int(N), int(m), seed)


def cells(args: argparse.Namespace) -> list[str]:
    sizes = [5000] if args.quick else [10_000, 100_000, 1_000_000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    ms = [int(s) for s in args.ms.split(",")]
    want = args.cells.split(",")
    out = []
    if "design" in want:
        out += [f"design,{mt},{N},{m}" for mt in args.metrics.split(",") for N in sizes for m in ms]
    if "versus" in want:
        out.append(f"versus,euclid,{4200 if args.quick else 20_000},{3 if args.quick else 10}")
    if "kernel" in want:
        out.append(f"kernel,euclid,{1000 if args.quick else 10_000},10")
    return out


def targets(df) -> list[tuple[str, str, str]]:  # noqa: ANN001
    """(target, measured, verdict) for each target of the issue that the run covers."""
    out = []
    des = df[df.cell == "design"]
    for metric in ("euclid", "geodesic"):
        r = des[(des.metric == metric) & (des.m == 1) & (des.N == 1_000_000)]
        if len(r):
            s, mem = float(r.seconds.iloc[0]), float(r.peak_rss_mib.iloc[0])
            out.append((f"closed form m=1 N=1e6 {metric}: <= 60 s, <= 8 GiB",
                        f"{s:.1f} s, {mem / 1024:.2f} GiB",
                        "met" if s <= 60 and mem <= 8192 else "missed"))
    for N, lim in ((100_000, 60), (1_000_000, 600)):
        r = des[(des.m == 10) & (des.N == N)]
        for _, row in r.iterrows():
            ok = row.seconds <= lim and row.peak_rss_mib <= 8192
            out.append((f"exact m=10 N={N:.0e} {row.metric}: <= {lim} s, <= 8 GiB",
                        f"{row.seconds:.1f} s, {row.peak_rss_mib / 1024:.2f} GiB",
                        "met" if ok else "missed"))
    v = df[df.cell == "versus"]
    for _, row in v.iterrows():
        out.append((f"N={row.N} m={row.m} exact via dp.design >= 20x the full-scan path, same "
                    "optimum to 1e-9", f"{row.speedup:.1f}x, gap {row.objective_rel_gap:.1e}",
                    "met" if row.speedup >= 20 and row.objective_rel_gap <= 1e-9 else "missed"))
    eq = df[df.N <= 20_000].dropna(subset=["full_max_ratio"]) if "full_max_ratio" in df else df[:0]
    if len(eq):
        gap = float(np.max(np.abs(eq.max_ratio / eq.full_max_ratio - 1)))
        out.append(("pruned max ratio = full-scan max ratio (1e-12) for N <= 2e4",
                    f"max rel diff {gap:.1e} over {len(eq)} instances",
                    "met" if gap <= 1e-12 else "missed"))
    k = df[df.cell == "kernel"]
    if len(k):
        per = k.set_index("method").pairs_per_second_per_core
        leg, ker = per.get("legacy_1p"), per.get("kernel_1p")
        p1, p2 = k[k.method == "kernel_processes_1p"], k[k.method == "kernel_processes_2p"]
        if leg and ker:
            out.append(("full scan pairs/s per core >= 4x the previous scan",
                        f"{ker / 1e6:.1f} M vs {leg / 1e6:.1f} M pairs/s: {ker / leg:.1f}x",
                        "met" if ker >= 4 * leg else "missed"))
        if len(p1) and len(p2):
            sp2 = float(p1.seconds.iloc[0] / p2.seconds.iloc[0])
            out.append(("near-linear speed-up from 1 to 2 processes", f"{sp2:.2f}x",
                        "met" if sp2 >= 1.7 else "missed"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", type=str, default=None, help="comma list of N (design cells)")
    ap.add_argument("--ms", type=str, default="1,10")
    ap.add_argument("--metrics", type=str, default="euclid,geodesic")
    ap.add_argument("--cells", type=str, default="design,versus,kernel")
    ap.add_argument("--outdir", type=Path, default=None)
    ap.add_argument("--cell", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        print(json.dumps(run_cell(args.cell, args.seed), default=float))
        return 0
    import pandas as pd

    outdir = args.outdir or (RESULTS / "quick" if args.quick else RESULTS)
    rows: list[dict] = []
    t_all = time.perf_counter()
    env_note = f"2-core machine shared with other jobs; load average at start {os.getloadavg()[0]:.1f}"
    for spec in cells(args):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "experiments.bench_scale", "--cell", spec,
                               "--seed", str(args.seed)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
        if proc.returncode != 0:
            kind, metric, N, m = spec.split(",")
            err = (proc.stderr.strip().splitlines() or ["?"])[-1]
            rows.append({"cell": kind, "metric": metric, "N": int(N), "m": int(m),
                         "method": "*", "status": f"failed: {err}"})
            continue
        rows.extend(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  {spec}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    df = pd.DataFrame(rows)
    outdir.mkdir(parents=True, exist_ok=True)
    df.to_csv(outdir / "bench_scale.csv", index=False)
    cols = [c for c in ["cell", "metric", "N", "m", "method", "seconds", "full_path_seconds",
                        "speedup", "passes", "pairs_evaluated", "pairs_total", "max_ratio",
                        "full_max_ratio", "pairs_per_second_per_core", "peak_rss_mib",
                        "status"] if c in df]
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    tg = targets(df)
    print(f"\ntargets ({env_note}):")
    for name, got, verdict in tg:
        print(f"  [{verdict}] {name}: {got}")
    pd.DataFrame(tg, columns=["target", "measured", "verdict"]).to_csv(
        outdir / "bench_scale_targets.csv", index=False)
    plot(df, outdir / "bench_scale.png")
    print(f"\ntotal {time.perf_counter() - t_all:.1f} s; wrote {outdir / 'bench_scale.csv'} and .png")
    return 0


def plot(df, path: Path) -> None:  # noqa: ANN001
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    des = df[(df.cell == "design")] if "seconds" in df else df[:0]
    for (metric, m), g in des.dropna(subset=["seconds"]).groupby(["metric", "m"]):
        axes[0].loglog(g.N, g.seconds, "o-", label=f"{metric}, m = {m}")
    axes[0].set_xlabel("N")
    axes[0].set_ylabel("dp.design seconds (pruned scans)")
    axes[0].grid(True, which="both", alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8)
    k = df[df.cell == "kernel"] if "pairs_per_second_per_core" in df else df[:0]
    if len(k):
        axes[1].bar(k.method, k.pairs_per_second / 1e6, color="#3a6ea5")
        axes[1].set_ylabel("full scan, million pairs / s")
        axes[1].tick_params(axis="x", rotation=20, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
