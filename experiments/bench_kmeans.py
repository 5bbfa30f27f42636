"""k-means in PINQ vs ProPer: time and peak memory (ProPer paper, 002 P-II §6.3, Fig. 5).

The ProPer paper ran k-means (4 dimensions, 4 centres, 5 iterations) in PINQ and in ProPer on a
growing number of records and reported ≈ 1.15× the time and ≈ 2× the memory for ProPer (no
numbers survive; spec PINQ_PROPER.md §6.8). Both runs below execute the same program: each
iteration partitions the records by their nearest centre and, per part, releases a noisy count
and a noisy sum per dimension (values in [-1, 1]); the new centre is sum / count.

* PINQ: ``Queryable.partition`` (parallel composition: 5ε per iteration in total).
* ProPer: ``ProPerTable.partition`` (selection principle: each record pays 5ε per iteration),
  personal budgets in the in-memory ledger (an int64 numpy array), provenance as an int64 array.

Time: minimum wall time over ``--repeats`` interleaved runs (table construction + 5 iterations; data
generation excluded). Memory: peak bytes traced by ``tracemalloc`` during a separate run, plus the
input frame (total = input + peak of new allocations). Noise uses the data owner's seeded path
(``noise_seed=1``) in both systems so that the comparison measures the accounting, not OpenDP.
The key function is a per-record Python callable (the pandas backend's analyst code), which
dominates the time of both systems.

Run: ``python -m experiments.bench_kmeans`` (10^4..10^5 records) or ``--quick`` (500, 2000).
Writes ``experiments/results/bench_kmeans.csv`` and ``.png``.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # single-threaded BLAS: steadier timings on a shared machine

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dprivacy.tables import ProPerTable, Queryable  # noqa: E402
from experiments import _common as C  # noqa: E402

DIMS, CENTRES, ITERATIONS = 4, 4, 5
COLS = [f"x{i}" for i in range(DIMS)]
EPS = 0.1
RESULTS = Path(__file__).resolve().parent / "results"


def make_data(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """n points around 4 true centres in [-1, 1]^4, and 4 public initial centres."""
    gen = np.random.default_rng(seed)
    true = gen.uniform(-0.7, 0.7, size=(CENTRES, DIMS))
    x = true[gen.integers(0, CENTRES, n)] + gen.normal(0, 0.15, size=(n, DIMS))
    df = pd.DataFrame(np.clip(x, -1, 1), columns=COLS)
    return df, gen.uniform(-0.5, 0.5, size=(CENTRES, DIMS))


def nearest(centres: np.ndarray) -> Callable[[Mapping[str, Any]], int]:
    """Per-record key function: index of the nearest centre (argmin of ||c||²/2 − x·c)."""
    cs = [tuple(float(v) for v in c) for c in centres]
    half_sq = [0.5 * sum(v * v for v in c) for c in cs]

    def key(r: Mapping[str, Any]) -> int:
        x = [r[c] for c in COLS]
        scores = [h - sum(a * b for a, b in zip(x, c, strict=True)) for h, c in zip(half_sq, cs,
                                                                                   strict=True)]
        return scores.index(min(scores))

    return key


def kmeans(table: Queryable | ProPerTable, centres: np.ndarray) -> np.ndarray:
    """The private k-means program, identical for both systems."""
    c = centres.copy()
    for _ in range(ITERATIONS):
        parts = table.partition(range(CENTRES), nearest(c))
        for k in range(CENTRES):
            part = parts[k]
            count = part.noisy_count(EPS)
            sums = np.array([part.noisy_sum(EPS, col, -1.0, 1.0) for col in COLS])
            if count > 1:
                c[k] = np.clip(sums / count, -1, 1)
    return c


def run(system: str, df: pd.DataFrame, centres: np.ndarray) -> np.ndarray:
    if system == "PINQ":
        table: Queryable | ProPerTable = Queryable(df, budget=10.0, noise_seed=1)
    else:
        table = ProPerTable(df, budget=10.0, noise_seed=1)
    return kmeans(table, centres)


def timed(system: str, df: pd.DataFrame, centres: np.ndarray) -> float:
    gc.collect()
    t0 = time.perf_counter()
    run(system, df, centres)
    return time.perf_counter() - t0


def peak_bytes(system: str, df: pd.DataFrame, centres: np.ndarray) -> int:
    gc.collect()
    tracemalloc.start()
    run(system, df, centres)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return int(peak + df.memory_usage(deep=True).sum())


def measure(df: pd.DataFrame, centres: np.ndarray, repeats: int) -> dict[str, tuple[float, int]]:
    """Interleaved runs (PINQ, ProPer, PINQ, ...) after one warm-up each; the minimum time is
    reported (the least disturbed run on a shared machine), and one traced run for memory."""
    systems = ("PINQ", "ProPer")
    for s in systems:
        timed(s, df, centres)
    times: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(repeats):
        for s in systems:
            times[s].append(timed(s, df, centres))
    return {s: (min(times[s]), peak_bytes(s, df, centres)) for s in systems}


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="500 and 2000 records, 1 repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    sizes = [500, 2000] if args.quick else [10**4, 10**5]
    repeats = 1 if args.quick else args.repeats
    rows = []
    for n in sizes:
        df, centres = make_data(n)
        res = measure(df, centres, repeats)
        rows.append(
            {
                "records": n,
                "pinq_time_s": res["PINQ"][0],
                "proper_time_s": res["ProPer"][0],
                "time_ratio": res["ProPer"][0] / res["PINQ"][0],
                "pinq_peak_mb": res["PINQ"][1] / 2**20,
                "proper_peak_mb": res["ProPer"][1] / 2**20,
                "memory_ratio": res["ProPer"][1] / res["PINQ"][1],
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.3f"), flush=True)
    table = pd.DataFrame(rows)
    stem = "bench_kmeans_quick" if args.quick else "bench_kmeans"
    C.write_csv(table, args.out, stem)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for system, t, m in (("PINQ", "pinq_time_s", "pinq_peak_mb"),
                         ("ProPer", "proper_time_s", "proper_peak_mb")):
        ax[0].loglog(table["records"], table[t], "o-", label=system)
        ax[1].loglog(table["records"], table[m], "o-", label=system)
    ax[0].set(xlabel="records", ylabel="time (s)", title="k-means: 4 dims, 4 centres, 5 iterations")
    ax[1].set(xlabel="records", ylabel="peak memory incl. input (MiB)", title="peak memory")
    for a in ax:
        a.legend()
    C.save_figure(fig, args.out, stem)
    print()
    print(table.to_string(index=False, float_format="%.3f"))
    return table


if __name__ == "__main__":
    main()
