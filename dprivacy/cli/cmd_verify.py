"""``dprivacy verify``: is this config private for these inputs? (exit 0 yes, 4 refused)."""

from __future__ import annotations

import argparse

from dprivacy.cli.common import add_inputs, inputs_from
from dprivacy.cli.configs import load_config
from dprivacy.cli.gaussian_cli import add_noise_args, expect_config, gaussian_text
from dprivacy.cli.params import metrics_help

EXAMPLE = """example (files in the source tree's examples/ folder):
  dprivacy verify config.json --universe examples/cities.csv --metric geodesic \\
      --param eps_per_km=0.05 --queries examples/queries_named.csv
"""


def cmd_verify(args: argparse.Namespace) -> int:
    inp = inputs_from(args)
    cfg = load_config(args.config, inp)
    noise, rho = expect_config(cfg, args, args.config)
    mech = cfg.to_mechanism()
    ratio = mech.max_ratio_
    print(f"OK: {args.config} matches the universe (N = {inp.universe.N}), metric "
          f"{inp.metric!r} and workload (m = {inp.workload.m}) given; max privacy ratio "
          f"{ratio:.9f} <= 1 over all constrained pairs")
    if noise == "gaussian":
        assert rho is not None
        print(gaussian_text(rho, inp.metric, inp.universe, args.delta,
                            getattr(mech.design, "sigma", None)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    s = sub.add_parser("verify", help="re-check a config against your inputs (exit 0 ok, "
                       "4 refused)",
                       description="Check that CONFIG was made for exactly the universe, metric "
                       "and workload you give, and that its parameters are private for every "
                       "constrained pair (Theorem 1). Exit 0 if so, 4 if not.",
                       epilog=metrics_help() + "\n\n" + EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("config", metavar="CONFIG", help="config JSON written by design or demo")
    add_inputs(s)
    add_noise_args(s, design=False)
    s.set_defaults(func=cmd_verify)
