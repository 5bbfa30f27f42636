"""Pricing a product randomiser at publish and on a device: time against the number of coordinates.

Run:  python -m experiments.bench_local_publish [--reps R]

A one-hot product query of one shared 2x2 bit matrix is ~170 bytes of JSON whatever its
``length``; the aggregator parses, caps, builds and prices it when it is published
(:meth:`dprivacy.local.aggregator.store.AggregatorStore.publish`, in memory), and every device
parses and prices it again before it answers (:meth:`dprivacy.local.query.Query.from_dict`,
then one draw :meth:`ProductRandomiser.apply`). Rows: the shared matrix and, for comparison,
the same number of coordinates given as distinct matrices (a query of ~22 bytes per coordinate)
and ``domain="all"``. Each figure is the median of ``--reps`` runs. Writes
experiments/results/bench_local_publish.csv (kind, domain, length, json_bytes, publish_ms,
device_ms, cost) and prints it with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dprivacy.local.aggregator.store import AggregatorStore
from dprivacy.local.query import Query

OUT = Path(__file__).resolve().parent / "results" / "bench_local_publish.csv"
BIT = [[0.75, 0.25], [0.25, 0.75]]


def body(qid: str, length: int, shared: bool, domain: str) -> dict:
    mats = BIT if shared else [BIT] * length
    return {"id": qid, "T": {"kind": "product", "matrices": mats, "length": length, "domain": domain},
            "pre": {"builtin": "one_hot"}, "fields": ["x"], "params": {"categories": list(range(3))}}


def one(length: int, shared: bool, domain: str, reps: int) -> dict:
    store = AggregatorStore()
    publish, device = [], []
    cost = float("nan")
    text = ""
    for r in range(reps):
        b = body(f"q{r}", length, shared, domain)
        text = json.dumps(b, separators=(",", ":"))
        t0 = time.perf_counter()
        store.publish("bench", json.loads(text))
        publish.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        q = Query.from_dict(json.loads(text))
        cost = q.T.cost()
        v = [0] * length
        v[length // 2] = 1
        q.T.apply(v, np.random.default_rng(r))
        device.append(time.perf_counter() - t0)
    store.close()
    return {"kind": "shared" if shared else "distinct", "domain": domain, "length": length,
            "json_bytes": len(text), "publish_ms": 1e3 * float(np.median(publish)),
            "device_ms": 1e3 * float(np.median(device)), "cost": cost}


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    rows = []
    for length in (1024, 8192, 65536):
        rows.append(one(length, True, "one_hot", args.reps))
        rows.append(one(length, True, "all", args.reps))
        rows.append(one(length, False, "one_hot", args.reps))
    df = pd.DataFrame(rows)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT, index=False)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return df


if __name__ == "__main__":
    main()
