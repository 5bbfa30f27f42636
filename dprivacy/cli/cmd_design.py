"""``dprivacy design``: universe + metric + query matrix -> a verified config JSON and a report."""

from __future__ import annotations

import argparse
from typing import Any

from dprivacy.cli.common import add_inputs, guard, inputs_from, nonneg_int
from dprivacy.cli.exits import UsageError
from dprivacy.cli.files import check_out
from dprivacy.cli.gaussian_cli import add_noise_args, check_design_args, gaussian_text
from dprivacy.cli.params import metrics_help
from dprivacy.cli.progress import Steps
from dprivacy.cli.report import summary_text
from dprivacy.design import LOSSES, METHODS, design
from dprivacy.workload import Workload

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
        noise = check_design_args(args)
        W, U, M = inp.workload, inp.universe, inp.metric  # noqa: N806
        if args.method == "closed_form" and W.m != 1:
            raise UsageError(f"--method closed_form designs a single query but --queries "
                             f"{args.queries!r} has m = {W.m}; use --method exact (or another "
                             "multi-query method)")
        if args.method == "strategy" and args.n is not None:
            raise UsageError("--method strategy does not take --n (a strategy mechanism is "
                             "unbiased and uses the number of records exactly)")
        if args.method != "strategy" and not isinstance(W, Workload):
            W = _explicit(W, args)  # noqa: N806
        with steps.step(f"design ({args.method}, N = {U.N}, m = {W.m})"), \
                guard(f"design --method {args.method}"):
            if args.method == "strategy":
                from dprivacy.mechanisms.strategy import design_strategy

                gauss = {"noise": "gaussian", "rho": args.rho} if noise == "gaussian" else {}
                d: Any = design_strategy(W, U, M, time_limit=args.time_limit, **gauss)
            else:
                assert isinstance(W, Workload)
                if noise == "gaussian":
                    d = design(W, U, M, noise="gaussian", rho=args.rho, loss=args.loss)
                else:
                    d = design(W, U, M, method=args.method, loss=args.loss, n=args.n)
        with steps.step("report"), guard("report"):
            from dprivacy.config import MechanismConfig

            cfg = MechanismConfig.from_design(W, U, M, d)
            if noise == "gaussian":
                text = gaussian_text(args.rho, M, U, args.delta, getattr(d, "sigma", None))
                if args.method == "strategy":
                    text = summary_text(W, U, M, d, all_rows=args.all_rows) + "\n" + text
            else:
                text = summary_text(W, U, M, d, all_rows=args.all_rows)
        with steps.step("export"), guard(f"--out {args.out!r}"):
            path = cfg.save(out)
        if plot is not None:
            with steps.step("plot"), guard(f"--plot {args.plot!r}"):
                if noise == "gaussian" and args.method != "strategy":
                    raise UsageError("--plot draws Laplace designs and strategies")
                if args.method == "strategy":
                    from dprivacy.plotting import plot_strategy

                    plot_strategy(d, W, path=plot)
                else:
                    d.plot(W, U, M, path=plot)
    print(text)
    if plot is not None:
        print(f"picture of the design written to {plot}")
    print(f"config written to {path}\n"
          f"check it:  dprivacy verify {path} {_inputs_text(args)}")
    return 0


def _explicit(W: Any, args: argparse.Namespace) -> Workload:  # noqa: N803
    """An implicit workload written out for a (w, beta) method (small ones only)."""
    from dprivacy.errors import ValidationError

    try:
        return W.to_workload()
    except ValidationError:
        raise UsageError(f"--workload {args.workload} has m = {W.m} queries, too many to write "
                         f"out for --method {args.method}; use --method strategy, which "
                         "designs from its Gram matrix without writing it out") from None


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
    parts.append(f"--workload {args.workload}" if args.workload else f"--queries {args.queries}")
    return " ".join(parts)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``design`` subcommand."""
    s = sub.add_parser("design", help="design a mechanism and export its config",
                       description="Universe + metric + query matrix -> a verified config JSON "
                       "and a report (noise per query against the eps_min-DP baseline).",
                       epilog=metrics_help() + "\n\n" + EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inputs(s)
    s.add_argument("--method", choices=METHODS + ("strategy",), default="exact",
                   help="solver (default exact); 'strategy' optimises a strategy mechanism "
                        "(release A x + Lap(1)^p, answer by least squares; docs/theory.md)")
    s.add_argument("--time-limit", type=float, default=120.0, metavar="SECONDS",
                   help="--method strategy: seconds of gradient polishing (default 120)")
    s.add_argument("--loss", choices=LOSSES, default="squared", help="error measure (default "
                   "squared)")
    s.add_argument("--n", type=nonneg_int, default=None, metavar="RECORDS",
                   help="number of records, if public (enables the shrinkage w < 1)")
    s.add_argument("--out", required=True, metavar="JSON", help="config file to write")
    add_noise_args(s, design=True)
    s.add_argument("--all-rows", action="store_true",
                   help="print every query's row (default: the worst few, and every row of a "
                        "workload of at most 10 queries)")
    s.add_argument("--plot", default=None, metavar="PNG",
                   help="also draw the design: noise per query against the eps_min baseline, "
                        "and the pairs whose constraint binds over the universe's points (a "
                        "lon/lat map for --metric geodesic); the format follows the extension "
                        "(.png, .pdf, .svg); needs the [plot] extra")
    s.set_defaults(func=cmd_design)
