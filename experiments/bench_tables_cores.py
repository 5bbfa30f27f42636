"""Scaling with the number of cores: 1 vs 2 threads for counts, the ProPer charge and a release.

Issue 24's benchmark item "scaling with the number of cores (1 vs 2 processes/threads) for the
count and the ProPer charge". One spawned process builds the data and alternates between 1 and
2 threads before every round (DuckDB's ``SET threads`` on the library's engine and on the
reference connection, and the numpy/BLAS pools through ``threadpoolctl``), so that a varying
load on a shared machine hits both thread counts alike. Medians over the rounds of:

* ``exact count``: DuckDB's ``SELECT count(*) FROM frame WHERE x > 0.5`` on the registered frame
  (the reference of every row);
* ``dprivacy noisy count``: ``Queryable(frame, backend="duckdb").where(_.x > 0.5).noisy_count``
  (PINQ: one global budget);
* ``ProPer charge``: the same count on a ``ProPerTable`` with a durable budget store, every
  selected person paying (budgets large enough that nobody runs out), one query per run;
* ``d_X release``: the 1000-group histogram release from Parquet (``--rows`` records), against
  the exact GROUP BY of the same file (its reference; the others' is the exact count).

Reported per workload: time with 1 and with 2 threads, the speed-up (t1 / t2), and the ratio to
the exact reference at each thread count. Run: ``python -m experiments.bench_tables_cores``
(10^7 rows) or ``--quick``; also ``python -m experiments.bench_tables --only cores``. Writes
``experiments/results/bench_tables_cores.csv`` and ``bench_tables_cores_scaling.png`` (``_quick``
for --quick; through ``bench_tables --only cores`` the CSV and the ``_scaling.png`` have the same
names).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS = ("exact count", "dprivacy noisy count", "ProPer charge", "d_X release (1000 groups)")


def _child(rows: int, repeats: int, tmp: str, queue: Any) -> None:
    """Everything measured with 1 and with 2 threads, interleaved (1, 2, 1, 2, ...: the machine's
    load hits both alike); puts {threads: {workload: (median s, median s of its reference)}}."""
    import gc
    import time

    import duckdb
    import numpy as np
    from ibis import _
    from threadpoolctl import threadpool_limits

    import dprivacy as dp
    from dprivacy.tables import ProPerTable, Queryable
    from dprivacy.tables.relations.engine.backends import default_duckdb
    from experiments import bench_tables_speed as speed

    con = duckdb.connect()
    df = speed.make_frame(rows)
    con.register("frame", df)
    groups = Path(tmp) / f"groups_{rows}.parquet"
    G = speed.GROUPS
    U = dp.Universe.from_domains({"key": list(range(G))})
    W = dp.Workload(np.eye(G))
    M = dp.metrics.Discrete(eps=1.0)
    D = dp.Design(w=np.ones(G), beta=np.full(G, 0.5), constraints=M.constraint_set(U))
    store = Path(tmp) / "cores.dpb"
    for f in (store, Path(f"{store}.lock")):
        if f.exists():
            f.unlink()
    sel = ProPerTable(df, 1e6, id_column="id", ledger=str(store), backend="duckdb"
                      ).where(_.x > 0.5)
    fns = {
        "exact count": lambda: con.execute("SELECT count(*) FROM frame WHERE x > 0.5").fetchall(),
        "dprivacy noisy count": lambda: Queryable(df, 1e9, backend="duckdb").where(_.x > 0.5)
        .noisy_count(0.1),
        "ProPer charge": lambda: sel.noisy_count(0.1),
        "GROUP BY": lambda: con.execute(f"SELECT key, count(*) FROM read_parquet('{groups}') "
                                        "GROUP BY key").fetchall(),
        "d_X release (1000 groups)": lambda: Queryable(str(groups), 1e9).histogram(U)
        .release(W, D),
    }
    refs = {w: "exact count" for w in WORKLOADS}
    refs["d_X release (1000 groups)"] = "GROUP BY"
    limits = threadpool_limits(limits=1)

    def use(threads: int) -> None:
        limits.restore_original_limits()
        threadpool_limits(limits=threads)
        default_duckdb().raw.execute(f"SET threads = {threads}")
        con.execute(f"SET threads = {threads}")

    times: dict[int, dict[str, list[float]]] = {n: {k: [] for k in fns} for n in (1, 2)}
    for n in (1, 2):  # warm-up (the design is verified here, once)
        use(n)
        for f in fns.values():
            f()
    for _rep in range(repeats):
        for n in (1, 2):
            use(n)
            for k, f in fns.items():
                gc.collect()
                t0 = time.perf_counter()
                f()
                times[n][k].append(time.perf_counter() - t0)
    out = {n: {w: (statistics.median(times[n][w]), statistics.median(times[n][refs[w]]))
               for w in WORKLOADS} for n in (1, 2)}
    queue.put(out)


def cores(rows: int, tmp: Path, repeats: int) -> list[dict]:
    """Rows of the scaling table (one per workload), each measured with 1 and 2 threads."""
    from experiments import bench_tables_speed as speed

    tmp.mkdir(parents=True, exist_ok=True)
    speed.write_groups_parquet(tmp / f"groups_{rows}.parquet", rows)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(rows, repeats, str(tmp), q))
    proc.start()
    res: dict[int, dict[str, tuple[float, float]]] = q.get()
    proc.join()
    out = []
    for w in WORKLOADS:
        (t1, r1), (t2, r2) = res[1][w], res[2][w]
        out.append(speed.row(f"cores: {w}", rows, "2 threads", t2, "1 thread", t1, float("nan"),
                             speedup=t1 / t2, ratio_to_exact_1_thread=t1 / r1,
                             ratio_to_exact_2_threads=t2 / r2, load_average=os.getloadavg()[0]))
    return out


def plot(table: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["ref_time_s"] * 1e3, 0.4, label="1 thread")
    ax.bar(x + 0.2, table["time_s"] * 1e3, 0.4, label="2 threads")
    for i, r in enumerate(table.itertuples()):
        ax.text(i, max(r.ref_time_s, r.time_s) * 1e3 * 1.03, f"×{r.speedup:.2f}", ha="center",
                fontsize=8)
    ax.set_xticks(x, [b.removeprefix("cores: ") for b in table["benchmark"]], fontsize=8)
    ax.set_ylabel("median time (ms)")
    ax.set_title(f"1 vs 2 threads (DuckDB + BLAS), {int(table['rows'].iloc[0]):,} rows")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> Any:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 2 repeats")
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/dprivacy_bench_tables"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = 10**5, 2
    os.environ.setdefault("TQDM_DISABLE", "1")
    table = pd.DataFrame(cores(args.rows, args.tmp, args.repeats))
    stem = "bench_tables_cores_quick" if args.quick else "bench_tables_cores"
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / f"{stem}.csv", index=False)
    plot(table, args.out / f"{stem}_scaling.png")
    print(table.to_string(index=False, float_format="%.4f"))
    return table


if __name__ == "__main__":
    main()
