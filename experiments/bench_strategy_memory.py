"""Peak memory and time of strategy designs from the command line, and the (w, beta) refusal.

Each case runs ``dprivacy design`` (or a short Python call) in a fresh subprocess and reads its
peak resident set size from ``resource.getrusage(RUSAGE_CHILDREN)`` (``ru_maxrss``, the largest
child so far: the cases run in increasing order of size, each in its own process started by a
fresh ``python -c`` wrapper, so the figure is that case's own peak):

* all ranges of 256 points (``--workload ranges``, never written out), target <= 1 GB and 20 s;
* the same 32 896 x 256 workload written out as a CSV file (``--queries``), target <= 2 GB;
* all ranges of 1024 points (``--workload ranges``), target <= 2 GB;
* the exact (w, beta) design of all 90 000 rectangles of a 24 x 24 grid: refused, target
  <= 10 s (and the refusal names the strategy route).

Run: ``python -m experiments.bench_strategy_memory`` (``--quick``: 64 and 128 points only).
Writes ``experiments/results/bench_strategy_memory.csv`` and ``.md`` with the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"

#: runs ``argv`` in a subprocess and prints "<seconds> <peak RSS bytes> <exit code>"
_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t0 = time.perf_counter()\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,\n"
    "                    text=True).returncode\n"
    "t = time.perf_counter() - t0\n"
    "print(t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, rc)\n"
)

_REFUSE = (
    "import numpy as np, scipy.sparse as sp, dprivacy as dp\n"
    "from dprivacy.implicit_workload import ImplicitWorkload\n"
    "R = ImplicitWorkload.all_ranges(24).to_workload().F\n"
    "W = dp.Workload(sp.csr_array(sp.kron(R, R)))\n"
    "U = dp.Universe.from_points(np.array([[a, b] for a in range(24) for b in range(24)], float))\n"
    "try:\n"
    "    dp.design(W, U, dp.metrics.Euclidean(1.0), method='exact')\n"
    "except dp.errors.DPrivacyError as exc:\n"
    "    assert '--method strategy' in str(exc), exc\n"
    "    raise SystemExit(7)\n"
)


def measure(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in GB, exit code) of ``argv`` run in a fresh wrapper process."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True,
                         check=True, env={**os.environ, "TQDM_DISABLE": "1"})
    t, rss, rc = out.stdout.split()
    return float(t), int(rss) / 1e9, int(rc)


def design_argv(n: int, out: Path, queries: Path | None = None) -> list[str]:
    work = ["--queries", str(queries)] if queries else ["--workload", "ranges"]
    return [sys.executable, "-m", "dprivacy", "design", "--universe", f"builtin:line:{n}",
            "--metric", "euclidean", "--param", "eps_per_unit=1", *work, "--method", "strategy",
            "--out", str(out)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 and 128 points only")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sizes = [64, 128] if args.quick else [256, 1024]
        for n in sizes:
            t, gb, rc = measure(design_argv(n, folder / f"r{n}.json"))
            rows.append({"case": f"strategy, all ranges of {n} points (--workload ranges)",
                         "m": n * (n + 1) // 2, "N": n, "seconds": t, "peak_rss_gb": gb,
                         "exit": rc, "target": "<= 1 GB, <= 20 s" if n == 256 else
                         ("<= 2 GB" if n == 1024 else "")})
            print(rows[-1], flush=True)
        n = sizes[0]
        import dprivacy as dp
        from dprivacy.implicit_workload import ImplicitWorkload

        path = folder / f"ranges{n}.csv"
        dp.Workload(ImplicitWorkload.all_ranges(n).to_workload().F).to_csv(path)
        t, gb, rc = measure(design_argv(n, folder / f"f{n}.json", queries=path))
        rows.append({"case": f"strategy, all ranges of {n} points written out (--queries CSV)",
                     "m": n * (n + 1) // 2, "N": n, "seconds": t, "peak_rss_gb": gb, "exit": rc,
                     "target": "<= 2 GB" if n == 256 else ""})
        print(rows[-1], flush=True)
        t, gb, rc = measure([sys.executable, "-c", _REFUSE])
        rows.append({"case": "exact (w, beta), all 90 000 rectangles of 24 x 24: refused",
                     "m": 90_000, "N": 576, "seconds": t, "peak_rss_gb": gb, "exit": rc,
                     "target": "refused (exit 7 here) in <= 10 s"})
        print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    stem = "bench_strategy_memory" + ("_quick" if args.quick else "")
    table.to_csv(RESULTS / f"{stem}.csv", index=False)
    lines = ["# Strategy designs from the command line: peak memory and time", "",
             f"Load average at the end: {load:.1f} (2 cores, shared machine). Peak RSS: "
             "getrusage(RUSAGE_CHILDREN) of a wrapper around each command.", "",
             "| case | m | N | seconds | peak RSS (GB) | exit | target |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['m']} | {r['N']} | {r['seconds']:.1f} | "
                     f"{r['peak_rss_gb']:.2f} | {r['exit']} | {r['target']} |")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
