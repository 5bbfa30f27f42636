"""Optimal d_X-local randomiser (LP, exact and on a greedy spanner) vs planar Laplace and the
exponential mechanism at the same privacy, on a grid and on the shipped US cities.

For each setting (locations, ε per km, loss) the table gives the expected loss of each mechanism,
the ratio baseline / LP (> 1: the LP is better), the LP's size, solve time, status and the
certified lower bound on the optimum (column generation; a time-limited solve is repaired to be
private but may not be optimal). Two spanners of the 20 x 20 grid show the trade-off of the
dilation: 1.5 keeps only the axis edges and loses to planar Laplace, 1.1 adds the diagonals. The
cities are the N most populous shipped cities of one region, projected to km (equirectangular
around their mean); the prior is uniform. Privacy: every mechanism is ε·d-private (the LP's T is
checked over all triples; planar Laplace by post-processing)."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist

from dprivacy.data import load_us_cities
from dprivacy.local.baselines import exponential_randomiser, planar_laplace_loss
from dprivacy.local.cost import check_dx
from experiments._common import main as run_main
from experiments._common import save_figure, write_csv
from solvers.channels.optimal import solve_dx_lp
from solvers.channels.spanner import greedy_spanner

NAME = "local_optimal_vs_planar"
COLUMNS = ["setting", "N", "eps_per_km", "loss", "method", "expected_loss", "planar_loss",
           "planar_se", "exponential_loss", "ratio_planar", "ratio_exponential", "constraints",
           "seconds", "private", "lp_status", "lp_lower_bound", "dilation"]


def grid_points(side: int, spacing_km: float = 1.0) -> np.ndarray:
    return np.array([(i, j) for i in range(side) for j in range(side)], dtype=float) * spacing_km


def city_points(n: int) -> np.ndarray:
    """The n most populous shipped cities of California, in km (equirectangular projection)."""
    c = load_us_cities()
    c = c[c.state == "CA"].nlargest(n, "population")
    lat, lon = np.radians(c.latitude.to_numpy()), np.radians(c.longitude.to_numpy())
    r = 6371.0088
    return np.column_stack([r * (lon - lon.mean()) * np.cos(lat.mean()), r * (lat - lat.mean())])


def one(setting: str, pts: np.ndarray, eps_km: float, loss: str, method: str, dilation: float | None,
        seed: int, samples: int, time_limit: float | None) -> dict:
    d = cdist(pts, pts)
    L = d if loss == "distance" else d ** 2  # noqa: N806
    eps = eps_km * d
    t0 = time.perf_counter()
    edges = None
    if dilation is not None:
        i, j, _ = greedy_spanner(eps, dilation)
        edges = (i, j)
    r = solve_dx_lp(eps, L, edges=edges, dilation=dilation or 1.0, time_limit=time_limit)
    secs = time.perf_counter() - t0
    pl, se = planar_laplace_loss(pts, eps_km, L, samples=samples, rng=seed)
    em = float(np.mean(np.sum(exponential_randomiser(eps) * L, axis=1)))
    return {"setting": setting, "N": len(pts), "eps_per_km": eps_km, "loss": loss, "method": method,
            "expected_loss": r.expected_loss, "planar_loss": pl, "planar_se": se, "exponential_loss": em,
            "ratio_planar": pl / r.expected_loss, "ratio_exponential": em / r.expected_loss,
            "constraints": r.n_constraints, "seconds": secs, "private": bool(check_dx(r.T, eps).ok),
            "lp_status": str(r.info.get("status")),
            "lp_lower_bound": float(r.info.get("lower_bound", np.nan)),
            "dilation": dilation if dilation is not None else 1.0}


def run(quick: bool, seed: int, outdir: Path) -> pd.DataFrame:
    if quick:
        plan = [("grid", grid_points(4), "exact", None), ("cities", city_points(12), "exact", None),
                ("grid", grid_points(5), "spanner", 1.1)]
        eps_list, samples, limit = [0.5], 1000, 60.0
    else:
        plan = [("grid", grid_points(7), "exact", None), ("cities", city_points(40), "exact", None),
                ("grid", grid_points(10), "exact", None), ("cities", city_points(100), "exact", None),
                ("grid", grid_points(20), "spanner", 1.1), ("grid", grid_points(20), "spanner", 1.5)]
        eps_list, samples, limit = [0.5, 1.0], 4000, 900.0
    rows = []
    for setting, pts, method, dil in plan:
        scale = 1.0 if setting == "grid" else 1.0 / np.median(cdist(pts, pts))  # ε per km on cities
        for e in eps_list:
            for loss in ("distance", "squared"):
                if len(pts) >= 100 and (loss == "squared" or e != eps_list[0]):
                    continue  # the large instances are timing measurements: one setting each
                rows.append(one(setting, pts, e * scale, loss, method, dil, seed, samples, limit))
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_csv(df, outdir, NAME)
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    lab = df.setting + " N=" + df.N.astype(str) + " " + df.method + \
        df.dilation.map(lambda v: f" δ={v:g}" if v > 1 else "") + "\n" + df.loss + " ε=" + \
        df.eps_per_km.map(lambda v: f"{v:.3g}")
    x = np.arange(len(df))
    ax.bar(x - 0.2, df.ratio_planar, 0.4, label="planar Laplace / LP")
    ax.bar(x + 0.2, df.ratio_exponential, 0.4, label="exponential / LP")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(x, lab, rotation=90, fontsize=6)
    ax.set_ylabel("expected-loss ratio")
    ax.legend(fontsize=7)
    save_figure(fig, outdir, NAME)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df[["setting", "N", "method", "dilation", "loss", "eps_per_km", "expected_loss", "planar_loss",
               "ratio_planar", "ratio_exponential", "seconds", "private"]]


if __name__ == "__main__":
    run_main(NAME, __doc__, run, summarize)
