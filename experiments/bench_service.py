"""Remote query through ``dprivacy serve`` vs the same query in-process.

A Parquet file of ``--rows`` records (pid, age, x ~ U[0,1]) is written under ``--tmp``. The same
charged query, ``where(x > 0.5).noisy_count(eps)``, runs

* in-process: ``Queryable(table, budget, backend="duckdb")`` (PINQ) and ``ProPerTable(table,
  budget, ledger=BudgetTable(file), id_column="pid")`` (ProPer, durable personal budgets) on an
  Ibis DuckDB view of the file;
* remotely: the service (uvicorn in a background thread of this process, same machine) on the
  same file, through :func:`dprivacy.remote.connect`, answers released at the configured
  deadline ``query_seconds``.

The same comparison is made for a d_X release (``release(W, design)``: one noisy count per age,
90 elements, Discrete metric, on the owner's universe ``[source.release]``; rows
``pinq-release`` and ``proper-release``).

Target: remote ≤ 1.5 × (in-process + deadline). Each source's deadline (its ``query_seconds``)
is ``--deadline`` seconds, or (default) 3 × its in-process median measured in a warm-up, at least
0.5 s, so that no query overruns (overruns are counted and reported: an overrun answers with the
default).

Time: wall clock of each call, ``--repeats`` interleaved rounds (in-process, remote, in-process,
...), medians reported. Run ``python -m experiments.bench_service`` (10^7 rows) or ``--quick``
(10^5). Writes ``experiments/results/bench_service.csv`` and ``.png`` (``_quick`` for --quick).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EPS = 1e-4


def write_parquet(path: Path, rows: int, chunk: int = 2_000_000) -> None:
    """``rows`` records (pid, age, x) written in row groups of ``chunk``."""
    rng = np.random.default_rng(0)
    schema = pa.schema([("pid", pa.int64()), ("age", pa.int64()), ("x", pa.float64())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            w.write_table(pa.table({"pid": np.arange(start, start + n, dtype=np.int64),
                                    "age": rng.integers(0, 90, n), "x": rng.random(n)},
                                   schema=schema))


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--deadline", type=float, default=None)
    ap.add_argument("--tmp", default=None, help="directory for the Parquet file and the state")
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 3 repeats")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeats = 10**5, 3
    import ibis
    from ibis import _

    from dprivacy.remote import connect
    from dprivacy.service import load_config, new_key
    from dprivacy.service.serve import ServiceThread
    from dprivacy.tables import ProPerTable, Queryable
    from dprivacy.tables.budgets.budget_table import BudgetTable

    work = Path(tempfile.mkdtemp(dir=args.tmp, prefix="bench_service_"))
    try:
        data = work / "people.parquet"
        t0 = time.perf_counter()
        write_parquet(data, args.rows)
        print(f"{args.rows:,} rows written in {time.perf_counter() - t0:.1f} s")
        con = ibis.duckdb.connect()
        view = con.read_parquet(str(data))
        local = {"pinq": Queryable(view, 1e6, backend="duckdb")}
        t0 = time.perf_counter()
        local["proper"] = ProPerTable(view, 1e6, ledger=BudgetTable(work / "local.duckdb"),
                                      id_column="pid", backend="duckdb")
        print(f"in-process ProPer registration: {time.perf_counter() - t0:.1f} s (one-time)")

        import dprivacy as dp

        pd.DataFrame({"age": np.arange(90)}).to_csv(work / "ages.csv", index=False)
        U = dp.Universe.from_dataframe(pd.DataFrame({"age": np.arange(90)}), ["age"])  # noqa: N806
        M, W = dp.metrics.Discrete(1.0), dp.Workload(np.eye(90))  # noqa: N806
        design = dp.Design(w=np.ones(90), beta=np.full(90, 0.5))  # c_i = 0.5

        def run_local(kind: str) -> Any:
            if kind.endswith("-release"):
                return local[kind.split("-")[0]].release(W, design, U, metric=M)
            return local[kind].where(_.x > 0.5).noisy_count(EPS)

        kinds = ["pinq", "proper", "pinq-release", "proper-release"]
        warm = {k: float(np.median([timed(lambda k=k: run_local(k)) for _ in range(2)]))
                for k in kinds}
        deadline = {k: args.deadline or max(0.5, round(3 * w, 2)) for k, w in warm.items()}
        key, digest = new_key()
        cfg_path = work / "service.toml"
        cfg_path.write_text(f"""
[service]
query_seconds = {min(deadline.values())}
max_body_bytes = 1048576
[[source]]
name = "pinq"
path = "people.parquet"
kind = "pinq"
budget = 1e6
query_seconds = {deadline["pinq"]}
[source.release]
universe = "ages.csv"
key = ["age"]
metric = "Discrete"
params = {{ eps = 1.0 }}
query_seconds = {deadline["pinq-release"]}
[[source]]
name = "proper"
path = "people.parquet"
kind = "proper"
id = "pid"
budget = 1e6
query_seconds = {deadline["proper"]}
[source.release]
universe = "ages.csv"
key = ["age"]
metric = "Discrete"
params = {{ eps = 1.0 }}
query_seconds = {deadline["proper-release"]}
[[analyst]]
name = "bench"
key_sha256 = "{digest}"
""")
        t0 = time.perf_counter()
        srv = ServiceThread(load_config(cfg_path))
        print(f"service start (opens both sources, registers ProPer ids): "
              f"{time.perf_counter() - t0:.1f} s; deadlines {deadline} s")
        s = connect(srv.url, key=key)
        tables = {k: s.table(k) for k in local}

        def run_remote(kind: str) -> Any:
            if kind.endswith("-release"):
                return tables[kind.split("-")[0]].release(W, design)
            return tables[kind].where(_.x > 0.5).noisy_count(EPS)

        rows = []
        try:
            for kind in kinds:
                run_remote(kind)  # warm-up
                tl, tr = [], []
                for _r in range(args.repeats):
                    tl.append(timed(lambda kind=kind: run_local(kind)))
                    tr.append(timed(lambda kind=kind: run_remote(kind)))
                ml, mr, dl = float(np.median(tl)), float(np.median(tr)), deadline[kind]
                rows.append({"kind": kind, "rows": args.rows, "deadline_s": dl,
                             "in_process_s": ml, "remote_s": mr,
                             "remote_over_deadline_s": mr - dl,
                             "ratio_vs_in_process_plus_deadline": mr / (ml + dl),
                             "target": 1.5, "overruns": srv.runner.overruns})
                print(f"{kind:7s} in-process {ml:.3f} s  remote {mr:.3f} s  "
                      f"(deadline {dl} s, beyond it {mr - dl:+.3f} s)  "
                      f"ratio {mr / (ml + dl):.3f} (target <= 1.5)  "
                      f"overruns {srv.runner.overruns}")
        finally:
            srv.stop()
        df = pd.DataFrame(rows)
        RESULTS.mkdir(exist_ok=True)
        stem = "bench_service_quick" if args.quick else "bench_service"
        df.to_csv(RESULTS / f"{stem}.csv", index=False)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = np.arange(len(df))
        ax.bar(x - 0.2, df.in_process_s + df.deadline_s, 0.4, label="in-process + deadline")
        ax.bar(x + 0.2, df.remote_s, 0.4, label="remote (service)")
        ax.scatter(x + 0.2, df.deadline_s, color="k", marker="_", s=400, label="deadline")
        ax.set_xticks(x, [f"{k}\n({args.rows:.0e} rows)" for k in df.kind], fontsize=8)
        ax.set_ylabel("seconds (median)")
        ax.set_title("noisy count and d_X release: remote vs in-process + deadline")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / f"{stem}.png", dpi=120)
        print(f"wrote {RESULTS / (stem + '.csv')} and .png")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
