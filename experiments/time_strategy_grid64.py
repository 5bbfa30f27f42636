"""Time the strategy design of all 2 178 400 rectangles of a 64 x 64 grid (Euclidean, 1 per unit).

Run: ``python -m experiments.time_strategy_grid64``; prints the design time, error, best start,
peak RSS and the load average (the machine is shared: state the load with any figure).
"""

import time, os, resource
import numpy as np, dprivacy as dp
from dprivacy.implicit_workload import ImplicitWorkload
n = 64
U = dp.Universe.from_points(np.array([[a, b] for a in range(n) for b in range(n)], float))
W = ImplicitWorkload.all_rectangles(n, n)
t0 = time.perf_counter()
d = dp.design_strategy(W, U, dp.metrics.Euclidean(1.0))
t1 = time.perf_counter()
print(f"64x64 all rectangles: design {t1 - t0:.1f} s, error {d.expected_squared_error():.6g}, "
      f"start {d.report['start']}, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB, "
      f"load {os.getloadavg()[0]:.1f}")
