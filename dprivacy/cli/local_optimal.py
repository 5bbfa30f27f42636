"""``dprivacy local optimal``: the optimal d_X-local randomiser of a universe, from the command line.

The universe and the metric are given as to ``dprivacy design`` (``--universe``, ``--key``,
``--coords``, ``--metric``, ``--param``); the budget matrix ``eps = metric.budget(universe)`` is the
privacy constraint ``T[x, z] <= exp(eps[x, x']) T[x', z]``, and the linear program of Bordenabe,
Chatzikokolakis and Palamidessi (CCS 2014) minimises the expected loss under a prior
(:func:`dprivacy.local.optimal_randomiser`). T is written as a randomiser JSON (the ``T`` of a
query; :func:`dprivacy.local.randomiser_from_json` loads it), its inputs being the universe's
element labels, with the LP's certificate beside it: the expected loss, a proven lower bound on
the optimum and their relative gap. ``--gap`` stops the solver once that gap is reached and
``--time-limit`` after that many seconds; either way T is checked to be private before it is
written.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from dprivacy.cli.exits import UsageError

__all__ = ["add_parser"]

EPILOG = """example:
  dprivacy local optimal --universe grid.csv --metric euclidean --param eps_per_unit=0.5 \\
      --gap 0.001 --time-limit 600 --out T.json
prints the expected loss of T, the certified lower bound of the LP (no eps-d_X-private
randomiser over the same outputs has a smaller expected loss), their gap, cost(T) and the
independent d_X check, then writes T.json.
exit codes: 0 written, 2 usage, 3 a missing or malformed input, 4 refused (the d_X check failed)"""


def _prior(arg: str | None, table: Any, n: int, where: str) -> np.ndarray | None:
    if arg is None or arg == "uniform":
        return None
    from dprivacy.cli.files import to_numbers

    if arg not in table.columns:
        raise UsageError(f"--prior {arg!r} is not a column of {where}; give a numeric column "
                         "(weights, normalised to sum 1) or 'uniform'")
    w = np.asarray(to_numbers(table[arg], f"column {arg!r}", where), dtype=float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise UsageError(f"--prior {arg!r}: the weights must be finite, >= 0 and not all 0")
    return w / w.sum()


def run(args: argparse.Namespace) -> int:
    """Solve, check, print the certificate and write T (the handler of ``local optimal``)."""
    from dprivacy.cli.common import guard, universe_and_metric
    from dprivacy.cli.exits import OK
    from dprivacy.cli.files import check_out
    from dprivacy.local.cost import cost
    from dprivacy.local.dx_randomiser import optimal_randomiser

    out = check_out(args.out, "--out", [args.universe])
    U, M, spec, table = universe_and_metric(args)  # noqa: N806
    where = f"--universe {args.universe!r}"
    prior = _prior(args.prior, table, U.N, where)
    quality = None
    if args.quality == "metric":
        quality = np.asarray(M.budget(U), dtype=float)
        if not np.all(np.isfinite(quality)):
            raise UsageError("--quality metric: the metric has infinite distances; use "
                             "--quality coords")
    elif U.coords is None:
        raise UsageError(f"--quality coords: {where} has no coordinate columns (pass --coords) ")
    opts: dict[str, Any] = {"method": args.method}
    if args.time_limit is not None:
        opts["time_limit"] = args.time_limit
    if args.gap is not None:
        if args.method != "lagrangian":
            raise UsageError(f"--gap needs --method lagrangian (--method {args.method} solves to "
                             "optimality)")
        if not 0 <= args.gap < 1:
            raise UsageError(f"--gap {args.gap}: give a relative gap in [0, 1), e.g. 0.001")
        opts["gap"] = args.gap
    with guard(f"optimal randomiser (N = {U.N}, --method {args.method})"):
        r = optimal_randomiser(U, M, loss=args.loss, quality=quality, prior=prior,
                               dilation=args.dilation, **opts)
    T = r.randomiser  # noqa: N806
    labels = U.labels()
    lp = r.lp
    bound = float(lp.lower_bound)
    status = str(lp.info.get("status", ""))
    exact = "ptimal" in status or status in ("Gap reached", "Stalled")
    c = cost(T.matrix)
    cert = {"metric": spec.name, "params": list(args.param), "universe": args.universe,
            "universe_fingerprint": U.fingerprint(), "loss": args.loss, "quality": args.quality,
            "prior": args.prior or "uniform", "method": args.method, "dilation": args.dilation,
            "expected_loss": lp.expected_loss, "lower_bound": bound if math.isfinite(bound) else None,
            "lower_bound_of": "the spanner LP" if args.dilation else "every eps-d_X-private T",
            "lp_status": status, "cost": c, "gap": r.gap if math.isfinite(r.gap) else None,
            "solve_seconds": lp.solve_seconds,
            "dx_check": {"ok": r.check.ok, "worst_pair": list(r.check.worst), "ratio": r.check.ratio,
                         "checked": r.checked}}
    doc = {"kind": "matrix", "matrix": T.matrix.tolist(), "inputs": labels,
           "outputs": [labels[int(j)] for j in (T.outputs or [])], "optimal": cert}
    with guard(f"--out {args.out!r}"):
        out.write_text(json.dumps(doc, allow_nan=False) + "\n")
    gap = lp.expected_loss - bound
    rel = f" ({100 * r.gap:.3g} %)" if math.isfinite(r.gap) else ""
    print(f"optimal d_X-local randomiser: N = {U.N} inputs, {len(T.outputs or [])} outputs used, "
          f"metric {spec.name}, loss {args.loss} ({args.quality}), prior {args.prior or 'uniform'}")
    print(f"expected loss {lp.expected_loss:.10g}; certified lower bound {bound:.10g}"
          + (" (of the spanner LP)" if args.dilation else "") + f"; gap {gap:.3g}{rel}"
          + ("" if exact else f"  (the LP stopped early: {status})")
          + f"; {lp.solve_seconds:.1f} s")
    print(f"cost(T) = {c:.6g}; d_X check ({r.checked}): {'ok' if r.check.ok else 'VIOLATED'} "
          f"(worst pair {r.check.worst}, loss/eps = {r.check.ratio:.6g})")
    print(f"T written to {out}  (load it with dprivacy.local.randomiser_from_json)")
    if not math.isfinite(c):
        print("note: cost(T) is infinite (a zero in some column): only metric-bounded (d_X) "
              "use is private; a plain local-DP budget would refuse it")
    return OK


def add_parser(sub: Any) -> None:
    """Add ``optimal`` to the ``local`` sub-commands."""
    from dprivacy.cli.common import add_universe_metric, budget_arg
    from dprivacy.cli.params import metrics_help

    s = sub.add_parser("optimal", help="the optimal d_X-local randomiser LP -> T as JSON",
                       description=__doc__.split("\n\n")[1].replace("``", ""),
                       epilog=metrics_help() + "\n\n" + EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_universe_metric(s)
    g = s.add_argument_group("the program")
    g.add_argument("--loss", choices=("distance", "squared"), default="distance",
                   help="expected distance (default) or expected squared distance between the "
                        "true and the reported element")
    g.add_argument("--quality", choices=("metric", "coords"), default="metric",
                   help="the distance of the loss: the metric's budget eps[x, z] (default; any "
                        "universe) or the Euclidean distance of the coordinates")
    g.add_argument("--prior", metavar="COLUMN", default=None,
                   help="a numeric column of the universe CSV with the prior weight of each "
                        "element (normalised), or 'uniform' (default)")
    g.add_argument("--dilation", type=budget_arg, default=None, metavar="DELTA",
                   help="constrain only the edges of a greedy spanner of this dilation (> 1) with "
                        "eps / DELTA: fewer constraints, still eps-d_X-private, not optimal")
    g.add_argument("--method", choices=("lagrangian", "dantzig_wolfe", "cutting_planes", "direct"),
                   default="lagrangian",
                   help="LP method (default lagrangian: decomposed by output column, stopped at "
                        "--gap; the others solve to optimality)")
    g.add_argument("--gap", type=float, default=None, metavar="REL",
                   help="stop once the expected loss is within this relative gap of the proven "
                        "lower bound (default 1e-6; e.g. 0.001 for 0.1 %%)")
    g.add_argument("--time-limit", type=budget_arg, default=None, metavar="SECONDS",
                   help="stop the LP after this many seconds (T is then private; the certificate "
                        "reports the gap reached)")
    s.add_argument("--out", required=True, metavar="JSON", help="file to write T to")
    s.set_defaults(local_func=run)
