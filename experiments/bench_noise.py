"""Per-sample cost of the floating-point-safe (OpenDP) versus fast (numpy) noise samplers.

Run:  python -m experiments.bench_noise [--quick] [--seed S]
Prints a table and writes experiments/results/bench_noise.csv with the columns
sampler, path, size, calls, seconds_per_call, us_per_sample, slowdown (secure / fast).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from dprivacy.noise import exponential_choice, laplace

RESULTS = Path(__file__).resolve().parent / "results"


def _time(fn: Callable[[], object], min_seconds: float) -> tuple[int, float]:
    """Call fn repeatedly for at least min_seconds (after one warm-up); return (calls, s/call)."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return calls, elapsed / calls


def run(quick: bool = False, seed: int = 0) -> pd.DataFrame:
    """Time laplace (vector sizes 1, 100, 10^4) and exponential_choice (10, 1000 candidates)."""
    min_s = 0.05 if quick else 0.5
    rng = np.random.default_rng(seed)
    cases: list[tuple[str, int, Callable[[bool], Callable[[], object]]]] = []
    for size in (1, 100, 10_000):
        cases.append(
            ("laplace", size, lambda s, n=size: lambda: laplace(1.0, size=n, rng=rng, secure=s))
        )
    for k in (10, 1000):
        lw = rng.normal(size=k) + 1e6

        def make_choice(s: bool, w: np.ndarray = lw) -> Callable[[], object]:
            return lambda: exponential_choice(w, rng=rng, secure=s)

        cases.append(("exponential_choice", k, make_choice))
    rows = []
    for sampler, size, make in tqdm(cases, desc="bench_noise"):
        for path, secure in (("secure", True), ("fast", False)):
            calls, per_call = _time(make(secure), min_s)
            per_sample = per_call / (size if sampler == "laplace" else 1)
            rows.append(
                {
                    "sampler": sampler,
                    "path": path,
                    "size": size,
                    "calls": calls,
                    "seconds_per_call": per_call,
                    "us_per_sample": per_sample * 1e6,
                }
            )
    df = pd.DataFrame(rows)
    fast = df[df.path == "fast"].set_index(["sampler", "size"])["us_per_sample"]
    df["slowdown"] = [
        r.us_per_sample / fast[(r.sampler, r.size)] for r in df.itertuples(index=False)
    ]
    return df


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short timing windows (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    df = run(quick=args.quick, seed=args.seed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_noise.csv"
    df.to_csv(out, index=False)
    print(
        "per-sample cost (µs); for exponential_choice one sample = one choice among `size` "
        "candidates"
    )
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
