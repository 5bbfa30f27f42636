"""ProPer's durable count, 100 queries in a row: is any query slower than the others?

Every query (budget 1 each, ε = 0.001, ``x > 0.5``: half the people pay each time) appends the
payers' bitmap (N/8 bytes) to the budget store; once the records outweigh 4 bytes per person they
are folded into a new snapshot (an 80 MB write and an fsync at 10⁷ people, about every 33rd
query). With ``background`` compaction (the default) a background thread writes it; without
(the earlier behaviour, kept as ``SlotStore.background = False``) the query that crosses the
threshold pays for it. Each query is timed against DuckDB's exact count of the same filter (the
median of three scans right after it).

The ``snapshots`` column counts the queries after which the store's file shrank (a compaction
landed). ``--runs K`` repeats the whole measurement K times (fresh stores each time) and adds
the minimum, median and maximum of each run's figures.

Run: ``python -m experiments.bench_proper_tail`` (10⁷ people) or ``--rows 1000000``. Writes
``experiments/results/bench_proper_tail.csv`` and ``.md`` (and a plot with the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.bench_tables_speed import make_frame

RESULTS = Path(__file__).resolve().parent / "results"


def run(df: pd.DataFrame, background: bool, queries: int, folder: Path) -> pd.DataFrame:
    """Time ``queries`` durable ProPer counts, each against the exact count."""
    import duckdb
    from ibis import _

    from dprivacy.tables import ProPerTable
    from dprivacy.tables.budgets.budget_table import BudgetTable

    con = duckdb.connect()
    con.register("frame", df)
    path = folder / f"tail_{'bg' if background else 'sync'}.dpb"
    ledger = BudgetTable(path)
    ledger.store.background = background
    p = ProPerTable(df, 1.0, id_column="id", ledger=ledger, backend="duckdb")
    sel = p.where(_.x > 0.5)

    def exact() -> int:
        return con.execute("SELECT count(*) FROM frame WHERE x > 0.5").fetchall()[0][0]

    exact()
    rows = []
    for q in range(1, queries + 1):
        gc.collect()
        t0 = time.perf_counter()
        sel.noisy_count(0.001)
        t = time.perf_counter() - t0
        refs = []
        for _k in range(3):
            t1 = time.perf_counter()
            exact()
            refs.append(time.perf_counter() - t1)
        rows.append({"compaction": "background" if background else "on the query path",
                     "query": q, "time_s": t, "exact_s": statistics.median(refs),
                     "store_bytes_per_person": os.path.getsize(path) / len(df)})
    ledger.store.close()
    out = pd.DataFrame(rows)
    out["ratio"] = out["time_s"] / out["exact_s"]
    return out


def summary(res: pd.DataFrame) -> pd.DataFrame:
    keys = ["run", "compaction"] if "run" in res.columns else ["compaction"]
    g = res.groupby(keys, sort=False)
    shrank = res.groupby(keys, sort=False)["store_bytes_per_person"].apply(
        lambda b: int((b.diff() < 0).sum()))
    return pd.DataFrame({
        "median_s": g["time_s"].median(), "max_s": g["time_s"].max(),
        "max_over_median": g["time_s"].max() / g["time_s"].median(),
        "median_ratio_to_exact": g["ratio"].median(), "max_ratio_to_exact": g["ratio"].max(),
        "store_bytes_per_person_after": g["store_bytes_per_person"].last(),
        "snapshots": shrank}).reset_index()


def across_runs(table: pd.DataFrame) -> pd.DataFrame:
    """Minimum, median and maximum over the runs of each figure, per compaction mode."""
    rows = []
    for mode, part in table.groupby("compaction", sort=False):
        for stat in ("min", "median", "max"):
            row = {"compaction": mode, "over runs": stat}
            for col in ("median_s", "max_s", "max_over_median", "median_ratio_to_exact",
                        "max_ratio_to_exact"):
                row[col] = float(getattr(part[col], stat)())
            rows.append(row)
    return pd.DataFrame(rows)


def _markdown(table: pd.DataFrame) -> str:
    cells = [[f"{v:.3g}" if isinstance(v, float) else str(v) for v in r] for r in table.to_numpy()]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--stem", default="bench_proper_tail")
    ap.add_argument("--runs", type=int, default=1, help="repeat the whole measurement")
    args = ap.parse_args(argv)
    df = make_frame(args.rows)
    load0 = os.getloadavg()[0]
    parts = []
    for k in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="dprivacy_tail_") as tmp:
            for bg in (False, True):
                part = run(df, bg, args.queries, Path(tmp))
                part.insert(0, "run", k)
                parts.append(part)
    res = pd.concat(parts)
    args.out.mkdir(parents=True, exist_ok=True)
    res.to_csv(args.out / f"{args.stem}.csv", index=False)
    table = summary(res)
    if args.runs == 1:
        table = table.drop(columns="run")
    load = os.getloadavg()[0]
    md = (f"# ProPer durable count, {args.queries} queries in a row, {args.rows:,} people\n\n"
          f"Load average at the start {load0:.1f}, at the end {load:.1f} (2 cores).\n\n"
          + _markdown(table) + "\n")
    if args.runs > 1:
        md += (f"\nOver the {args.runs} runs:\n\n" + _markdown(across_runs(table)) + "\n")
    (args.out / f"{args.stem}.md").write_text(md, encoding="utf-8")
    print(md)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return table
    fig, ax = plt.subplots(figsize=(7, 3.5))
    res = res[res["run"] == res["run"].max()]  # the last run
    for name, part in res.groupby("compaction", sort=False):
        ax.plot(part["query"], part["time_s"], marker=".", lw=1, label=f"compaction {name}")
    ax.plot(res["query"].unique(), res.groupby("query")["exact_s"].median(), color="grey",
            lw=1, ls="--", label="DuckDB exact count")
    ax.set_xlabel("query")
    ax.set_ylabel("seconds")
    ax.set_title(f"ProPer durable count at {args.rows:,} people")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / f"{args.stem}.png", dpi=110)
    return table


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
