"""``dprivacy design``: universe + metric + query matrix -> a verified config JSON and a report."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

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
        if args.method == "strategy" and (plot is not None or args.n is not None):
            raise UsageError("--method strategy takes neither --plot nor --n (a strategy "
                             "mechanism is unbiased and uses the number of records exactly)")
        with steps.step(f"design ({args.method}, N = {U.N}, m = {W.m})"), \
                guard(f"design --method {args.method}"):
            if args.method == "strategy":
                from dprivacy.mechanisms.strategy import design_strategy

                d: Any = design_strategy(W, U, M, time_limit=args.time_limit)
            else:
                d = design(W, U, M, method=args.method, loss=args.loss, n=args.n)
        with steps.step("report"), guard("report"):
            from dprivacy.config import MechanismConfig

            cfg = MechanismConfig.from_design(W, U, M, d)
            text = strategy_text(W, d) if args.method == "strategy" else report_text(W, U, M, d)
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


def strategy_text(W: Any, d: Any) -> str:
    """Summary of a strategy design: measurements, expected error, bound, per-query std."""
    sd = np.sqrt(d.query_variances())
    lines = [f"strategy mechanism: {d.p} noisy measurements (Lap(1) each) answer {W.m} queries "
             f"by least squares ({d.report.get('start', '?')} start, {d.basis.kind} basis)",
             f"expected total squared error {d.expected_squared_error():.6g}"
             + ("" if d.lower_bound is None else
                f" (no strategy can do better than {d.lower_bound:.6g})"),
             "query  std"]
    names = W.query_names()
    for k in range(min(W.m, 20)):
        lines.append(f"{names[k]}  {sd[k]:.6g}")
    if W.m > 20:
        lines.append(f"... ({W.m - 20} more; std from {sd.min():.4g} to {sd.max():.4g})")
    return "\n".join(lines)


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
    s.add_argument("--plot", default=None, metavar="PNG",
                   help="also draw the design: noise per query against the eps_min baseline, "
                        "and the pairs whose constraint binds over the universe's points (a "
                        "lon/lat map for --metric geodesic); the format follows the extension "
                        "(.png, .pdf, .svg); needs the [plot] extra")
    s.set_defaults(func=cmd_design)
