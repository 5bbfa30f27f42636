"""``dprivacy demo``: the main job on the shipped US cities (geodesic metric)."""

from __future__ import annotations

import argparse
import io

import numpy as np

from dprivacy.cli.common import bounded_int, budget_arg, guard, nonneg_int
from dprivacy.cli.files import check_out, write_text
from dprivacy.cli.progress import Steps
from dprivacy.cli.report import report_text
from dprivacy.design import LOSSES, METHODS, design

DEMO_OUT = "dprivacy_demo_config.json"
MAX_M = 1000


def cmd_demo(args: argparse.Namespace) -> int:
    from dprivacy import metrics
    from dprivacy.cli.inputs import load_universe, us_cities_subset
    from dprivacy.cli.params import spec_of
    from dprivacy.config import MechanismConfig
    from dprivacy.data import load_us_cities
    from dprivacy.workload import Workload

    out = check_out(args.out, "--out")
    qpath = check_out(out.with_name(out.stem + "_queries.csv"), "--out (its query file)")
    with Steps(["data", "design", "export"], desc="dprivacy demo") as steps:
        with steps.step("data"):
            source = "builtin:us_cities" + (f":{args.cities}" if args.cities else "")
            cities = us_cities_subset(load_us_cities(), source, f"--cities {args.cities!r}")
            U, _ = load_universe(source, spec_of("geodesic"))
            M = metrics.Geodesic(eps_per_km=args.eps_per_km)
            rng = np.random.default_rng(args.seed)
            F = np.vstack([rng.uniform(0, 1, size=(args.m, U.N)),
                           cities["elevation"].to_numpy() / 1000])
            names = tuple(f"random_{k}" for k in range(args.m)) + ("elevation_km",)
            W = Workload(F, names=names)
        with steps.step("design"), guard(f"design --method {args.method}"):
            d = design(W, U, M, method=args.method, loss=args.loss)
            cfg = MechanismConfig.from_design(W, U, M, d)
            text = report_text(W, U, M, d)
        with steps.step("export"), guard(f"--out {args.out!r}"):
            buf = io.StringIO()
            header = ",".join(["query"] + [_csv(lab) for lab in U.labels()])
            buf.write(header + "\n")
            for name, row in zip(names, F, strict=True):
                buf.write(name + "," + ",".join(repr(float(v)) for v in row) + "\n")
            write_text(qpath, buf.getvalue(), "--out")
            cfg.save(out)
    print(f"dprivacy demo: {U.N} US cities (GeoNames, > 50k inhabitants), geodesic metric "
          f"eps_ij = {args.eps_per_km:g} x distance in km;\n{args.m} random U[0,1] queries + "
          "the elevation query (sum of elevation in km over residents' cities)\n")
    print(text)
    print(f"config written to {out}; query matrix to {qpath}\n"
          f"check it:  dprivacy verify {out} --universe {source} --metric geodesic "
          f"--param eps_per_km={args.eps_per_km:g} --queries {qpath}")
    return 0


def _csv(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    s = sub.add_parser("demo", help="design for the US cities with the geodesic metric",
                       description="The main job: design a d_X Laplace mechanism for the shipped "
                       "US cities (eps_ij = EPS_PER_KM x distance in km), print baseline noise, "
                       "designed noise and IF per query, and export the config and its query "
                       "matrix (CSV, next to the config).")
    s.add_argument("--out", default=DEMO_OUT, metavar="JSON",
                   help=f"config path (default ./{DEMO_OUT})")
    s.add_argument("--m", type=bounded_int(0, MAX_M), default=5,
                   help=f"number of random queries, 0..{MAX_M} (default 5)")
    s.add_argument("--eps-per-km", type=budget_arg, default=0.1,
                   help="privacy budget per km of distance (the demo uses 0.1 unless told; "
                        "it prints the value it uses)")
    s.add_argument("--method", choices=METHODS, default="exact",
                   help="solver (default exact: the convex program's optimum)")
    s.add_argument("--loss", choices=LOSSES, default="squared",
                   help="error measure the design minimises (default squared)")
    s.add_argument("--seed", type=nonneg_int, default=0, help="seed of the random queries")
    s.add_argument("--cities", default=None, metavar="SELECTION",
                   help="a subset of the shipped cities: states (CA,NV) or top=N, the N most "
                        "populous (default: all 810); the same selection is written "
                        "--universe builtin:us_cities:SELECTION in the other commands")
    s.set_defaults(func=cmd_demo)
