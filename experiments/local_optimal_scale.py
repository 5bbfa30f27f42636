"""How far the optimal d_X-local randomiser scales: grids and US cities, with certified gaps.

For each setting (locations, metric, loss, prior) the optimal randomiser is solved by the
column decomposition (``method="lagrangian"``, :func:`solvers.channels.optimal.solve_dx_lp`) to a
target relative gap or a time limit, and the table gives the time, the expected loss of the
returned (private) randomiser, the lower bound proven on the optimum, their relative gap, the
solver's status, the number of pair constraints, the order of the symmetry group used, the plain
HiGHS LP (every constraint at once, ``method="direct"``) where the size allows, and the planar
Laplace mechanism's expected loss at the same ε (with remapping to the nearest location; planar
Laplace is ε·Euclidean-private, hence also ε·Manhattan-private since the Manhattan distance is
the larger).

Settings: square grids of unit spacing under the Manhattan distance (a graph metric: only the grid's
edges are constrained, which is exact) and the Euclidean distance (every pair, added lazily);
uniform prior, and a "population" prior on grids (the shipped US cities' populations binned on
the grid over the lower 48 states, plus one person per cell). The US cities: the N most populous
shipped cities of the lower 48 states (at most 810 are shipped), projected to km
(equirectangular), Euclidean distance, uniform or population prior. The loss is the Euclidean
distance or its square. Each returned randomiser is checked for d_X-privacy on every pair
(column ``private``), independently of the solver.

Sizes, the gap, the time limit and the plain-LP cut-off are command-line parameters (see
``--help``); the load average at the start and end of each row is recorded, since the machine
may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist

from dprivacy.data import load_us_cities
from dprivacy.local.baselines import planar_laplace_loss
from experiments._common import RESULTS_DIR, default_outdir, format_table, parser, save_figure, write_csv
from solvers.channels.optimal import solve_dx_lp
from solvers.channels.separation import check_all_pairs, check_edges
from solvers.channels.symmetry import square_symmetries
from solvers.channels.warm_start import grid_columns, grid_duals

NAME = "local_optimal_scale"
COLUMNS = ["setting", "N", "metric", "loss", "prior", "eps_per_unit", "target_gap", "time_limit",
           "seconds", "expected_loss", "lower_bound", "gap", "status", "rounds", "pairs",
           "graph_edges", "group_order", "plain_seconds", "plain_loss", "plain_status",
           "planar_loss", "planar_se", "ratio_planar", "private", "checked", "worst_ratio",
           "check_seconds", "peak_rss_gb", "load_start", "load_end", "warm_from", "warm_seconds",
           "warm_gap", "first_bound"]


def grid_points(side: int) -> np.ndarray:
    return np.array([(i, j) for i in range(side) for j in range(side)], dtype=float)


def _lower48() -> pd.DataFrame:
    c = load_us_cities()
    return c[~c.state.isin(["AK", "HI", "PR"])]


def grid_population(side: int) -> np.ndarray:
    """The shipped US cities' populations binned on a side x side grid over their bounding box
    (row i = latitude band, column j = longitude band), plus one person per cell."""
    c = _lower48()
    lat, lon = c.latitude.to_numpy(), c.longitude.to_numpy()
    i = np.minimum(((lat - lat.min()) / (np.ptp(lat) + 1e-12) * side).astype(int), side - 1)
    j = np.minimum(((lon - lon.min()) / (np.ptp(lon) + 1e-12) * side).astype(int), side - 1)
    w = np.ones(side * side)
    np.add.at(w, i * side + j, c.population.to_numpy(dtype=float))
    return w / w.sum()


def city_points(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n most populous shipped lower-48 cities in km (equirectangular) and their populations."""
    c = _lower48().nlargest(n, "population")
    lat, lon = np.radians(c.latitude.to_numpy()), np.radians(c.longitude.to_numpy())
    r = 6371.0088
    pts = np.column_stack([r * (lon - lon.mean()) * np.cos(lat.mean()), r * (lat - lat.mean())])
    return pts, c.population.to_numpy(dtype=float)


def _load() -> float:
    return float(os.getloadavg()[0])


def _peak_gb() -> float:
    """Peak resident memory of this process so far (GB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def grid_edges(side: int) -> tuple[np.ndarray, np.ndarray]:
    """The 4-neighbour edges of the side x side grid of :func:`grid_points` (i < j)."""
    k = np.arange(side * side).reshape(side, side)
    i = np.concatenate([k[:, :-1].ravel(), k[:-1, :].ravel()])
    j = np.concatenate([k[:, 1:].ravel(), k[1:, :].ravel()])
    return i, j


def one(setting: str, pts: np.ndarray, metric: str, eps_unit: float, loss: str, prior_name: str,
        prior: np.ndarray | None, *, gap: float, time_limit: float, plain_max: int, samples: int,
        seed: int, check_all_max: int = 2500, warm_from: int | None = None) -> dict:
    load0 = _load()
    t0 = time.perf_counter()
    warm: dict = {"warm_from": np.nan, "warm_seconds": np.nan, "warm_gap": np.nan}
    start, columns = None, None
    if warm_from and setting.startswith("grid") and warm_from ** 2 < len(pts):
        # the smaller grid first, to a tenth of the gap (its time counts in this row's seconds);
        # its multipliers and columns are mapped onto this grid by distance to the edges
        side = int(round(np.sqrt(len(pts))))
        small = grid_points(warm_from)
        w_prior = None if prior is None else grid_population(warm_from)
        l_small, e_small = _matrices(small, metric, eps_unit, loss)
        ws = solve_dx_lp(e_small, l_small, w_prior, method="lagrangian", gap=gap / 10,
                         time_limit=time_limit / 4, symmetries=square_symmetries(small))
        start = grid_duals(ws.info["duals"], warm_from, side, w_prior, prior)
        columns = grid_columns(ws.T, warm_from, side)
        warm = {"warm_from": warm_from, "warm_seconds": time.perf_counter() - t0, "warm_gap": ws.gap}
        del ws, l_small, e_small
    d, eps = _matrices(pts, metric, eps_unit, None)
    L = d if loss == "distance" else d ** 2  # noqa: N806
    if loss != "distance":
        del d
    r = solve_dx_lp(eps, L, prior, method="lagrangian", gap=gap,
                    time_limit=time_limit - (time.perf_counter() - t0),
                    symmetries=square_symmetries(pts), start_duals=start,
                    start_columns=columns)
    secs = time.perf_counter() - t0
    hist = r.info["history"]
    first_bound = next((h[2] for h in hist if np.isfinite(h[2])), np.nan)
    t_check = time.perf_counter()
    if len(pts) <= check_all_max or metric != "manhattan":
        # one column per orbit of the square's symmetries that leave T and eps exactly unchanged
        # (checked entry by entry), every pair of it: exact
        private, worst, _ = check_all_pairs(r.T, eps, rtol=1e-9, group=square_symmetries(pts))
        checked = "all pairs"
    else:  # the grid's edges imply every pair of the Manhattan metric (their paths are checked)
        i, j = grid_edges(int(round(np.sqrt(len(pts)))))
        private, worst, _ = check_edges(r.T, eps, i, j, rtol=1e-9)
        checked = "grid edges + paths"
    check_s = time.perf_counter() - t_check
    plain_s, plain_l, plain_st = np.nan, np.nan, "skipped (N > plain_max)"
    if len(pts) <= plain_max:
        t1 = time.perf_counter()
        try:
            p = solve_dx_lp(eps, L, prior, method="direct", time_limit=time_limit)
            plain_l, plain_st = p.expected_loss, str(p.info["status"])
        except RuntimeError as e:  # no solution within the limit
            plain_st = f"failed: {e}"[:60]
        plain_s = time.perf_counter() - t1
    facts = {"expected_loss": r.expected_loss, "lower_bound": r.lower_bound, "gap": r.gap,
             "status": str(r.info["status"]), "rounds": int(r.info["rounds"]),
             "pairs": int(r.info["pairs"]), "graph_edges": bool(r.info["graph_edges"]),
             "group_order": int(r.info["group_order"])}
    del r  # (N² floats: free them before the baseline)
    pl, se = planar_laplace_loss(pts, eps_unit, L, prior, samples=samples if len(pts) <= 2500 else 200,
                                 rng=seed)
    return {"setting": setting, "N": len(pts), "metric": metric, "loss": loss, "prior": prior_name,
            "eps_per_unit": eps_unit, "target_gap": gap, "time_limit": time_limit, "seconds": secs,
            **facts, "plain_seconds": plain_s,
            "plain_loss": plain_l, "plain_status": plain_st, "planar_loss": pl, "planar_se": se,
            "ratio_planar": pl / facts["expected_loss"], "private": bool(private), "checked": checked,
            "worst_ratio": worst, "check_seconds": check_s, "peak_rss_gb": _peak_gb(),
            "load_start": load0, "load_end": _load(), **warm, "first_bound": first_bound}


def _matrices(pts: np.ndarray, metric: str, eps_unit: float,
              loss: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(loss or distance, budgets): the Euclidean distance (squared for the squared loss; as is
    when ``loss`` is None) and ε times the metric, each made once (N² floats each)."""
    d = cdist(pts, pts)
    eps = cdist(pts, pts, "cityblock") if metric == "manhattan" else d.copy()
    eps *= eps_unit
    if loss == "squared":
        d **= 2
    return d, eps


def plan(grids: list[int], cities: list[int], metrics: list[str], losses: list[str],
         priors: list[str]) -> list[tuple]:
    """(setting, points, metric, ε per unit, prior name, prior) of every run, loss apart."""
    out = []
    for side in grids:
        pts = grid_points(side)
        for metric in metrics:
            for pr in priors:
                w = None if pr == "uniform" else grid_population(side)
                out.append((f"grid {side}x{side}", pts, metric, 0.5, pr, w))
    for n in cities:
        pts, pop = city_points(n)
        # ε per km: one over the median nearest-neighbour distance
        dd = cdist(pts, pts)
        np.fill_diagonal(dd, np.inf)
        e = 1.0 / float(np.median(dd.min(axis=1)))
        for pr in priors:
            out.append((f"cities {n}", pts, "euclidean", e, pr, None if pr == "uniform" else pop / pop.sum()))
    return out


def run(quick: bool = False, seed: int = 0, outdir: Path = RESULTS_DIR, *,
        grids: list[int] | None = None, cities: list[int] | None = None,
        metrics: list[str] | None = None, losses: list[str] | None = None,
        priors: list[str] | None = None, gap: float = 1e-3, time_limit: float = 600.0,
        plain_max: int = 100, samples: int = 2000, append: bool = False,
        warm_from: int | None = None) -> pd.DataFrame:
    if quick:
        grids, cities = grids or [4, 5], cities if cities is not None else [15]
        time_limit, samples, plain_max = min(time_limit, 60.0), 500, min(plain_max, 25)
    grids = [10, 20, 30, 50] if grids is None else grids
    cities = [500, 810] if cities is None else cities
    metrics = metrics or ["manhattan", "euclidean"]
    losses = losses or ["distance", "squared"]
    priors = priors or ["uniform", "population"]
    rows = []
    old = Path(outdir) / f"{NAME}.csv"
    if append and old.exists():  # keep the rows of earlier runs (e.g. other sizes)
        rows = pd.read_csv(old).to_dict("records")
    for setting, pts, metric, e, pr, w in plan(grids, cities, metrics, losses, priors):
        for loss in losses:
            rows.append(one(setting, pts, metric, e, loss, pr, w, gap=gap, time_limit=time_limit,
                            plain_max=plain_max, samples=samples, seed=seed,
                            warm_from=warm_from))
            print({k: rows[-1][k] for k in ("setting", "metric", "loss", "prior", "seconds",
                                             "gap", "status", "private", "load_start")}, flush=True)
            df = pd.DataFrame(rows, columns=COLUMNS)
            write_csv(df, outdir, NAME)  # after every row: a long run keeps what it measured
    df = pd.DataFrame(rows, columns=COLUMNS)
    plot(df, outdir)
    return df


def plot(df: pd.DataFrame, outdir: Path) -> None:
    """Seconds to the target gap (or the limit) against N, one line per metric and loss."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for (metric, loss), g in df.groupby(["metric", "loss"]):
        ax.loglog(g.N, g.seconds, "o-", label=f"{metric}, {loss}")
    ax.set_xlabel("locations N")
    ax.set_ylabel("seconds to the target gap (or the limit)")
    ax.legend(fontsize=7)
    save_figure(fig, outdir, NAME)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    return df[["setting", "metric", "loss", "prior", "seconds", "expected_loss", "lower_bound",
               "gap", "status", "plain_seconds", "planar_loss", "ratio_planar", "private",
               "load_start"]]


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def _words(s: str) -> list[str]:
    return [v.strip() for v in s.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p: argparse.ArgumentParser = parser(NAME, __doc__)
    p.add_argument("--grids", type=_ints, default=None, help="grid sides (default 10,20,30,50)")
    p.add_argument("--cities", type=_ints, default=None,
                   help="numbers of cities (default 500,810; at most 810 are shipped)")
    p.add_argument("--metrics", type=_words, default=None, help="manhattan,euclidean (grids)")
    p.add_argument("--losses", type=_words, default=None, help="distance,squared")
    p.add_argument("--priors", type=_words, default=None, help="uniform,population")
    p.add_argument("--gap", type=float, default=1e-3, help="target relative gap (default 0.001)")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds per solve (default 600)")
    p.add_argument("--plain-max", type=int, default=100,
                   help="largest N for the plain HiGHS LP (default 100)")
    p.add_argument("--warm-from", type=int, default=None,
                   help="solve a grid of this side first and start from its multipliers "
                        "(its time counts in the row's seconds)")
    p.add_argument("--append", action="store_true",
                   help="add the rows to the CSV already in the output directory")
    a = p.parse_args(argv)
    outdir = a.outdir or default_outdir(a.quick)
    t0 = time.perf_counter()
    df = run(a.quick, a.seed, outdir, grids=a.grids, cities=a.cities, metrics=a.metrics,
             losses=a.losses, priors=a.priors, gap=a.gap, time_limit=a.time_limit,
             plain_max=a.plain_max, append=a.append, warm_from=a.warm_from)
    print(format_table(summarize(df)))
    print(f"[{NAME}] {time.perf_counter() - t0:.1f} s; wrote {outdir / (NAME + '.csv')}")
    return df


if __name__ == "__main__":
    main(sys.argv[1:])
