"""``dprivacy budgets --config service.toml``: the data owner's view of a service's budgets.

It reads the service's state directory (the durable budget stores, never the records) and
prints, per source: for a PINQ source each analyst's initial budget, what they spent, what is
left and how many charges they made; for a ProPer source how many people have how much of their
own budget left (a distribution, not one line per person), and how many queries were committed.
``--out FILE.csv|FILE.parquet`` writes the same numbers as a table.

This is the owner's command: it runs where the state directory is, and nothing of it is served
over HTTP (analysts see only their own PINQ budget, ``remaining_budget()``). It may run while
the service is serving: both stores are made to be shared by processes, and this command only
reads them (it creates nothing for a source that was never served). The personal budgets of a
source read through Spark are aggregated by a local Spark session from their directory (which
is mounted on the service's machine: it must be POSIX); no person's budget is printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from dprivacy.cli.exits import InputError, UsageError

#: The ProPer distribution's rows: (label, lower share, upper share) of each person's own
#: initial budget left; "none" and "all" are exact.
BUCKETS = (("none (exhausted)", None, 0.0), ("(0%, 25%]", 0.0, 0.25), ("(25%, 50%]", 0.25, 0.5),
           ("(50%, 75%]", 0.5, 0.75), ("(75%, 100%)", 0.75, 1.0), ("all (untouched)", 1.0, None))

COLUMNS = ["source", "kind", "unit", "analyst", "left", "people", "initial", "spent", "remaining",
           "charges"]


def _pinq_rows(cfg: Any, src: Any) -> list[dict[str, Any]]:
    from dprivacy.service.sources import pinq_record
    from dprivacy.tables import Ledger

    path = cfg.state_dir / "pinq.sqlite"
    stored: dict[str, tuple[float, float, int]] = {}
    if path.is_file():
        led = Ledger(path)
        try:
            zcdp = "zcdp:" if src.notion == "zcdp" else ""
            for name, init, rem, n in led.named_budgets(f"pinq:{zcdp}{src.name}/"):
                stored[name] = (init, rem, n)
        finally:
            led.close()
    rows = []
    for a in cfg.analysts:
        if not a.may_use(src.name):
            continue
        init, rem, n = stored.get(f"pinq:{pinq_record(src.name, a.name, src.notion)}",
                                  (float(src.budget or 0.0), float(src.budget or 0.0), 0))
        rows.append({"source": src.name, "kind": "pinq", "unit": _unit(src), "analyst": a.name,
                     "left": None,
                     "people": None, "initial": init, "spent": init - rem, "remaining": rem,
                     "charges": n})
    return rows


def _unit(src: Any) -> str:
    """What a PINQ source's budget counts: ε, or ρ for a zCDP source."""
    return "rho" if src.notion == "zcdp" else "eps"


def proper_store(cfg: Any, source: str) -> Path:
    """The file of a ProPer source's personal budgets (as the service's owner opens it)."""
    return Path(cfg.state_dir) / f"proper-{source}.duckdb"


def _proper_rows(cfg: Any, src: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from dprivacy.tables.budgets.ledger import _PER_EPS
    from dprivacy.tables.budgets.slot_store import SlotStore

    if src.engine == "spark":
        return _spark_proper_rows(cfg, src)
    path = proper_store(cfg, src.name)
    if not path.is_file():
        return [], {"people": 0, "queries": 0, "served": False}
    store = SlotStore(path)
    try:
        with store.locked() as s:
            init = s.initial.astype(float) / _PER_EPS
            rem = s.remaining.astype(float) / _PER_EPS
            queries = len(s.queries)
    finally:
        store.close()
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(init > 0, rem / np.where(init > 0, init, 1.0), 0.0)
    rows = []
    for label, lo, hi in BUCKETS:
        if lo is None:
            m = rem <= 0
        elif hi is None:
            m = (rem >= init) & (rem > 0)
        else:  # part left: 0 < rem < init, so the share lies in (0, 1)
            m = (rem > 0) & (rem < init) & (share > lo) & (share <= hi)
        rows.append({"source": src.name, "kind": "proper", "unit": "eps", "analyst": None,
                     "left": label,
                     "people": int(m.sum()), "initial": float(init[m].sum()),
                     "spent": float((init[m] - rem[m]).sum()), "remaining": float(rem[m].sum()),
                     "charges": None})
    summary = {"people": int(rem.size), "queries": queries, "served": True,
               "min": float(rem.min()) if rem.size else 0.0,
               "median": float(np.median(rem)) if rem.size else 0.0,
               "max": float(rem.max()) if rem.size else 0.0,
               "spent": float((init - rem).sum())}
    return rows, summary


def _spark_proper_rows(cfg: Any, src: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The distribution of a Spark source's personal budgets, aggregated by a local Spark
    session from its SparkBudgetTable or SparkSlotBudgets (the directory is mounted here: it
    must be POSIX)."""
    path = Path(cfg.spark.budget_dir) / f"proper-{src.name}"
    if not (path / "_commits").is_dir():
        return [], {"people": 0, "queries": 0, "served": False}
    from pyspark.sql import functions as F

    from dprivacy.tables.budgets.ledger import _PER_EPS
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
    from dprivacy.tables.budgets.spark_slots import SparkSlotBudgets
    from dprivacy.tables.relations.engine.spark import local_session

    kind = SparkSlotBudgets if cfg.spark.budgets == "slots" else SparkBudgetTable
    store = kind(path, session=local_session(2))
    try:
        f = store.frame().select((F.col("initial") / _PER_EPS).alias("i"),
                                 (F.col("remaining") / _PER_EPS).alias("r"))
        queries = len(store.queries())
        share = F.when(F.col("i") > 0, F.col("r") / F.col("i")).otherwise(F.lit(0.0))
        aggs = []
        for k, (_label, lo, hi) in enumerate(BUCKETS):
            if lo is None:
                m = F.col("r") <= 0
            elif hi is None:
                m = (F.col("r") >= F.col("i")) & (F.col("r") > 0)
            else:
                m = (F.col("r") > 0) & (F.col("r") < F.col("i")) & (share > lo) & (share <= hi)
            aggs += [F.count(F.when(m, 1)).alias(f"n{k}"),
                     F.sum(F.when(m, F.col("i"))).alias(f"i{k}"),
                     F.sum(F.when(m, F.col("r"))).alias(f"r{k}")]
        aggs += [F.count(F.lit(1)).alias("people"), F.min("r").alias("min"),
                 F.percentile(F.col("r"), F.lit(0.5)).alias("median"), F.max("r").alias("max"),
                 F.sum(F.col("i") - F.col("r")).alias("spent")]
        got = f.agg(*aggs).first().asDict()
    finally:
        store.close()
    rows = []
    for k, (label, _lo, _hi) in enumerate(BUCKETS):
        init, rem = float(got[f"i{k}"] or 0.0), float(got[f"r{k}"] or 0.0)
        rows.append({"source": src.name, "kind": "proper", "unit": "eps", "analyst": None,
                     "left": label, "people": int(got[f"n{k}"]), "initial": init,
                     "spent": init - rem, "remaining": rem, "charges": None})
    summary = {"people": int(got["people"]), "queries": queries, "served": True,
               **{k: float(got[k] or 0.0) for k in ("min", "median", "max", "spent")}}
    return rows, summary


def _g(x: float) -> str:
    return f"{x:.10g}"


def cmd_budgets(args: argparse.Namespace) -> int:
    from dprivacy.service.config import load_config

    cfg = load_config(args.config)
    names = args.source or [s.name for s in cfg.sources]
    unknown = [n for n in names if cfg.source(n) is None]
    if unknown:
        raise UsageError(f"--source {unknown[0]!r} is not a source of {args.config}; sources: "
                         f"{', '.join(s.name for s in cfg.sources)}")
    out_rows: list[dict[str, Any]] = []
    print(f"budgets of {args.config} (state in {cfg.state_dir})")
    for n in names:
        src = cfg.source(n)
        assert src is not None
        if src.kind == "pinq":
            rows = _pinq_rows(cfg, src)
            what = "zCDP rho" if _unit(src) == "rho" else "eps"
            print(f"\nsource {n} (PINQ, each analyst's budget: {what} {_g(src.budget or 0.0)})")
            print(f"  {'analyst':<20} {'initial':>10} {'spent':>10} {'remaining':>10} "
                  f"{'charges':>8}")
            for r in rows:
                print(f"  {r['analyst']:<20} {_g(r['initial']):>10} {_g(r['spent']):>10} "
                      f"{_g(r['remaining']):>10} {r['charges']:>8}")
        else:
            rows, s = _proper_rows(cfg, src)
            if not s["served"]:
                print(f"\nsource {n} (ProPer): no budget store yet (never served)")
            else:
                print(f"\nsource {n} (ProPer, {s['people']} people, {s['queries']} queries "
                      "committed)")
                print(f"  {'budget left (own share)':<24} {'people':>10}")
                for r in rows:
                    print(f"  {r['left']:<24} {r['people']:>10}")
                print(f"  remaining per person: min {_g(s['min'])}, median {_g(s['median'])}, "
                      f"max {_g(s['max'])}; spent in total {_g(s['spent'])}")
        out_rows += rows
    if args.out is not None:
        _write(out_rows, Path(args.out))
        print(f"\nwrote {len(out_rows)} rows to {args.out}")
    return 0


def _write(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd

    df = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("people", "charges"):
        df[c] = df[c].astype("Int64")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            df.to_csv(path, index=False)
        else:
            df.to_parquet(path, index=False)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _out_path(text: str) -> str:
    if Path(text).suffix.lower() not in (".csv", ".parquet"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a .csv or .parquet file name")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``budgets`` subcommand."""
    s = sub.add_parser("budgets", help="the data owner's view of a service's budgets",
                       description="Print what was spent of every budget of a query service "
                       "(dprivacy serve): each analyst's PINQ budget per source, and how many "
                       "people have how much of their ProPer budget left. Reads the service's "
                       "state directory; owner only (never served to analysts).")
    s.add_argument("--config", required=True, metavar="SERVICE.toml",
                   help="the service's configuration (its state_dir holds the budgets)")
    s.add_argument("--source", action="append", metavar="NAME",
                   help="only this source (repeatable; default: every source)")
    s.add_argument("--out", type=_out_path, default=None, metavar="FILE",
                   help="also write the numbers to FILE (.csv or .parquet)")
    s.set_defaults(func=cmd_budgets)
