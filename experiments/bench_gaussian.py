"""Gaussian noise: sampler throughput and per-query Gaussian designs against Laplace ones.

Run:  python -m experiments.bench_gaussian

* samplers: draws per second of the exact discrete Gaussian (OS CSPRNG) at several sigmas, and of
  OpenDP's floating-point-safe continuous Gaussian;
* designs: ``dp.design(..., noise="gaussian", rho=R)`` (the exact convex program in 1/sigma^2)
  against ``dp.design(..., method="exact")`` (Laplace), for workloads of the strategy benchmarks
  that a per-query design can take: the time, the expected squared error, and the error of the
  Gaussian design at rho = eps^2 / 2 next to the Laplace design's at eps = 1 per unit (the
  familiar "eps-DP implies eps^2/2-zCDP" exchange rate for d = 1; the two guarantees are of
  different kinds, so this is a reference point, not a ranking).

Writes experiments/results/bench_gaussian.csv and prints it with the load average.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.gaussian_noise import add_gaussian, discrete_gaussian

OUT = Path(__file__).resolve().parent / "results" / "bench_gaussian.csv"


def samplers() -> list[dict]:
    rows = []
    for sigma in (1.0, 10.0, 1000.0):
        n = 20000
        t = time.perf_counter()
        discrete_gaussian(sigma, n)
        s = time.perf_counter() - t
        rows.append({"part": "sampler", "name": f"discrete Gaussian sigma={sigma:g}", "N": n,
                     "m": 1, "seconds": s, "per_second": n / s})
    n = 20000
    t = time.perf_counter()
    add_gaussian(np.zeros(n), 3.0)
    s = time.perf_counter() - t
    rows.append({"part": "sampler", "name": "OpenDP continuous Gaussian", "N": n, "m": 1,
                 "seconds": s, "per_second": n / s})
    return rows


def workloads() -> list[tuple[str, dp.Workload, dp.Universe, dp.metrics.Metric]]:
    rng = np.random.default_rng(1)
    out = []
    pts = rng.random((150, 2))
    out.append(("150 random 2-D points, 10 dense queries", dp.Workload(rng.random((10, 150))),
                dp.Universe.from_points(pts), dp.metrics.Euclidean(1.0)))
    ranges = [tuple(sorted(rng.integers(0, 1024, 2))) for _ in range(200)]
    out.append(("1024-point line, 200 random ranges", dp.Workload.range_queries(1024, ranges),
                dp.Universe.from_points(np.arange(1024.0)), dp.metrics.Euclidean(1.0)))
    g = np.array([(i, j) for i in range(16) for j in range(16)], dtype=float)
    rects = []
    for _ in range(100):
        x0, x1 = sorted(rng.integers(0, 16, 2))
        y0, y1 = sorted(rng.integers(0, 16, 2))
        rects.append(((g[:, 0] >= x0) & (g[:, 0] <= x1) & (g[:, 1] >= y0) & (g[:, 1] <= y1))
                     .astype(float))
    out.append(("16x16 grid, 100 random rectangles", dp.Workload(np.array(rects)),
                dp.Universe.from_points(g), dp.metrics.Euclidean(1.0)))
    return out


def designs() -> list[dict]:
    import warnings

    rows = []
    for name, W, U, M in workloads():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            lap = dp.design(W, U, M, method="exact")
            tl = time.perf_counter() - t
            t = time.perf_counter()
            gau = dp.design(W, U, M, noise="gaussian", rho=0.5)
            tg = time.perf_counter() - t
        rows.append({"part": "design", "name": name, "N": U.N, "m": W.m,
                     "laplace_seconds": tl, "laplace_error": float(np.sum(2 * lap.noise_scale**2)),
                     "gaussian_seconds": tg, "gaussian_error": gau.expected_squared_error(),
                     "gaussian_max_ratio": gau.report["max_ratio"]})
    return rows


def main() -> None:
    load = os.getloadavg()[0]
    df = pd.DataFrame(samplers() + designs())
    df["load_average"] = load
    OUT.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT, index=False, float_format="%.6g")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))
    print(f"load average {load:.2f}; written to {OUT}")


if __name__ == "__main__":
    main()
