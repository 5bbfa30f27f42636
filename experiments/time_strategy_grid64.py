"""Time the strategy design of all 2 178 400 rectangles of a 64 x 64 grid (Euclidean, 1 per unit).

Run: ``python -m experiments.time_strategy_grid64``; prints the design time, error, best start,
peak RSS and the load average (the machine is shared: state the load with any figure).
"""

from __future__ import annotations

import os
import resource
import time

import numpy as np

import dprivacy as dp
from dprivacy.implicit_workload import ImplicitWorkload


def main(n: int = 64) -> str:
    """Design the strategy and return the line printed."""
    U = dp.Universe.from_points(np.array([[a, b] for a in range(n) for b in range(n)], float))  # noqa: N806
    W = ImplicitWorkload.all_rectangles(n, n)  # noqa: N806
    t0 = time.perf_counter()
    d = dp.design_strategy(W, U, dp.metrics.Euclidean(1.0))
    took = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return (f"{n}x{n} all rectangles: design {took:.1f} s, error "
            f"{d.expected_squared_error():.6g}, start {d.report['start']}, peak RSS {rss:.2f} GB, "
            f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    print(main())
