"""Simulating many local-model users: dprivacy's vectorised draw against pure-ldp, same error.

Run:  python -m experiments.bench_local_sim [--quick] [--seed S] [--users N] [--reps R]

k-RR (direct encoding) and SUE (symmetric unary encoding, one-time RAPPOR with one hash) over
``--users`` users (default 10^6) holding one of k = 16 values (a Zipf-like distribution), eps = 1.
Each run perturbs every user's value and estimates the k frequencies:

* dprivacy: :func:`dprivacy.local.simulation.simulate_outputs` (every user at once, inverse CDF
  over T's rows) then ``warner_estimate`` / ``rappor_estimate``;
* pure-ldp (Maddock et al.): ``DEClient``/``UEClient.privatise`` per user, ``aggregate`` per
  user, then ``estimate`` per value (its documented usage).

Runs are interleaved (dprivacy, pure-ldp, dprivacy, ...) because the machine is shared; the
table reports medians. Writes experiments/results/bench_local_sim.csv (one row per run: method,
library, users, k, eps, run, seconds, max_abs_error, rmse, sd_closed_form) and .png.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments import _common as C

NAME = "bench_local_sim"


def _pure_ldp(sub: str, mod: str, cls: str) -> Any:
    """A pure-ldp class loaded from its file (its package ``__init__`` imports scikit-learn, which
    pure-ldp does not declare)."""
    import pure_ldp  # type: ignore[import-untyped]

    path = Path(pure_ldp.__file__).parent / "frequency_oracles" / sub / f"{mod}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_{mod}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, cls)


def _ours(method: str, values: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    from dprivacy.local.case_studies import rappor_estimate, rappor_query, warner_estimate, warner_query
    from dprivacy.local.simulation import simulate_outputs

    cats = list(range(k))
    if method == "k-RR":
        q = warner_query("krr", eps, "x", cats)
        return warner_estimate(simulate_outputs(q, {"x": values}, seed), q.T.matrix)  # type: ignore[attr-defined]
    q = rappor_query("sue", eps, "x", cats)
    return rappor_estimate(simulate_outputs(q, {"x": values}, seed), eps)


def _theirs(method: str, values: np.ndarray, k: int, eps: float, seed: int) -> np.ndarray:
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)  # pure-ldp draws from the global generators
    if method == "k-RR":
        client = _pure_ldp("direct_encoding", "de_client", "DEClient")(eps, k, index_mapper=int)
        server = _pure_ldp("direct_encoding", "de_server", "DEServer")(eps, k, index_mapper=int)
    else:
        client = _pure_ldp("unary_encoding", "ue_client", "UEClient")(eps, k, index_mapper=int)
        server = _pure_ldp("unary_encoding", "ue_server", "UEServer")(eps, k, index_mapper=int)
    for v in values.tolist():
        server.aggregate(client.privatise(v))
    counts = np.array([server.estimate(i, suppress_warnings=True) for i in range(k)])
    return counts / len(values)


def _sd(method: str, f: np.ndarray, n: int, eps: float) -> np.ndarray:
    from dprivacy.local.case_studies import rappor_variance, warner_variance

    var = warner_variance(f, n, eps, len(f)) if method == "k-RR" else rappor_variance(f, n, eps)
    return np.sqrt(var)


def run(quick: bool = False, seed: int = 0, outdir: Path | None = None, users: int | None = None,
        reps: int | None = None, k: int = 16, eps: float = 1.0) -> pd.DataFrame:
    """Interleaved timed runs of both libraries; one row per run."""
    n = users or (20_000 if quick else 1_000_000)
    r = reps or (1 if quick else 3)
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, k + 1)
    values = rng.choice(k, size=n, p=w / w.sum())
    truth = np.bincount(values, minlength=k) / n
    libs: dict[str, Callable[[str, np.ndarray, int, float, int], np.ndarray]] = {
        "dprivacy": _ours, "pure-ldp": _theirs}
    rows = []
    for method in ("k-RR", "SUE"):
        sd = float(np.sqrt(np.mean(_sd(method, truth, n, eps) ** 2)))
        for rep in range(r):
            for lib, fn in libs.items():  # interleaved: A, B, A, B, ...
                t0 = time.perf_counter()
                est = fn(method, values, k, eps, seed + 1000 * rep + 1)
                secs = time.perf_counter() - t0
                err = est - truth
                rows.append({"method": method, "library": lib, "users": n, "k": k, "eps": eps,
                             "run": rep, "seconds": secs, "max_abs_error": float(np.abs(err).max()),
                             "rmse": float(np.sqrt(np.mean(err ** 2))), "sd_closed_form": sd})
    df = pd.DataFrame(rows)
    out = Path(outdir or C.default_outdir(quick))
    C.write_csv(df, out, NAME)
    _figure(summarize(df), out, n)
    return df


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Median seconds and errors per method and library, and dprivacy's time over pure-ldp's."""
    med = df.groupby(["method", "library"], sort=False)[["seconds", "rmse", "max_abs_error"]].median()
    med = med.reset_index()
    theirs = med[med.library == "pure-ldp"].set_index("method")["seconds"]
    med["time_vs_pure_ldp"] = [s / theirs[m] for m, s in zip(med.method, med.seconds, strict=True)]
    med["sd_closed_form"] = df.groupby(["method", "library"], sort=False)["sd_closed_form"].first().values
    return med


def _figure(summary: pd.DataFrame, outdir: Path, n: int) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    methods = list(dict.fromkeys(summary.method))
    x = np.arange(len(methods))
    for i, lib in enumerate(("dprivacy", "pure-ldp")):
        s = summary[summary.library == lib].set_index("method").loc[methods, "seconds"]
        bars = ax.bar(x + (i - 0.5) * 0.38, s.values, 0.38, label=lib)
        ax.bar_label(bars, labels=[f"{v:.3g} s" for v in s.values], fontsize=8)
    ax.set_xticks(x, methods)
    ax.set_yscale("log")
    ax.set_ylabel("median seconds (perturb + estimate)")
    ax.set_title(f"simulating {n:,} users: dprivacy vs pure-ldp")
    ax.legend()
    C.save_figure(fig, outdir, NAME)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    p = C.parser(NAME, __doc__)
    p.add_argument("--users", type=int, default=None, help="users per run (default 10^6; quick 2x10^4)")
    p.add_argument("--reps", type=int, default=None, help="runs per library (default 3; quick 1)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    df = run(args.quick, args.seed, args.outdir, args.users, args.reps)
    print(C.format_table(summarize(df)))
    out = args.outdir or C.default_outdir(args.quick)
    print(f"[{NAME}] {time.perf_counter() - t0:.1f} s; wrote {out / (NAME + '.csv')} and {NAME}.png")
    return df


if __name__ == "__main__":
    main()
