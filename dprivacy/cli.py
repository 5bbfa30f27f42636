"""The ``dprivacy`` command: design, export, verify and apply d_X-private Laplace mechanisms.

Subcommands (``dprivacy <command> --help`` for each):

* ``demo``      the main job: a design for the shipped US cities with the geodesic metric;
* ``design``    universe CSV + metric + query matrix -> mechanism config JSON and a report;
* ``verify``    config + universe + metric + workload -> re-checks privacy (exit 0 ok, 1 refused);
* ``release``   config + records CSV -> noisy answers CSV (the config is verified first);
* ``reproduce`` the paper's experiments (``experiments/``, from a source checkout).

Privacy condition checked before anything is written or released (Theorem 1):
sum_k beta_k w_k |F_ki - F_kj| <= eps_ij for every constrained pair (i, j).
User errors are reported as one line on stderr with exit code 1 (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprivacy import metrics as _metrics
from dprivacy.cli_inputs import (
    BUILTIN,
    DEMO_OUT,
    METRICS,
    UserError,
    load_universe,
    load_workload,
    make_metric,
    read_csv,
)
from dprivacy.design import LOSSES, METHODS, Design, design, improvement_factor
from dprivacy.errors import DPrivacyError, PrivacyViolationError, ValidationError
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe
from dprivacy.workload import Workload


def _add_inputs(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_argument_group("inputs" + ("" if required else " (default: those the config "
                                                             "was designed with)"))
    g.add_argument("--universe", required=required, metavar="CSV",
                   help=f"elements, one per row; or {' / '.join(BUILTIN)}")
    g.add_argument("--key", metavar="COLS", help="columns identifying an element (comma-separated)")
    g.add_argument("--coords", metavar="COLS", help="coordinate columns, e.g. latitude,longitude")
    g.add_argument("--metric", required=required, metavar="NAME",
                   help=f"one of {', '.join(METRICS)}")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="metric parameter (repeatable; values are JSON), e.g. eps_per_km=0.1")
    g.add_argument("--queries", required=required, metavar="FILE",
                   help="query matrix (m, N) as .npy or .csv, columns in universe order")


def _inputs_from(args: argparse.Namespace, cfg_path: str | None = None
                 ) -> tuple[Universe, Metric, Workload, dict]:
    """Universe, metric and workload from the arguments, falling back on the config's record."""
    rec: dict = {}
    if cfg_path is not None:
        if not Path(cfg_path).is_file():
            raise UserError(f"config file {cfg_path!r} not found")
        # Only the recorded inputs are read here; the config itself is read, checked and
        # refused if need be by MechanismConfig.load.
        try:
            doc = json.loads(Path(cfg_path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
        rec = _get(doc, "design", "report", "cli_inputs") or {}
        if not args.metric and _get(doc, "metric", "params") is not None:
            rec = {**rec, "metric": _get(doc, "metric", "name"), "params": doc["metric"]["params"]}
    universe = args.universe or rec.get("universe")
    queries = args.queries or rec.get("queries")
    metric = args.metric or rec.get("metric")
    if not (universe and queries and metric):
        raise UserError("give --universe, --metric and --queries (the config records none)")
    U = load_universe(universe, args.key or rec.get("key"), args.coords or rec.get("coords"))
    M = make_metric(metric, args.param if args.metric else rec.get("params", args.param))
    W = load_workload(queries, U.N)
    if W.names is None and len(rec.get("query_names") or []) == W.m:
        W = Workload(W.F, names=tuple(rec["query_names"]))
    used = {"universe": universe, "key": ",".join(U.key_columns),
            "coords": args.coords or rec.get("coords"), "metric": metric,
            "queries": str(Path(queries).resolve()), "query_names": W.query_names()}
    if not universe.startswith("builtin:"):
        used["universe"] = str(Path(universe).resolve())
    return U, M, W, used


def _get(doc: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _load_config(path: str, U: Universe, M: Metric, W: Workload):
    from dprivacy.config import MechanismConfig

    if not Path(path).is_file():
        raise UserError(f"config file {path!r} not found")
    return MechanismConfig.load(path, U, M, W)


# ------------------------------------------------------------------------------ reports
def design_table(W: Workload, U: Universe, M: Metric, d: Design) -> pd.DataFrame:
    """Per query: range, baseline scale Delta F / eps_min, designed scale 1 / beta_k, IF_k, and the
    IF the query would get designed alone (closed form, spec §3.8)."""
    eps_min, dF = M.eps_min(U), W.sensitivity()
    per = np.asarray(improvement_factor(W, U, M, d, per_query=True), dtype=float)
    cs = M.constraint_set(U)
    c, _, _ = cs.row_lipschitz(W.dense(), memory_bytes=2**26)
    ranges = W.ranges()
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(c > 0, ranges / eps_min / c, np.inf)
    return pd.DataFrame({"query": W.query_names(), "range": ranges,
                         "baseline_noise": np.full(W.m, dF / eps_min),
                         "designed_noise": d.noise_scale, "w": d.w, "IF": per, "IF_alone": alone})


def _print_report(W: Workload, U: Universe, M: Metric, d: Design) -> None:
    t = design_table(W, U, M, d)
    print(f"universe N = {U.N}, metric {M!r}, eps_min = {M.eps_min(U):.6g}, "
          f"Delta F = {W.sensitivity():.6g}, m = {W.m} queries")
    print(f"design: method {d.method}, loss {d.loss}, max privacy ratio "
          f"{d.max_ratio(W):.9f} (<= 1 is private)")
    print(t.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"geometric-mean IF (spec §3.10): {float(improvement_factor(W, U, M, d)):.4g}\n"
          "(baseline_noise: Laplace scale of the eps_min-DP baseline, Delta F / eps_min, on every "
          "query;\n designed_noise: 1 / beta_k; IF = baseline / designed; IF_alone: the query "
          "designed on its own, spec §3.9)")


def _with_inputs(d: Design, used: dict) -> Design:
    return Design(d.w, d.beta, method=d.method, loss=d.loss, objective=d.objective,
                  report={**d.report, "cli_inputs": used}, constraints=d.constraints)


def _export(W: Workload, U: Universe, M: Metric, d: Design, out: str) -> Path:
    from dprivacy.config import MechanismConfig

    path = MechanismConfig.from_design(W, U, M, d).save(out)
    print(f"config written to {path}")
    return path


# ------------------------------------------------------------------------------ commands
def cmd_design(args: argparse.Namespace) -> int:
    U, M, W, used = _inputs_from(args)
    d = design(W, U, M, method=args.method, loss=args.loss, n=args.n)
    d = _with_inputs(d, used)
    _print_report(W, U, M, d)
    _export(W, U, M, d, args.out)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from dprivacy.errors import ConfigError

    U, M, W, _ = _inputs_from(args, args.config)
    try:
        cfg = _load_config(args.config, U, M, W)
    except (ConfigError, PrivacyViolationError) as exc:
        print(f"REFUSED: {exc}", file=sys.stderr)
        return 1
    ratio = cfg.to_mechanism().max_ratio_
    print(f"OK: {args.config} matches the universe (N = {U.N}), metric {M!r} and workload "
          f"(m = {W.m}); max privacy ratio {ratio:.9f} <= 1 over all constrained pairs")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    U, M, W, _ = _inputs_from(args, args.config)
    mech = _load_config(args.config, U, M, W).to_mechanism()
    records = read_csv(args.records, "records")
    if args.count_column:
        if args.count_column not in records.columns:
            raise UserError(f"records have no column {args.count_column!r}")
        idx = U.element_index(records)
        x = np.bincount(idx, weights=pd.to_numeric(records[args.count_column]), minlength=U.N)
    else:
        x = U.histogram(records)
    secure = args.seed is None
    if not secure:
        print("warning: --seed uses numpy's sampler, which is not floating-point safe; "
              "for simulations only", file=sys.stderr)
    y = mech.release(x, rng=args.seed, secure=secure)
    out = pd.DataFrame({"query": W.query_names(), "answer": y, "noise_scale": mech.noise_scale,
                        "w": mech.design.w})
    out.to_csv(args.out, index=False)
    print(f"released {W.m} answers for n = {x.sum():g} records to {args.out}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    run_all = _experiments()
    if not args.all and not args.names:
        raise UserError(f"name an experiment or pass --all; experiments: "
                        f"{', '.join(run_all.EXPERIMENTS)}")
    names = None if args.all else args.names
    for n in names or []:
        if n not in run_all.EXPERIMENTS:
            raise UserError(f"unknown experiment {n!r}; choose from {', '.join(run_all.EXPERIMENTS)}")
    kw = {"outdir": Path(args.outdir)} if args.outdir else {}
    run_all.run_all(quick=args.quick, seed=args.seed, names=names, **kw)
    return 0


def _experiments():
    try:
        from experiments import run_all
    except ImportError:
        here = Path.cwd()
        if not (here / "experiments" / "run_all.py").is_file():
            raise UserError("the reproduction scripts live in the source tree's experiments/ "
                            "folder: run `dprivacy reproduce` from a dprivacy checkout") from None
        sys.path.insert(0, str(here))
        from experiments import run_all
    return run_all


def cmd_demo(args: argparse.Namespace) -> int:
    from dprivacy.data import load_us_cities

    cities = load_us_cities()
    U = load_universe("builtin:us_cities")
    M = _metrics.Geodesic(eps_per_km=args.eps_per_km)
    rng = np.random.default_rng(args.seed)
    F = np.vstack([rng.uniform(0, 1, size=(args.m, U.N)), cities["elevation"].to_numpy() / 1000])
    names = tuple(f"random_{k}" for k in range(args.m)) + ("elevation_km",)
    W = Workload(F, names=names)
    print(f"dprivacy demo: {U.N} US cities (GeoNames, > 50k inhabitants), geodesic metric "
          f"eps_ij = {args.eps_per_km:g} x distance in km;\n{args.m} random U[0,1] queries + "
          "the elevation query (sum of elevation in km over residents' cities)\n")
    d = design(W, U, M, method=args.method, loss=args.loss)
    out = Path(args.out)
    qpath = out.with_name(out.stem + "_queries.npy")
    np.save(qpath, F)
    d = _with_inputs(d, {"universe": "builtin:us_cities", "key": "name,state",
                         "coords": "latitude,longitude", "queries": str(qpath.resolve()),
                         "metric": "geodesic", "query_names": list(names)})
    _print_report(W, U, M, d)
    _export(W, U, M, d, str(out))
    print(f"query matrix written to {qpath}\n"
          f"check it:  dprivacy verify {out}\n"
          f"apply it:  dprivacy release {out} --records RECORDS.csv  (columns name,state)")
    return 0


# ------------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dprivacy", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("demo", help="design for the US cities with the geodesic metric",
                       description="The main job: design a d_X Laplace mechanism for the shipped "
                       "US cities, print baseline noise, designed noise and IF per query, and "
                       "export the config.")
    s.add_argument("--out", default=DEMO_OUT, help=f"config path (default ./{DEMO_OUT})")
    s.add_argument("--m", type=int, default=5, help="number of random queries (default 5)")
    s.add_argument("--eps-per-km", type=float, default=0.1, help="budget per km (default 0.1)")
    s.add_argument("--method", choices=METHODS, default="exact")
    s.add_argument("--loss", choices=LOSSES, default="squared")
    s.add_argument("--seed", type=int, default=0, help="seed of the random queries")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("design", help="design a mechanism and export its config",
                       description="Universe + metric + query matrix -> config JSON and a report.")
    _add_inputs(s, required=True)
    s.add_argument("--method", choices=METHODS, default="exact")
    s.add_argument("--loss", choices=LOSSES, default="squared")
    s.add_argument("--n", type=int, default=None, help="number of records (enables w < 1)")
    s.add_argument("--out", required=True, help="config JSON to write")
    s.set_defaults(func=cmd_design)

    s = sub.add_parser("verify", help="re-check a config's privacy (exit 0 ok, 1 refused)",
                       description="Check that CONFIG was made for these inputs and that its "
                       "parameters are private for every constrained pair. Exit 0 if so, 1 if not.")
    s.add_argument("config")
    _add_inputs(s, required=False)
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("release", help="verify a config and release noisy answers",
                       description="Verify CONFIG, build the histogram of RECORDS and write the "
                       "noisy answers (eq. (5)) as CSV.")
    s.add_argument("config")
    s.add_argument("--records", required=True, metavar="CSV",
                   help="one row per record with the universe's key columns")
    s.add_argument("--count-column", metavar="COL",
                   help="records are pre-aggregated: COL holds the count of each row")
    s.add_argument("--out", default="answers.csv", help="answers CSV (default answers.csv)")
    s.add_argument("--seed", type=int, default=None,
                   help="seeded numpy sampler (simulation only; default: OpenDP's safe sampler)")
    _add_inputs(s, required=False)
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("reproduce", help="run the paper's experiments (source checkout)",
                       description="Run reproduction scripts from experiments/ and compare with "
                       "the paper's targets T1-T10.")
    s.add_argument("names", nargs="*", metavar="NAME", help="experiment(s) to run")
    s.add_argument("--all", action="store_true", help="run every experiment")
    s.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--outdir", default=None,
                   help="default experiments/results/ (--quick: experiments/results/quick/)")
    s.set_defaults(func=cmd_reproduce)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dprivacy`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (DPrivacyError, ValidationError) as exc:
        print(f"dprivacy {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (OSError, KeyError) as exc:
        print(f"dprivacy {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
