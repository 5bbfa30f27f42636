"""Exact designs on a Dask cluster: N = 10^6 and 10^7 points, m = 10, checked by a pair bound.

The instance is the one of ``experiments.bench_scale`` (its "design" cell, Euclidean): N random
points in the unit square, eps_ij = ||p_i - p_j||, m = 10 i.i.d. U[0, 1] queries, the exact
design for the squared loss. Every scan over all pairs is the exact branch and bound of
``solvers.pruned``; on Dask (``solvers.distributed.DaskEngine``) each scan runs as seed and
walk tasks on the workers.

Each design is then checked by an INDEPENDENT pair bound (``solvers.pair_bound``: a Morton
quadtree over the points, distances recomputed from the coordinates, no code shared with the
solver's scans), streamed over the same cluster in chunks: privacy condition (Theorem 1)
``sum_k u_k |F_ki - F_kj| <= eps_ij`` for every pair, with u = w * beta of the design.

Cells (each in its own subprocess):

* ``local``: ``dp.design`` in one process (no engine), then the pair bound in the same process;
* ``dask``: a ``LocalCluster`` of ``--workers`` single-threaded worker processes with a memory
  limit of ``--worker-memory`` each (glibc allocator settings ``WORKER_MALLOC``);
  ``dp.design(..., engine=DaskEngine(client))``, then the pair bound on the same client. Peak
  memory of each worker is sampled every 0.2 s (resident set size of the worker process); the
  driver's own peak is its maximum resident set size. The design's time is split by phase
  (``DaskEngine.timings``): on the driver ``tree``, ``ranges`` and ``ship``; on the workers
  ``seed`` and ``walk``; ``other`` is the rest (the convex program on the driver).

Run:  python -m experiments.bench_design_dask [--sizes 1000000,10000000] [--cells local,dask]
      [--workers 2] [--worker-memory 4GB] [--seed 0] [--quick] [--outdir DIR]
Writes bench_design_dask.csv / .md / .png (experiments/results/, or results/quick/ with --quick)
and prints the table and each target, met or missed, with the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
M = 10
#: glibc allocator settings of the workers. Dask's nanny starts workers with
#: MALLOC_TRIM_THRESHOLD_=65536, which also fixes glibc's mmap threshold at 128 KiB: every
#: temporary array of a scan batch (a few MB) is then mapped and unmapped anew, and at N = 10^6
#: the workers spent about as much time in the kernel (page faults) as in the scans. With
#: these, batches reuse the heap (a worker keeps up to 256 MiB of freed memory).
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": 2**26, "MALLOC_TRIM_THRESHOLD_": 2**28}


def instance(N: int, seed: int) -> tuple[Any, Any, Any]:
    """bench_scale's Euclidean design instance (same generator, same seed layout)."""
    import dprivacy as dp

    rng = np.random.default_rng([seed, N, M, True])
    U = dp.Universe.from_points(rng.random((N, 2)))
    return U, dp.metrics.Euclidean(1.0), dp.Workload(rng.random((M, N)))


def _malloc_env() -> str:
    """The allocator settings a worker process actually got (run on each worker)."""
    return " ".join(f"{k}={os.environ.get(k)}" for k in WORKER_MALLOC)


class WorkerPeaks:
    """Peak resident memory of given processes, sampled every 0.2 s in a thread."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for n, p in enumerate(self.procs):
                try:
                    self.peak[n] = max(self.peak[n], p.memory_info().rss)
                except Exception:  # noqa: BLE001 - a worker that died shows as its last peak
                    pass
            self._stop.wait(0.2)

    def __enter__(self) -> WorkerPeaks:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _gib(b: float) -> float:
    return float(b) / 2**30


def run_cell(kind: str, N: int, seed: int, workers: int, worker_memory: str) -> dict:
    import dprivacy as dp
    from solvers.pair_bound import euclidean_pair_bound

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    U, metric, W = instance(N, seed)
    row: dict[str, Any] = {"cell": kind, "N": N, "m": M, "seconds_instance": time.perf_counter() - t0,
                           "pairs_total": N * (N - 1) // 2}

    def design(**kw: Any) -> Any:
        t = time.perf_counter()
        d = dp.design(W, U, metric, method="exact", loss="squared", **kw)
        rep = d.report
        row.update(seconds_design=time.perf_counter() - t, objective=d.objective,
                   max_ratio=rep["max_ratio"], status=rep.get("status"),
                   passes=rep["passes"]["passes"], pairs_evaluated=rep["passes"]["pairs_evaluated"],
                   verified_by=rep["verified_by"], load_after_design=os.getloadavg()[0])
        return d

    def verify(d: Any, client: Any) -> None:
        t = time.perf_counter()
        pb = euclidean_pair_bound(U.coords, W.F, d.u, 1.0, client=client)
        row.update(seconds_verify=time.perf_counter() - t, verify_holds=pb.holds,
                   verify_max_exact=pb.max_exact, verify_bound=pb.bound,
                   verify_pairs_exact=pb.pairs_exact, verify_cell_pairs=pb.cell_pairs,
                   verify_chunks=pb.chunks)

    if kind == "local":
        d = design()
        verify(d, None)
    else:
        import dask
        import distributed

        from solvers.distributed import DaskEngine

        t = time.perf_counter()
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{k}": v
                              for k, v in WORKER_MALLOC.items()}), \
                distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         memory_limit=worker_memory, dashboard_address=None) as cl, \
                distributed.Client(cl) as client:
            row["seconds_cluster"] = time.perf_counter() - t
            row["worker_malloc"] = "; ".join(sorted(set(client.run(_malloc_env).values())))
            pids = list(client.run(os.getpid).values())
            with WorkerPeaks(pids) as wp_design, DaskEngine(client) as engine:
                d = design(engine=engine)
                phases = {f"seconds_{k}": v for k, v in engine.timings.items()}
            # the rest of the design's time: the convex program and bookkeeping on the driver
            phases["seconds_other"] = row["seconds_design"] - sum(phases.values())
            row.update(phases)
            with WorkerPeaks(pids) as wp_verify:
                verify(d, client)
            row.update(workers=workers, worker_memory_limit=worker_memory,
                       worker_peak_gib_design=_gib(max(wp_design.peak)),
                       worker_peak_gib_verify=_gib(max(wp_verify.peak)),
                       worker_peaks_gib=[round(_gib(max(a, b)), 3) for a, b in
                                         zip(wp_design.peak, wp_verify.peak, strict=True)])
    row.update(driver_peak_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
               load_start=load0[0], load_end=os.getloadavg()[0])
    return row


def markdown(df: Any) -> str:
    """A markdown table (numbers to 4 significant digits)."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "" if np.isnan(v) else f"{v:.4g}"
        return str(v)
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(fmt(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def targets(df: Any) -> list[tuple[str, str, str]]:
    out = []
    for _, r in df.iterrows():
        if "seconds_design" not in r or not np.isfinite(r.get("seconds_design", np.nan)):
            continue
        load = f"load {r.load_start:.1f} -> {r.load_end:.1f}"
        if r.cell == "dask" and r.N >= 10_000_000:
            mem = max(r.worker_peak_gib_design, r.worker_peak_gib_verify)
            ok = r.seconds_design <= 900 and mem * 2**30 <= 4e9
            out.append((f"exact design N={r.N:.0e} m=10 on Dask: <= 15 min, <= 4 GB per worker",
                        f"{r.seconds_design:.0f} s design (+ {r.seconds_verify:.0f} s pair "
                        f"bound), peak {mem:.2f} GiB per worker, {load}",
                        "met" if ok else "missed"))
        if r.cell == "local" and r.N == 1_000_000:
            out.append(("exact design N=1e6 m=10 on one machine: <= 30 s",
                        f"{r.seconds_design:.1f} s, {load}",
                        "met" if r.seconds_design <= 30 else "missed"))
        out.append((f"{r.cell} N={r.N:.0e}: every pair within the budget by the independent "
                    "pair bound", f"max exact ratio {r.verify_max_exact:.12g}, bound "
                    f"{r.verify_bound:.12g}, {r.verify_pairs_exact:.3g} pairs exact",
                    "met" if r.verify_holds else "missed"))
    return out


def plot(df: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for (cell, what), style in ((("local", "seconds_design"), "o-"), (("dask", "seconds_design"), "s-"),
                                (("local", "seconds_verify"), "o:"), (("dask", "seconds_verify"), "s:")):
        g = df[df.cell == cell].dropna(subset=[what]).sort_values("N") if what in df else df[:0]
        if len(g):
            ax[0].loglog(g.N, g[what], style, label=f"{cell}: {what.split('_')[1]}")
    ax[0].axhline(900, color="grey", lw=0.8, ls="--")
    ax[0].text(ax[0].get_xlim()[0], 900, " 15 min", va="bottom", fontsize=7, color="grey")
    ax[0].set_xlabel("N (points)")
    ax[0].set_ylabel("seconds")
    loads = df[["load_start", "load_end"]].to_numpy(float) if "load_start" in df else np.zeros(1)
    ax[0].set_title(f"exact design, m = 10, and its pair bound (load average "
                    f"{np.nanmin(loads):.0f}-{np.nanmax(loads):.0f} on 2 cores)", fontsize=9)
    ax[0].grid(True, which="both", alpha=0.3)
    ax[0].legend(fontsize=7)
    g = df[df.cell == "dask"].sort_values("N") if "worker_peak_gib_design" in df else df[:0]
    if len(g):
        ax[1].semilogx(g.N, g.worker_peak_gib_design, "s-", label="worker peak, design")
        ax[1].semilogx(g.N, g.worker_peak_gib_verify, "s:", label="worker peak, pair bound")
        ax[1].semilogx(g.N, g.driver_peak_gib, "^-", label="driver peak (whole cell)")
        ax[1].axhline(4e9 / 2**30, color="grey", lw=0.8, ls="--", label="4 GB per worker")
        ax[1].set_xlabel("N (points)")
        ax[1].set_ylabel("GiB")
        ax[1].legend(fontsize=7)
        ax[1].grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 20 000 only, seconds")
    ap.add_argument("--sizes", type=str, default=None, help="comma list of N")
    ap.add_argument("--cells", type=str, default="local,dask")
    ap.add_argument("--local-max", type=int, default=1_000_000,
                    help="largest N of the one-machine cell")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-memory", type=str, default="4GB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--outdir", type=Path, default=None)
    ap.add_argument("--from-csv", type=Path, nargs="+", default=None,
                    help="rewrite the CSV, table and figure from the rows of earlier runs")
    ap.add_argument("--cell", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        kind, N = args.cell.split(",")
        print(json.dumps(run_cell(kind, int(N), args.seed, args.workers, args.worker_memory),
                         default=lambda o: o.item() if hasattr(o, "item") else str(o)))
        return 0
    import pandas as pd

    sizes = [20_000] if args.quick else [1_000_000, 10_000_000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    outdir = args.outdir or (RESULTS / "quick" if args.quick else RESULTS)
    specs = [(c, N) for N in sizes for c in args.cells.split(",")
             if not (c == "local" and N > args.local_max)]
    rows: list[dict] = []
    if args.from_csv:
        specs = []
        rows = [r for f in args.from_csv for r in pd.read_csv(f).to_dict("records")]
    for kind, N in specs:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "experiments.bench_design_dask", "--cell",
                               f"{kind},{N}", "--seed", str(args.seed), "--workers",
                               str(args.workers), "--worker-memory", args.worker_memory],
                              capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines() or ["?"]
            errs = [ln for ln in lines if "Error" in ln or "Exception" in ln or "Killed" in ln]
            err = (errs or lines)[-1].strip()
            outdir.mkdir(parents=True, exist_ok=True)
            (outdir / f"bench_design_dask_failed_{kind}_{N}.log").write_text(proc.stderr)
            rows.append({"cell": kind, "N": N, "m": M, "status": f"failed: {err}"})
            print(f"  {kind},{N}: FAILED {err}", file=sys.stderr)
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  {kind},{N}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    df = pd.DataFrame(rows)
    outdir.mkdir(parents=True, exist_ok=True)
    df.to_csv(outdir / "bench_design_dask.csv", index=False)
    cols = [c for c in ["cell", "N", "seconds_design", "seconds_tree",
                        "seconds_ranges", "seconds_ship", "seconds_seed", "seconds_walk",
                        "seconds_other", "seconds_verify", "passes",
                        "pairs_evaluated", "max_ratio", "verify_max_exact", "verify_bound",
                        "verify_pairs_exact", "worker_peak_gib_design", "worker_peak_gib_verify",
                        "driver_peak_gib", "load_start", "load_end", "status"] if c in df]
    table = markdown(df[cols])
    tg = targets(df)
    lines = ["# Exact designs on a Dask cluster", "",
             f"2-core machine shared with other jobs (load averages in the table); `--workers "
             f"{args.workers} --worker-memory {args.worker_memory}`.", "", table, "", "## Targets",
             ""] + [f"- [{v}] {n}: {g}" for n, g, v in tg]
    (outdir / "bench_design_dask.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(df, outdir / "bench_design_dask.png")
    print(f"\nwrote {outdir / 'bench_design_dask.csv'}, .md and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
