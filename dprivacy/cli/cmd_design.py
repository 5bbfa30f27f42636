"""``dprivacy design``: universe + metric + query matrix -> a verified config JSON and a report."""

from __future__ import annotations

import argparse

from dprivacy.cli.common import add_inputs, guard, inputs_from, nonneg_int
from dprivacy.cli.exits import UsageError
from dprivacy.cli.files import check_out
from dprivacy.cli.params import metrics_help
from dprivacy.cli.progress import Steps
from dprivacy.cli.report import report_text
from dprivacy.design import LOSSES, METHODS, design

EXAMPLE = """example (files in the source tree's examples/ folder):
  dprivacy design --universe examples/cities.csv --metric geodesic --param eps_per_km=0.05 \\
      --queries examples/queries_named.csv --out config.json
"""


def cmd_design(args: argparse.Namespace) -> int:
    out = check_out(args.out, "--out", [args.universe, args.queries])
    plot = None
    if args.plot is not None:
        plot = check_out(args.plot, "--plot", [args.universe, args.queries, args.out])
        _require_matplotlib()
    names = ["read inputs", "design", "report", "export"] + (["plot"] if plot is not None else [])
    with Steps(names, desc="dprivacy design") as steps:
        with steps.step("read inputs"):
            inp = inputs_from(args)
        W, U, M = inp.workload, inp.universe, inp.metric  # noqa: N806
        if args.method == "closed_form" and W.m != 1:
            raise UsageError(f"--method closed_form designs a single query but --queries "
                             f"{args.queries!r} has m = {W.m}; use --method exact (or another "
                             "multi-query method)")
        with steps.step(f"design ({args.method}, N = {U.N}, m = {W.m})"), \
                guard(f"design --method {args.method}"):
            d = design(W, U, M, method=args.method, loss=args.loss, n=args.n)
        with steps.step("report"), guard("report"):
            from dprivacy.config import MechanismConfig

            cfg = MechanismConfig.from_design(W, U, M, d)
            text = report_text(W, U, M, d)
        with steps.step("export"), guard(f"--out {args.out!r}"):
            path = cfg.save(out)
        if plot is not None:
            with steps.step("plot"), guard(f"--plot {args.plot!r}"):
                d.plot(W, U, M, path=plot)
    print(text)
    if plot is not None:
        print(f"picture of the design written to {plot}")
    print(f"config written to {path}\n"
          f"check it:  dprivacy verify {path} {_inputs_text(args)}")
    return 0


def _require_matplotlib() -> None:
    from dprivacy.errors import MissingDependencyError
    from dprivacy.plotting._mpl import require

    try:
        require()
    except MissingDependencyError as exc:
        raise UsageError(f"--plot: {exc}") from exc


def _inputs_text(args: argparse.Namespace) -> str:
    parts = [f"--universe {args.universe}", f"--metric {args.metric}"]
    parts += [f"--param {p}" for p in args.param]
    for flag in ("key", "coords"):
        if getattr(args, flag):
            parts.append(f"--{flag} {getattr(args, flag)}")
    parts.append(f"--queries {args.queries}")
    return " ".join(parts)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``design`` subcommand."""
    s = sub.add_parser("design", help="design a mechanism and export its config",
                       description="Universe + metric + query matrix -> a verified config JSON "
                       "and a report (noise per query against the eps_min-DP baseline).",
                       epilog=metrics_help() + "\n\n" + EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inputs(s)
    s.add_argument("--method", choices=METHODS, default="exact",
                   help="solver (default exact)")
    s.add_argument("--loss", choices=LOSSES, default="squared", help="error measure (default "
                   "squared)")
    s.add_argument("--n", type=nonneg_int, default=None, metavar="RECORDS",
                   help="number of records, if public (enables the shrinkage w < 1)")
    s.add_argument("--out", required=True, metavar="JSON", help="config file to write")
    s.add_argument("--plot", default=None, metavar="PNG",
                   help="also draw the design: noise per query against the eps_min baseline, "
                        "and the pairs whose constraint binds over the universe's points (a "
                        "lon/lat map for --metric geodesic); the format follows the extension "
                        "(.png, .pdf, .svg); needs the [plot] extra")
    s.set_defaults(func=cmd_design)
