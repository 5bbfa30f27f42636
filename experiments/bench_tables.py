"""Tables on engines vs the exact queries they wrap (targets in docs/benchmarks.md), measured side by side.

Rows (each: the library's charged, noised query vs the exact query on the same data, same run):

1. where-where-noisy_count on ``--rows`` records (x ~ U[0,1], y ∈ 0..9; ``x > 0.5``, ``y < 3``):
   * ``duckdb``: ``Queryable(parquet-free pandas frame, backend="duckdb")`` with Ibis expressions
     vs DuckDB's exact ``SELECT count(*) ... WHERE`` over the same registered frame
     (target ≤ 1.5×);
   * ``pandas frame on duckdb``: the same frame and expressions vs numpy's mask-and-sum
     (the pandas user's fast path; target ≤ 3×);
   * ``pandas``: the pandas backend with per-record Python callables vs numpy's mask-and-sum on
     ``--pandas-rows`` records (per-record Python cannot reach 3×; measured to say by how much).
2. The histogram of a d_X release (GROUP BY an element key, 64 elements) from a Parquet file of
   ``--parquet-rows`` records generated under ``--tmp`` (``Queryable(path).release(W, D, U)``)
   vs DuckDB's exact GROUP BY over the file; each runs in a fresh process whose peak RSS is
   reported (target ≤ 1.5×, peak ≤ 2 GiB).
3. ProPer on DuckDB with a durable ledger (``BudgetTable`` file), ``--rows`` records with ids:
   one charged noisy count of a Where vs the exact count (target ≤ 5×); both the fast path (every
   source can pay) and the exact path (some budget is exhausted, so payers are decided by a
   join) are reported. Registering the budgets is a one-time cost, reported separately.

4. Issue 24 (:mod:`experiments.bench_tables_speed`, medians of interleaved runs): ProPer's
   durable noisy count on 13 queries in a row (each ≤ 5× the exact count) and the budget store's
   size after 100 queries (≤ 16 bytes per person); a d_X release over 1000 groups (≤ 1.5× the
   exact GROUP BY); a pandas frame with the default backend, where + count (≤ 10× mask.sum).

5. Scaling with the number of cores (:mod:`experiments.bench_tables_cores`): the exact count,
   the noisy count, the ProPer charge and the 1000-group release with 1 and with 2 threads
   (DuckDB and BLAS), each thread count in its own process; the speed-up t1/t2 (no target).

6. Opt-in (``--only spark``, :mod:`experiments.bench_tables_spark`): ProPer on the local Spark
   session with the budgets held in the cluster (``SparkBudgetTable``), ``--spark-people``
   people (10^8; 10^5 with --quick) and ``--spark-queries`` queries: median time per query vs
   Spark's exact count, the store's bytes per person, the driver's peak RSS (no target).

Time: rows 1-3, minimum over ``--repeats`` interleaved runs (library, exact, library, ...) after a
warm-up; row 4, medians. ``--only`` picks groups (where, histogram, proper, proper13, release,
pandas, cores). Run: ``python -m experiments.bench_tables`` (10^7 rows, 10^8-row Parquet) or ``--quick``.
Writes ``experiments/results/bench_tables.csv`` and ``.png`` (``bench_tables_quick`` for --quick).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments import bench_tables_speed as speed  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS_ALL = ("where", "histogram", "proper", "proper13", "release", "pandas", "cores")
GROUPS_OPT = ("spark",)  # run only when named in --only
K = 64  # elements of the histogram's universe


make_frame = speed.make_frame


def best_of(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Minimum wall time of each function over interleaved runs, after one warm-up each."""
    return {k: min(v) for k, v in speed.run_times(fns, repeats).items()}


row = speed.row


# ----------------------------------------------------------------------- 1. where-where-count
def bench_where(df: pd.DataFrame, df_small: pd.DataFrame, repeats: int) -> list[dict]:
    import duckdb
    from ibis import _

    from dprivacy.tables import Queryable

    con = duckdb.connect()
    con.register("frame", df)
    sql = "SELECT count(*) FROM frame WHERE x > 0.5 AND y < 3"

    def library() -> float:
        q = Queryable(df, 1e9, backend="duckdb")
        return q.where(_.x > 0.5).where(_.y < 3).noisy_count(0.1)

    def exact() -> int:
        return con.execute(sql).fetchall()[0][0]

    def numpy_exact() -> int:
        return int(np.count_nonzero((df["x"].to_numpy() > 0.5) & (df["y"].to_numpy() < 3)))

    t = best_of({"lib": library, "exact": exact, "np": numpy_exact}, repeats)
    n = len(df)
    out = [row("where-where-noisy_count", n, "duckdb backend", t["lib"], "DuckDB exact query",
               t["exact"], 1.5),
           row("where-where-noisy_count", n, "pandas frame, backend='duckdb'", t["lib"],
               "numpy mask-and-sum", t["np"], 3.0)]

    xs, ys = df_small["x"].to_numpy(), df_small["y"].to_numpy()

    def pandas_lib() -> float:
        q = Queryable(df_small, 1e9)
        return q.where(lambda r: r["x"] > 0.5).where(lambda r: r["y"] < 3).noisy_count(0.1)

    def numpy_small() -> int:
        return int(np.count_nonzero((xs > 0.5) & (ys < 3)))

    ts = best_of({"lib": pandas_lib, "np": numpy_small}, max(1, repeats // 2))
    out.append(row("where-where-noisy_count", len(df_small), "pandas backend (per-record Python)",
                   ts["lib"], "numpy mask-and-sum", ts["np"], 3.0))
    return out


# ----------------------------------------------------------------------- 2. Parquet histogram
def write_parquet(path: Path, n: int) -> None:
    """n records with an element key (0..K-1) and a value, written by DuckDB (out of core)."""
    import duckdb

    if path.exists() and path.with_suffix(".rows").exists() and \
            path.with_suffix(".rows").read_text() == str(n):
        return
    con = duckdb.connect()
    con.execute(f"COPY (SELECT (hash(range) % {K})::BIGINT AS key, (range % 1000) / 1000.0 AS v "
                f"FROM range({int(n)})) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)")
    con.close()
    path.with_suffix(".rows").write_text(str(n))


def _histogram_child(kind: str, path: str, repeats: int, queue: Any) -> None:
    import duckdb

    import dprivacy as dp
    from dprivacy.tables import Queryable

    U = dp.Universe.from_domains({"key": list(range(K))})
    W = dp.Workload(np.eye(K))
    M = dp.metrics.Discrete(eps=1.0)
    D = dp.Design(w=np.ones(K), beta=np.full(K, 0.5), constraints=M.constraint_set(U))
    con = duckdb.connect()

    def library() -> np.ndarray:
        return Queryable(path, 1e9).release(W, D, U)

    def exact() -> Any:
        return con.execute(f"SELECT key, count(*) FROM read_parquet('{path}') GROUP BY key"
                           ).fetchall()

    fn = library if kind == "library" else exact
    t = best_of({kind: fn}, repeats)[kind]
    queue.put((t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def bench_histogram(path: Path, n: int, repeats: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    res = {}
    for kind in ("library", "exact"):
        q = ctx.Queue()
        p = ctx.Process(target=_histogram_child, args=(kind, str(path), repeats, q))
        p.start()
        res[kind] = q.get()
        p.join()
    gib = 2**30
    return [row("d_X histogram from Parquet (GROUP BY key)", n, "duckdb backend (Parquet)",
                res["library"][0], "DuckDB exact GROUP BY", res["exact"][0], 1.5,
                peak_rss_gib=res["library"][1] / gib, ref_peak_rss_gib=res["exact"][1] / gib,
                memory_target_gib=2.0, memory_met=bool(res["library"][1] <= 2 * gib))]


# ----------------------------------------------------------------------- 3. ProPer on DuckDB
def bench_proper(df: pd.DataFrame, tmp: Path, repeats: int) -> list[dict]:
    import duckdb
    from ibis import _

    from dprivacy.tables import ProPerTable

    con = duckdb.connect()
    con.register("frame", df)
    out = []
    for path_kind, budget in (("fast path: every source can pay", 1e6),
                              ("exact path: a budget is exhausted", "b")):
        db = tmp / f"proper_{path_kind[:4]}.duckdb"
        for f in (db, db.with_suffix(".duckdb.wal")):
            if f.exists():
                f.unlink()
        data = df if budget != "b" else df.assign(b=np.where(df["id"] == 0, 0.0, 1e6))
        t0 = time.perf_counter()
        p = ProPerTable(data, budget, id_column="id", ledger=str(db), backend="duckdb")
        t_register = time.perf_counter() - t0

        def library(p: Any = p) -> float:
            return p.where(_.x > 0.5).noisy_count(1e-3)

        def exact() -> int:
            return con.execute("SELECT count(*) FROM frame WHERE x > 0.5").fetchall()[0][0]

        t = best_of({"lib": library, "exact": exact}, repeats)
        out.append(row("ProPer noisy_count, durable ledger", len(df), f"duckdb ({path_kind})",
                       t["lib"], "DuckDB exact count", t["exact"], 5.0,
                       register_s=t_register))
    return out


# ----------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 10^6-row Parquet, 1 repeat")
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--pandas-rows", type=int, default=10**6)
    ap.add_argument("--parquet-rows", type=int, default=10**8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/dprivacy_bench_tables"))
    ap.add_argument("--only", default=",".join(GROUPS_ALL),
                    help=f"comma-separated groups of rows among {','.join(GROUPS_ALL)} "
                    f"(opt-in: {','.join(GROUPS_OPT)})")
    ap.add_argument("--spark-people", type=int, default=10**8)
    ap.add_argument("--spark-queries", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.pandas_rows, args.parquet_rows, args.repeats = 10**5, 10**4, 10**6, 1
        args.spark_people = 10**5
    os.environ.setdefault("TQDM_DISABLE", "1")
    args.tmp.mkdir(parents=True, exist_ok=True)
    print(f"rows {args.rows:,}; pandas backend rows {args.pandas_rows:,}; Parquet rows "
          f"{args.parquet_rows:,}; repeats {args.repeats}", flush=True)

    only = {g.strip() for g in args.only.split(",") if g.strip()}
    unknown = only - set(GROUPS_ALL) - set(GROUPS_OPT)
    if unknown:
        ap.error(f"unknown groups {sorted(unknown)}; choose among {GROUPS_ALL}")
    df = make_frame(args.rows)
    small = make_frame(args.pandas_rows)
    rows: list[dict] = []

    def show(new: list[dict]) -> None:
        rows.extend(new)
        print(pd.DataFrame(new).to_string(index=False, float_format="%.4f"), flush=True)

    if "where" in only:
        show(bench_where(df, small, args.repeats))
    if "histogram" in only:
        parquet = args.tmp / f"records_{args.parquet_rows}.parquet"
        write_parquet(parquet, args.parquet_rows)
        show(bench_histogram(parquet, args.parquet_rows, args.repeats))
    if "proper" in only:
        show(bench_proper(df, args.tmp, args.repeats))
    if "proper13" in only:
        show(speed.proper_13(df, args.tmp))
    if "release" in only:
        groups = args.tmp / f"groups_{args.rows}.parquet"
        speed.write_groups_parquet(groups, args.rows)
        show(speed.histogram_1000(groups, args.rows, max(args.repeats, 3)))
    if "pandas" in only:
        show(speed.pandas_default(small, max(args.repeats, 3)))
    if "cores" in only:
        from experiments import bench_tables_cores

        show(bench_tables_cores.cores(args.rows, args.tmp, max(args.repeats, 3)))
    if "spark" in only:
        from experiments import bench_tables_spark

        show(bench_tables_spark.proper_spark(args.spark_people, args.spark_queries,
                                             args.tmp / "spark"))
    if args.quick:
        shutil.rmtree(args.tmp, ignore_errors=True)

    table = pd.DataFrame(rows)
    stem = "bench_tables_quick" if args.quick else "bench_tables"
    if only != set(GROUPS_ALL):  # a subset of the rows: its own files, the full table stays
        stem += "_" + "_".join(g for g in GROUPS_ALL + GROUPS_OPT if g in only)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / f"{stem}.csv", index=False)
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r.benchmark}\n{r.system}" for r in table.itertuples()]
    ypos = np.arange(len(table))
    colours = {True: "tab:green", False: "tab:red"}
    ax.barh(ypos, table["ratio"], color=[colours.get(m, "tab:gray") for m in table["met"]])
    ax.scatter(table["target"], ypos, marker="|", s=400, color="k", label="target")
    ax.set_yticks(ypos, labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("time / exact reference (log scale)")
    ax.set_title(f"tables on engines ({args.rows:,} rows; Parquet {args.parquet_rows:,})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / f"{stem}.png", dpi=110)
    plt.close(fig)
    if "cores" in only:  # the scaling rows also as times per thread count
        from experiments import bench_tables_cores

        scaling = table[table["benchmark"].str.startswith("cores: ")].reset_index(drop=True)
        bench_tables_cores.plot(scaling, args.out / f"{stem}_scaling.png")
    print()
    print(table.to_string(index=False, float_format="%.4f"))
    return table


if __name__ == "__main__":
    main()
