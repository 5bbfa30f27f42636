"""What the row cap of a Spark source costs: a filtered count through the service's guards.

``dprivacy serve`` reads a Spark source through a guard so that no change of its files after
start can make a plan process more rows than its static bound: a Parquet source through
:func:`dprivacy.service.spark_sources.row_guard` (each file's rows beyond those counted at
start are left out, by ``_metadata.row_index``), other sources through a global ``LIMIT``
(which Spark evaluates in one task). This script writes ``rows`` records ``(pid, age)`` as
Parquet with Spark, then times the same filtered count (``age > 40``) read plainly, through the
per-file guard and through ``LIMIT rows``, interleaved ``repeats`` times, and writes the times,
their medians and ratios to ``experiments/results/bench_spark_source_guard_<rows>.csv`` with
the load average.

Run: ``python -m experiments.bench_spark_source_guard --rows 5000000 --repeats 5``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--files", type=int, default=4, help="Parquet files of the source")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    from dprivacy.service.spark_sources import _rows_per_file, row_guard
    from dprivacy.tables.relations.engine import local_session

    spark = local_session(2)
    n = args.rows
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        path = f"{tmp}/people.parquet"
        (spark.range(n).selectExpr("id AS pid", "id % 90 AS age").repartition(args.files)
         .write.parquet(path))
        df = spark.read.parquet(path)
        df.createOrReplaceTempView("plain")
        t0 = time.perf_counter()
        per_file = _rows_per_file(df)
        count_at_start = time.perf_counter() - t0
        row_guard(df, per_file).createOrReplaceTempView("guarded")
        queries = {"plain": "SELECT COUNT(*) FROM plain WHERE age > 40",
                   "row_guard": "SELECT COUNT(*) FROM guarded WHERE age > 40",
                   "limit": f"SELECT COUNT(*) FROM (SELECT * FROM plain LIMIT {n}) t "
                            "WHERE age > 40"}
        answers = {k: spark.sql(q).collect()[0][0] for k, q in queries.items()}  # warm-up
        assert len(set(answers.values())) == 1, answers
        times: dict[str, list[float]] = {k: [] for k in queries}
        for _r in range(args.repeats):
            for k, q in queries.items():
                t0 = time.perf_counter()
                spark.sql(q).collect()
                times[k].append(time.perf_counter() - t0)
    load = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = [{"rows": n, "files": args.files, "read": k, "median_s": med[k],
             "ratio_to_plain": med[k] / med["plain"],
             "times_s": " ".join(f"{t:.3f}" for t in v),
             "count_per_file_at_start_s": count_at_start, "load_1min_end": load[0]}
            for k, v in times.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"bench_spark_source_guard_{n}.csv"
    pd.DataFrame(rows).to_csv(out, index=False)
    for r in rows:
        print(f"{r['read']:>9}: median {r['median_s']:.2f} s ({r['ratio_to_plain']:.2f}x plain)")
    print(f"per-file count at start {count_at_start:.2f} s; load average {load[0]:.1f}; "
          f"wrote {out}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
