"""``dprivacy release``: verify a config against your inputs, charge the ledger, release.

Order of work (nothing is charged or written unless every earlier step passed):
check --out and --ledger paths; read and check the universe, metric, queries and records; verify
the config for them; open the ledger budget; charge the release (committed to disk); draw the
noise; write the answers atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dprivacy.cli.common import add_inputs, budget_arg, guard, inputs_from, nonneg_int
from dprivacy.cli.configs import load_config
from dprivacy.cli.exits import BudgetError, CLIError, InputError, UsageError, one_line
from dprivacy.cli.files import check_out, read_csv, write_text
from dprivacy.cli.gaussian_cli import add_noise_args, expect_config
from dprivacy.cli.inputs import histogram
from dprivacy.cli.params import metrics_help
from dprivacy.errors import BudgetExceededError, ValidationError

EXAMPLE = """example (files in the source tree's examples/ folder):
  dprivacy release config.json --records examples/visits.csv --count-column visits \\
      --ledger budget.sqlite --budget 3 --out answers.csv \\
      --universe examples/cities.csv --metric geodesic --param eps_per_km=0.05 \\
      --queries examples/queries_named.csv

budget: every release is charged to a budget kept in an SQLite ledger (--ledger). Budgets count
multiples of the metric: a release of a config designed for the metric costs 1 (its max privacy
ratio, alpha <= 1), and k releases on the same records are (k * alpha) * d_X-private. Give
--budget K the first time a budget name is used; afterwards the stored K is used (a different
--budget is refused). A budget is tied to the universe and metric it was first used with.
A Gaussian config (design --noise gaussian --rho R) is charged to a zCDP budget of the same name
(--budget then counts rho per unit of the metric): releases of it cost R each, and Laplace
configs released with --budget-notion zcdp are charged rho = alpha in the same budget.
"""

#: Ledger record that ties a budget name to one (universe, metric) fingerprint.
_BINDING = "dprivacy-cli-metric:"


def _check_ledger_path(path: str) -> Path:
    if not path.strip():
        raise UsageError("--ledger is empty: give the path of an SQLite ledger file")
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--ledger {path!r} is a directory: give a file path (created if "
                         "missing)")
    if p.exists() and not p.is_file():
        raise UsageError(f"--ledger {path!r} is not a regular file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--ledger {path!r}: folder {str(parent)!r} does not exist")
    if p.exists():
        try:
            with p.open("rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise UsageError(f"--ledger {path!r} cannot be read ({exc.strerror or exc}); check "
                             "its permissions") from exc
        if head and head != b"SQLite format 3\x00":
            raise UsageError(f"--ledger {path!r} is not an SQLite ledger (a file of another "
                             "kind): give a new path or a ledger written by dprivacy")
    elif not os.access(parent, os.W_OK):
        raise UsageError(f"--ledger {path!r}: folder {str(parent)!r} is not writable")
    return p


def _open_budget(args: argparse.Namespace, metric_fingerprint: str, notion: str = "pure") -> Any:
    """The durable accountant named ``--budget-name`` in ``--ledger`` (created with --budget):
    pure (multiples of the metric) or zCDP (rho per unit of the metric)."""
    from dprivacy.accounting import Accountant
    from dprivacy.tables.budgets.ledger import Ledger

    where = f"--ledger {args.ledger!r} (budget {args.budget_name!r})"
    if args.budget is None and not Path(args.ledger).exists():
        raise UsageError(f"{where} does not exist yet: give --budget K to create it (K in "
                         "multiples of the metric, e.g. --budget 3 for three releases)")
    with guard(where, UsageError):
        try:
            ledger = Ledger(args.ledger)
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{where}: {exc}; give the path of a ledger written by dprivacy "
                             "(or a new path)") from exc
        try:
            amount = {"total": args.budget} if notion == "pure" else {"rho": args.budget}
            acc = Accountant.durable(ledger, **amount, name=args.budget_name, notion=notion)
        except ValidationError as exc:
            text = one_line(exc)
            if "has no release budget" in text:
                raise UsageError(f"{where} does not exist yet: give --budget K to create it (K "
                                 "in multiples of the metric, e.g. --budget 3 for three "
                                 "releases)") from exc
            if "was created with" in text:
                stored = Accountant.durable(ledger, None, name=args.budget_name, notion=notion)
                raise UsageError(f"{where} was created with a total of {stored.total:.9g} "
                                 f"({_amount(stored.remaining)} left), not --budget {args.budget:g}: "
                                 "drop --budget to continue it, or use another --budget-name"
                                 ) from exc
            raise
        # Tie the budget to one universe + metric: budgets count multiples of one metric.
        tag = int(hashlib.sha256(metric_fingerprint.encode()).hexdigest()[:12], 16)
        try:
            ledger.named_record(_BINDING + args.budget_name, tag * 1e-9)
        except ValidationError:
            raise UsageError(f"{where} was opened with another universe or metric: a budget "
                             "counts multiples of one metric; use the inputs it was created "
                             "with, or another --budget-name") from None
    return acc


def cmd_release(args: argparse.Namespace) -> int:
    import pandas as pd

    out = check_out(args.out, "--out", [args.records, args.universe, args.queries, args.config])
    if args.ledger is None:
        raise UsageError("release needs --ledger PATH (and --budget K the first time): every "
                         "release is charged to a budget; see dprivacy release --help")
    _check_ledger_path(args.ledger)
    inp = inputs_from(args)
    cfg = load_config(args.config, inp)
    noise, rho = expect_config(cfg, args, args.config)
    if cfg.kind not in ("laplace", "strategy", "gaussian"):
        raise UsageError(f"CONFIG {args.config!r} is a mechanism of kind {cfg.kind!r}: the command line "
                         "releases Laplace and strategy configs (made by design or demo); release this one "
                         "from Python with an Accountant")
    mech = cfg.to_mechanism()
    records = read_csv(args.records, "--records")
    x = histogram(inp.universe, records, f"--records {args.records!r}", args.count_column)
    notion = args.budget_notion or ("zcdp" if noise == "gaussian" else "pure")
    if noise == "gaussian" and notion == "pure":
        raise UsageError("--budget-notion pure: a Gaussian release has no pure-epsilon cost; "
                         "charge it to a zCDP budget (--budget-notion zcdp, the default for it)")
    acc = _open_budget(args, cfg.identity["metric"]["fingerprint"], notion)
    secure = args.seed is None
    if not secure:
        print("warning: --seed uses numpy's sampler, which is not floating-point safe; "
              "for simulations only", file=sys.stderr)
    where = f"--ledger {args.ledger!r} (budget {args.budget_name!r})"
    try:
        with guard(where):
            y = mech.release(x, rng=args.seed, secure=secure, accountant=acc)
    except BudgetError:
        raise
    except BudgetExceededError as exc:  # pragma: no cover (guard maps it)
        raise BudgetError(f"{where}: {one_line(exc)}") from exc
    unit = "x the metric" if notion == "pure" else "rho per unit of the metric"
    if cfg.kind == "strategy":  # least-squares answers: their standard deviations
        table = pd.DataFrame({"query": inp.workload.query_names(), "answer": y,
                              "std": np.sqrt(mech.query_variances())})
    elif cfg.kind == "gaussian":
        table = pd.DataFrame({"query": inp.workload.query_names(), "answer": y,
                              "sigma": mech.noise_scale})
    else:
        table = pd.DataFrame({"query": inp.workload.query_names(), "answer": y,
                              "noise_scale": mech.noise_scale, "w": mech.design.w})
    buf = io.StringIO()
    table.to_csv(buf, index=False, float_format="%.17g")
    try:
        write_text(out, buf.getvalue(), "--out")
    except (OSError, CLIError) as exc:
        raise InputError(f"--out {args.out!r}: cannot write the answers ({one_line(exc, 200)}); "
                         f"the release was charged ({_amount(_charged(mech, notion))} {unit}) "
                         "but no answer was written or shown") from exc
    print(f"released {inp.workload.m} answers for n = {float(np.sum(x)):g} records to {out}; "
          f"charged {_amount(_charged(mech, notion))} {unit}, "
          f"{_amount(acc.remaining)} of {_amount(acc.total)} left in {where}")
    return 0


def _charged(mech: Any, notion: str) -> float:
    """What the release cost in the budget's notion (a pure alpha is charged rho = alpha)."""
    from dprivacy.accounting import pure_to_zcdp

    if notion == "zcdp" and mech.release_notion == "pure":
        return pure_to_zcdp(mech.release_cost)
    return float(mech.release_cost)


def _amount(v: float) -> str:
    from dprivacy.accounting import format_amount

    return format_amount(v)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``release`` subcommand."""
    s = sub.add_parser("release", help="verify a config, charge the ledger, release answers",
                       description="Verify CONFIG against your inputs, build the histogram of "
                       "RECORDS, charge the release to the ledger's budget, and write the noisy "
                       "answers (eq. (5)) as CSV.",
                       epilog=EXAMPLE + "\n" + metrics_help(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("config", metavar="CONFIG", help="config JSON written by design or demo")
    s.add_argument("--records", required=True, metavar="CSV",
                   help="one row per record with the universe's key columns")
    s.add_argument("--count-column", metavar="COL",
                   help="records are pre-aggregated: COL holds the count of each row")
    s.add_argument("--out", required=True, metavar="CSV", help="answers CSV to write")
    s.add_argument("--ledger", metavar="SQLITE", help="budget ledger file (required; created "
                   "if missing)")
    s.add_argument("--budget", type=budget_arg, metavar="K", default=None,
                   help="total budget in multiples of the metric (required the first time)")
    s.add_argument("--budget-name", default="default", metavar="NAME",
                   help="name of the budget in the ledger (default 'default'; one per "
                        "protected data set)")
    s.add_argument("--budget-notion", choices=("pure", "zcdp"), default=None,
                   help="what the budget counts: 'pure' (multiples of the metric; default for "
                        "Laplace configs) or 'zcdp' (rho per unit of the metric; default for "
                        "Gaussian configs; a Laplace release of alpha is charged rho = alpha, so "
                        "both kinds compose in one zCDP budget)")
    add_noise_args(s, design=False)
    s.add_argument("--seed", type=nonneg_int, default=None,
                   help="seeded numpy sampler (simulation only; default: OpenDP's safe sampler)")
    add_inputs(s)
    s.set_defaults(func=cmd_release)
