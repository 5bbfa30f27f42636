"""What the subcommands share: the input flags, argument types and library-error translation."""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dprivacy.cli.exits import (
    BudgetError,
    CLIError,
    InputError,
    RefusedError,
    UsageError,
    one_line,
)
from dprivacy.cli.files import to_numbers
from dprivacy.cli.inputs import BUILTIN, implicit_workload, load_universe, load_workload
from dprivacy.cli.params import METRICS, MIN_BUDGET, MetricSpec, make_metric, spec_of
from dprivacy.errors import (
    BudgetExceededError,
    ConfigMismatchError,
    DPrivacyError,
    PrivacyViolationError,
)
from dprivacy.metrics.base import Metric
from dprivacy.universe import Universe
from dprivacy.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

    from dprivacy.implicit_workload import ImplicitWorkload

#: Library and parser failures that mean "this input is wrong" when raised while reading it.
INPUT_FAILURES = (DPrivacyError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                  FloatingPointError, ZeroDivisionError, sqlite3.Error, OSError)


@contextmanager
def guard(where: str, error: type[CLIError] = InputError) -> Iterator[None]:
    """Turn a failure inside the block into a one-line :class:`CLIError` prefixed by ``where``
    (the flag and file being processed); refusals and budget errors keep their own exit codes."""
    try:
        yield
    except CLIError:
        raise
    except BudgetExceededError as exc:
        raise BudgetError(f"{where}: {one_line(exc)}") from exc
    except (ConfigMismatchError, PrivacyViolationError) as exc:
        raise RefusedError(f"REFUSED: {where}: {one_line(exc)}") from exc
    except MemoryError as exc:
        raise InputError(f"{where}: out of memory; the input is too large for this machine") \
            from exc
    except INPUT_FAILURES as exc:
        raise error(f"{where}: {one_line(exc) or type(exc).__name__}") from exc


# ------------------------------------------------------------------ argument types
def nonneg_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        v = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} is negative; give a whole number >= 0")
    return v


def bounded_int(lo: int, hi: int):  # noqa: ANN201
    """argparse type: an integer in [lo, hi]."""
    def parse(text: str) -> int:
        v = nonneg_int(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is outside [{lo}, {hi}]")
        return v

    parse.__name__ = "integer"
    return parse


def budget_arg(text: str) -> float:
    """argparse type: a positive privacy budget (no NaN, no inf, no subnormal)."""
    from dprivacy.cli.params import budget

    try:
        return budget(text, "value")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("value")
                                         .lstrip(" :=") or "not a budget") from None


# ------------------------------------------------------------------ the input flags
def add_universe_metric(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--universe, --key, --coords, --metric, --param (all from the caller); the group."""
    g = p.add_argument_group("inputs (always from you: a config never vouches for itself)")
    g.add_argument("--universe", required=True, metavar="CSV",
                   help=f"elements, one per row (header row required); or {' / '.join(BUILTIN)}")
    g.add_argument("--key", metavar="COLS",
                   help="columns identifying an element in the records (comma-separated; "
                        "default: name, else the coordinates, else every column)")
    g.add_argument("--coords", metavar="COLS",
                   help="coordinate columns (default latitude,longitude or x,y when present)")
    g.add_argument("--metric", required=True, metavar="NAME", help=f"one of {', '.join(METRICS)}")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="metric parameter, repeatable, e.g. eps_per_unit=0.5 (no defaults for "
                        "budgets: see the list below)")
    return g


def add_inputs(p: argparse.ArgumentParser) -> None:
    """--universe, --key, --coords, --metric, --param, --queries (all from the caller)."""
    g = add_universe_metric(p)
    q = g.add_mutually_exclusive_group(required=True)
    q.add_argument("--queries", metavar="FILE",
                   help="query matrix, one query per row: .npy (m, N) or .csv (optional header "
                        "row of element names, optional first column of query names)")
    q.add_argument("--workload", metavar="KIND",
                   help="instead of --queries: every range or prefix of a line ('ranges', "
                        "'prefixes'), every rectangle of a grid ('rectangles'; never written "
                        "out: for --method strategy), or the K-way marginals of a product "
                        "universe ('marginals:K')")


@dataclass(frozen=True)
class Inputs:
    """The universe, metric and workload a command was given."""

    universe: Universe
    metric: Metric
    workload: Workload | ImplicitWorkload
    spec: MetricSpec


def _column_reader(df: pd.DataFrame, where: str):  # noqa: ANN202
    def column(name: str) -> list[float] | None:
        if name not in df.columns:
            return None
        return to_numbers(df[name], f"column {name!r}", where).tolist()

    return column


def universe_and_metric(args: argparse.Namespace) -> tuple[Universe, Metric, MetricSpec, pd.DataFrame]:
    """Read and check the universe and metric named by the arguments (and the universe's table)."""
    spec = spec_of(args.metric)
    U, table = load_universe(args.universe, spec, args.key, args.coords)  # noqa: N806
    if U.N < 2:
        raise InputError(f"--universe {args.universe!r} has a single element: there is nothing "
                         "to protect; give a universe of at least two elements")
    M = make_metric(spec.name, args.param, _column_reader(table, f"--universe {args.universe!r}"))  # noqa: N806
    where = f"--metric {spec.name} on --universe {args.universe!r}"
    with guard(where, UsageError):
        named = getattr(M, "weights", None) or getattr(M, "budgets", None) or {}
        extra = [a for a in named if a not in U.key_columns] if spec.name in (
            "attribute", "value") else []
        if extra:
            raise UsageError(f"{where}: weights name {extra}, which are not key columns "
                             f"{list(U.key_columns)}; weigh the key columns (or pass --key)")
        eps_min = M.eps_min(U)
        if not (eps_min >= MIN_BUDGET or np.isinf(eps_min)) and U.N > 1:
            raise UsageError(f"{where}: the smallest budget between two elements, eps_min = "
                             f"{eps_min:g}, underflows; raise the --param budget")
    return U, M, spec, table


def inputs_from(args: argparse.Namespace) -> Inputs:
    """Read and check the universe, metric and workload named by the arguments."""
    U, M, spec, _ = universe_and_metric(args)  # noqa: N806
    if getattr(args, "workload", None):
        W: Workload | ImplicitWorkload = implicit_workload(args.workload, U)  # noqa: N806
    else:
        W = load_workload(args.queries, U)  # noqa: N806
    return Inputs(U, M, W, spec)
