"""Shared plumbing of the reproduction scripts: arguments, output files, the single-query IF.

Every script exposes ``run(quick, seed, outdir) -> pandas.DataFrame``, prints its table, and
writes ``<name>.csv`` and ``<name>.png`` under ``outdir`` (default ``experiments/results/``).

The single-query improvement factor (paper §4.1; docs/theory.md) is computed for a whole batch of queries at
once: with w = 1 the optimal precision of query k is ``beta*_k = 1 / c_k`` where
``c_k = max_ij |F_ki - F_kj| / eps_ij`` (its Lipschitz constant w.r.t. d_X), and
``IF_k = beta*_k * Delta f_k / eps_min``.  Privacy condition: ``beta_k |F_ki - F_kj| <= eps_ij`` for
all pairs, which holds with equality on the arg-max pair.  The batch path is cross-checked against
``dprivacy.design(..., method="closed_form")`` and ``dprivacy.improvement_factor`` on the first
queries of every batch (:func:`check_against_design`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from tqdm import tqdm  # noqa: E402

import dprivacy as dp  # noqa: E402
from dprivacy.metrics.base import Metric  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: --quick runs write here by default, so they never overwrite the full run's committed results.
QUICK_DIR = RESULTS_DIR / "quick"
#: Memory budget of the blocked pair scans (4 workers share the machine).
SCAN_BYTES = 2**26
#: Resolution of every figure the scripts write (dots per inch).
DPI = 120

T = TypeVar("T")


def progress(it: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    """A tqdm bar on stderr; ``TQDM_DISABLE=1`` in the environment silences it (tqdm reads it)."""
    return tqdm(it, desc=desc, total=total, leave=False)


# --------------------------------------------------------------------------- single queries
def lipschitz(F: np.ndarray, U: dp.Universe, M: Metric) -> np.ndarray:
    """c_k = max_ij |F_ki - F_kj| / eps_ij per row (paper §4.1), by a blocked scan of all pairs."""
    cs = M.constraint_set(U)
    c, _, _ = cs.row_lipschitz(np.asarray(F, dtype=float), memory_bytes=SCAN_BYTES)
    return c


def single_query_if(F: np.ndarray, U: dp.Universe, M: Metric) -> pd.DataFrame:
    """Closed-form design of every row of F as its own single query (w = 1, paper §4.1).

    Returns one row per query with ``noise_scale`` = 1/beta* (designed Laplace scale),
    ``baseline_scale`` = Delta f / eps_min (the eps_min-DP Laplace baseline, Definition 4) and
    ``IF`` = their ratio (the paper's improvement factor; >= 1 always).
    """
    F = np.atleast_2d(np.asarray(F, dtype=float))
    c = lipschitz(F, U, M)
    eps_min = M.eps_min(U)
    rng_f = np.ptp(F, axis=1)
    baseline = rng_f / eps_min
    with np.errstate(divide="ignore", invalid="ignore"):
        IF = np.where(c > 0, baseline / c, np.inf)
    return pd.DataFrame({"query": np.arange(F.shape[0]), "noise_scale": c,
                         "baseline_scale": baseline, "IF": IF})


def check_against_design(F: np.ndarray, U: dp.Universe, M: Metric, table: pd.DataFrame,
                         k: int = 2) -> None:
    """Re-derive the first ``k`` rows of ``table`` with the public API and raise on a mismatch."""
    for q in range(min(k, F.shape[0])):
        W = dp.Workload(F[q:q + 1])
        d = dp.design(W, U, M, method="closed_form")
        IF = float(dp.improvement_factor(W, U, M, d))
        got = float(table["IF"].iloc[q])
        if not np.isclose(IF, got, rtol=1e-9):
            raise AssertionError(f"query {q}: batch IF {got} != design() IF {IF}")


def cities_universe() -> tuple[dp.Universe, pd.DataFrame]:
    """The shipped US cities (810, GeoNames) as a point universe with (latitude, longitude)
    coordinates and ``"name, ST"`` element names; the cities table in universe order."""
    from dprivacy.data import load_us_cities

    cities = load_us_cities()
    names = (cities["name"] + ", " + cities["state"]).tolist()
    U = dp.Universe.from_points(cities[["latitude", "longitude"]].to_numpy(), names=names)
    return U, cities


#: The metrics of the real-data experiments: the geodesic distance (km) at two budgets per km
#: (IF must not depend on it), and the paper's Euclidean distance on (longitude, latitude) degrees.
def city_metrics() -> list[tuple[str, float, Metric]]:
    return [("geodesic", 0.01, dp.metrics.Geodesic(eps_per_km=0.01)),
            ("geodesic", 0.1, dp.metrics.Geodesic(eps_per_km=0.1)),
            ("euclidean_lonlat", 1.0, dp.metrics.Euclidean(eps_per_unit=1.0))]


# --------------------------------------------------------------------------- CLI and output
def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m experiments.{name}", description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: runs in seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    p.add_argument("--outdir", type=Path, default=None,
                   help="where CSV and PNG go (default experiments/results/, with --quick "
                        "experiments/results/quick/)")
    return p


def main(name: str, doc: str | None, run: Callable[..., pd.DataFrame],
         summarize: Callable[[pd.DataFrame], pd.DataFrame],
         argv: Sequence[str] | None = None) -> pd.DataFrame:
    """Parse --quick/--seed/--outdir, run, print the summary table and the wall time."""
    args = parser(name, doc).parse_args(argv)
    outdir = args.outdir or default_outdir(args.quick)
    t0 = time.perf_counter()
    df = run(quick=args.quick, seed=args.seed, outdir=outdir)
    print(format_table(summarize(df)))
    print(f"[{name}] {time.perf_counter() - t0:.1f} s; wrote {outdir / (name + '.csv')} "
          f"and {name}.png")
    return df


def default_outdir(quick: bool) -> Path:
    """experiments/results/ for full runs, experiments/results/quick/ for --quick runs."""
    return QUICK_DIR if quick else RESULTS_DIR


def format_table(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def write_csv(df: pd.DataFrame, outdir: Path, name: str) -> Path:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


def save_figure(fig: plt.Figure, outdir: Path, name: str) -> Path:
    """Write ``<name>.png`` at the common resolution :data:`DPI` and close the figure.

    Figures made with ``layout="constrained"`` (e.g. for a legend outside the axes) keep their
    layout; the others get ``tight_layout``.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{name}.png"
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def integer_ticks(axis) -> None:  # noqa: ANN001
    """Counts get whole-number ticks (``ax.yaxis`` or ``ax.xaxis``)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def legend_outside(fig: plt.Figure, ax: plt.Axes, ncols: int = 2) -> None:
    """One legend below the axes, so that it can never hide data (needs a constrained layout)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8,
               frameon=False)


def if_histogram(values: np.ndarray, title: str, outdir: Path, name: str,
                 xlabel: str = "improvement factor IF") -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    v = np.asarray(values, dtype=float)
    ax.hist(v[np.isfinite(v)], bins=40, color="#3a6ea5", edgecolor="white")
    ax.axvline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("number of queries")
    integer_ticks(ax.yaxis)
    ax.set_title(title, fontsize=10)
    return save_figure(fig, outdir, name)


def if_stats(values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    return {"queries": int(v.size), "mean_IF": float(v.mean()), "median_IF": float(np.median(v)),
            "min_IF": float(v.min()), "max_IF": float(v.max())}
