"""``dprivacy reproduce``: run the paper's experiment scripts (from a source checkout)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dprivacy.cli.common import nonneg_int
from dprivacy.cli.exits import UsageError


def _experiments() -> Any:
    try:
        from experiments import run_all
    except ImportError:
        here = Path.cwd()
        if not (here / "experiments" / "run_all.py").is_file():
            raise UsageError("the reproduction scripts live in the source tree's experiments/ "
                             "folder: run `dprivacy reproduce` from a dprivacy checkout") from None
        sys.path.insert(0, str(here))
        from experiments import run_all
    return run_all


def cmd_reproduce(args: argparse.Namespace) -> int:
    run_all = _experiments()
    if not args.all and not args.names:
        raise UsageError(f"name an experiment or pass --all; experiments: "
                         f"{', '.join(run_all.EXPERIMENTS)}")
    names = None if args.all else args.names
    for n in names or []:
        if n not in run_all.EXPERIMENTS:
            raise UsageError(f"unknown experiment {n!r}; choose from "
                             f"{', '.join(run_all.EXPERIMENTS)}")
    if args.outdir is not None and Path(args.outdir).exists() and not Path(args.outdir).is_dir():
        raise UsageError(f"--outdir {args.outdir!r} is a file: give a folder")
    kw = {"outdir": Path(args.outdir)} if args.outdir else {}
    run_all.run_all(quick=args.quick, seed=args.seed, names=names, **kw)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` subcommand."""
    s = sub.add_parser("reproduce", help="run the paper's experiments (source checkout)",
                       description="Run reproduction scripts from experiments/ and compare with "
                       "the paper's targets T1-T10.")
    s.add_argument("names", nargs="*", metavar="NAME", help="experiment(s) to run")
    s.add_argument("--all", action="store_true", help="run every experiment")
    s.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    s.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of every random draw of the scripts (default 0)")
    s.add_argument("--outdir", default=None,
                   help="default experiments/results/ (--quick: experiments/results/quick/)")
    s.set_defaults(func=cmd_reproduce)
