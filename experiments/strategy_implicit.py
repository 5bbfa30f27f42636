"""Implicit workloads: every range of a line and every rectangle of a grid, never materialised.

All ranges of a line of N points are N (N + 1) / 2 queries whose sparse matrix holds
N (N + 1) (N + 2) / 6 entries (1.8e8, about 2 GB, at N = 1024); all rectangles of a 32 x 32 grid
are 278 784 queries with 4.6e7 entries.  The 64 x 64 grid (N = 4096) is beyond the dense
polish: its strategy is the best of the cells alone and the shifted blocks
(:mod:`solvers.strategy.shifted_blocks`).  :class:`dprivacy.ImplicitWorkload` gives the optimiser
only the closed-form Gram matrix F'F, answers from the estimated histogram with prefix sums and
the variance of every answer from the estimate's covariance (docs/theory.md, "Strategy
mechanisms").  For each workload the script reports the design time, the expected total squared
error of the strategy against the eps_min-DP baseline and the identity strategy (each cell
measured once, the budget of its closest pair), the time of one release and of the m per-query
variances, the explicit matrix's entries (what the implicit form avoids), and the strategy's
largest ratio ||A (e_i - e_j)||_1 / eps_ij checked independently (every pair up to N = 2048,
else every edge and 200 000 random pairs).  Metric: Euclidean, eps = 0.1 per unit.

Run:  python -m experiments.strategy_implicit [--quick]
Output: strategy_implicit.csv, strategy_implicit.md and strategy_implicit.png (the standard
deviation of every range answer against the range's length, on the largest line).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy import metrics
from experiments import _common as C
from experiments.strategy_vs_scaling import independent_ratio

NAME = "strategy_implicit"


def _explicit_entries(W: dp.ImplicitWorkload) -> int:
    """Non-zero entries of the written-out matrix: sum of the query lengths (areas)."""
    def ranges(n: int) -> int:
        return n * (n + 1) * (n + 2) // 6
    if W.kind == "prefixes":
        return W.N * (W.N + 1) // 2
    if W.kind == "ranges":
        return ranges(W.N)
    nx, ny = W.shape_
    return ranges(nx) * ranges(ny)


def cases(quick: bool) -> list[tuple[str, dp.ImplicitWorkload, dp.Universe, float]]:
    """(name, workload, universe, time limit of the design in seconds)."""
    lines = (64, 256) if quick else (256, 1024, 2048)
    grids = (8,) if quick else (16, 32, 64)
    out = []
    for n in lines:
        U = dp.Universe.from_points(np.arange(n, dtype=float)[:, None])
        out.append((f"line {n}, all ranges", dp.ImplicitWorkload.all_ranges(n), U,
                    20.0 if quick else 120.0))
    for g in grids:
        U = dp.Universe.from_points(np.array([[a, b] for a in range(g) for b in range(g)], float))
        out.append((f"grid {g}x{g}, all rectangles", dp.ImplicitWorkload.all_rectangles(g, g), U,
                    20.0 if quick else 240.0))
    return out


def identity_error(W: dp.ImplicitWorkload, U: dp.Universe, M: metrics.Metric) -> float:
    """Each cell measured once with Lap(2 / eps_min) (the total known): 2 (2/eps_min)^2
    tr(P G P), P the projection orthogonal to 1."""
    G = W.gram()
    Gc = G - G.mean(axis=0, keepdims=True)
    Gc = Gc - Gc.mean(axis=1, keepdims=True)
    return 2.0 * (2.0 / M.eps_min(U)) ** 2 * float(np.trace(Gc))


def run(quick: bool = False, seed: int = 0, outdir: Path = C.RESULTS_DIR) -> pd.DataFrame:
    M = metrics.Euclidean(0.1)
    rows = []
    spread: tuple[str, np.ndarray, np.ndarray] | None = None
    for name, W, U, limit in C.progress(cases(quick), "workloads"):
        t0 = time.perf_counter()
        d = dp.design_strategy(W, U, M, time_limit=limit, rounds=2 if quick else 20)
        t_design = time.perf_counter() - t0
        mech = dp.StrategyMechanism(W, d, universe=U, metric=M)
        x = np.random.default_rng(seed).integers(0, 20, W.N)
        t0 = time.perf_counter()
        ans = mech.release(x, rng=seed, secure=True, accountant=dp.Accountant(total=np.inf))
        t_release = time.perf_counter() - t0
        t0 = time.perf_counter()
        var = mech.query_variances()
        t_var = time.perf_counter() - t0
        assert ans.shape == (W.m,) and var.shape == (W.m,)
        if W.kind == "ranges":
            a, b = np.triu_indices(W.N)
            spread = (name, b - a + 1, np.sqrt(var))
        rows.append({"workload": name, "N": W.N, "m": W.m, "explicit_entries": _explicit_entries(W),
                     "design_s": t_design, "release_s": t_release, "variances_s": t_var,
                     "identity_error": identity_error(W, U, M),
                     "strategy_error": float(var.sum()),
                     "lower_bound": d.lower_bound if d.lower_bound is not None else np.nan,
                     "start": d.report.get("start"),
                     "max_ratio": independent_ratio(d.strategy, U, M, seed)})
        C.write_csv(pd.DataFrame(rows), outdir, NAME)
    df = pd.DataFrame(rows)
    C.write_csv(df, outdir, NAME)
    write_markdown(df, outdir, quick)
    if spread is not None:
        plot(*spread, outdir)
    return df


def plot(name: str, length: np.ndarray, sd: np.ndarray, outdir: Path) -> None:
    """Standard deviation of every range answer against its length (a random 20 000)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pick = np.random.default_rng(0).choice(length.size, min(20_000, length.size), replace=False)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.scatter(length[pick], sd[pick], s=2, alpha=0.4)
    ax.set_xlabel("range length")
    ax.set_ylabel("standard deviation of the answer")
    ax.set_title(f"{name}: {length.size} answers from one strategy release")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(Path(outdir) / f"{NAME}.png", dpi=120)
    plt.close(fig)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    out = df[["workload", "m", "design_s", "release_s", "variances_s", "identity_error",
              "strategy_error", "max_ratio"]].copy()
    out["identity/strategy"] = df["identity_error"] / df["strategy_error"]
    return out


def write_markdown(df: pd.DataFrame, outdir: Path, quick: bool) -> None:
    def g(v: float) -> str:
        return "" if not np.isfinite(v) else f"{v:.4g}"
    lines = [
        "# Implicit workloads: all ranges and all rectangles, never materialised",
        "",
        f"One run of `python -m experiments.strategy_implicit{' --quick' if quick else ''}` on the "
        "2-core development machine; Euclidean metric, eps = 0.1 per unit.  `explicit entries`: "
        "the non-zeros the written-out query matrix would hold.  `identity`: each cell measured "
        "once at the budget of its closest pair.",
        "",
        "| workload | N | m | explicit entries | design s | release s | m variances s | identity "
        "error | strategy error | identity/strategy | lower bound | start | max ratio "
        "(independent) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        lines.append(f"| {r['workload']} | {r['N']} | {r['m']} | {r['explicit_entries']:.3g} | "
                     f"{r['design_s']:.1f} | {r['release_s']:.2f} | {r['variances_s']:.2f} | "
                     f"{g(r['identity_error'])} | {g(r['strategy_error'])} | "
                     f"{r['identity_error'] / r['strategy_error']:.3g} | {g(r['lower_bound'])} | "
                     f"{r['start']} | {r['max_ratio']:.12g} |")
    Path(outdir).mkdir(parents=True, exist_ok=True)
    (Path(outdir) / f"{NAME}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    return C.main(NAME, __doc__, run, summarize, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
