"""``dprivacy local simulate``: a randomised-response query answered by simulated users, estimated.

By default a Warner (yes/no) query; with ``--randomiser T.json`` any matrix randomiser, such as
the one ``dprivacy local optimal`` writes, whose input shares are then estimated with standard
errors (:func:`dprivacy.local.estimation.estimate_frequencies`). Every user's answer is drawn at
once from the rows of T in this process (:func:`dprivacy.local.simulation.simulate_outputs`);
``--http`` runs the deployment path instead: an aggregator on loopback, one enrolled device per
user with its own credential and durable budget, each answering through its agent over HTTP.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np

__all__ = ["add_parser", "std_error"]

EPILOG = """output: one JSON line with users, answered, true_share, estimate, std_error, mode
and seconds.

documented error: the estimate is unbiased for the users' true share and its standard
deviation is std_error = sqrt(p (1 - p) / users) / (2 p - 1) with p = e^eps / (1 + e^eps)
(Warner 1965); |estimate - true_share| <= 4.5 std_error except with probability below 1e-5.

with --randomiser: each user's true input is drawn from --shares (T's inputs, in order); the
line lists inputs, true_share, estimate and std_error per input, with method and cost (null
when cost(T) is infinite). A T that cannot tell its inputs apart is refused (exit 4).

examples:
  dprivacy local simulate --users 500 --eps 1 --share 0.3
  dprivacy local optimal --universe grid.csv --metric euclidean --param eps_per_unit=1 --out T.json
  dprivacy local simulate --randomiser T.json --users 10000 --method mle"""


def std_error(users: int, eps: float) -> float:
    """Standard deviation of Warner's estimate of a share from ``users`` binary answers.

    Examples
    --------
    >>> round(std_error(1000, math.log(3)), 6)  # p = 3/4: sqrt(3/16/1000) / (1/2)
    0.027386
    """
    p = math.exp(eps) / (1.0 + math.exp(eps))
    return math.sqrt(p * (1 - p) / users) / (2 * p - 1)


def _over_http(args: argparse.Namespace, values: np.ndarray, seeds: np.ndarray, q: Any) -> list[Any]:
    """Every user's answer to ``q`` through an aggregator on loopback and one agent per user,
    user ``i`` holding ``{"answer": values[i]}``."""
    import tempfile
    from pathlib import Path

    from dprivacy.local.aggregator.client import collect, connect, publish, run_server, simulate_users
    from dprivacy.local.aggregator.server import create_app
    from dprivacy.local.aggregator.store import AggregatorStore
    from dprivacy.local.device.agent import UserAgent
    from dprivacy.local.device.budget import PersonalBudget

    store = AggregatorStore()
    key = store.add_analyst("simulate")
    tokens = {f"u{i}": store.enrol(f"u{i}") for i in range(args.users)}
    srv = run_server(create_app(store), "127.0.0.1")
    try:
        with tempfile.TemporaryDirectory() as tmp, connect(srv.url, key) as c:
            publish(c, q)
            ledger = Path(tmp) / "budgets.sqlite"

            def agent(i: int) -> UserAgent:
                return UserAgent(f"u{i}", {"answer": _plain_value(values[i])},
                                 PersonalBudget(ledger, f"u{i}", total=args.budget), sandbox=None,
                                 pad=False, rng=int(seeds[i]))

            simulate_users(srv.url, range(args.users), agent, tokens, workers=args.workers)
            replies = collect(c, q.id)
    finally:
        srv.stop()
        store.close()
    return [r["result"] for r in replies if r["status"] == "ok"]


def _load_randomiser(path: str) -> Any:
    from dprivacy.cli.common import guard
    from dprivacy.cli.files import read_json
    from dprivacy.local.randomiser import MatrixRandomiser, randomiser_from_json

    doc = read_json(path, "--randomiser")
    with guard(f"--randomiser {path!r}"):
        T = randomiser_from_json(doc)  # noqa: N806
    if not isinstance(T, MatrixRandomiser):
        from dprivacy.cli.exits import InputError

        raise InputError(f"--randomiser {path!r} is a product randomiser: simulate takes a matrix "
                         "randomiser (such as the T.json of 'dprivacy local optimal')")
    return T


def _weights(text: str | None, n: int) -> np.ndarray:
    from dprivacy.cli.exits import UsageError

    if text is None or text == "uniform":
        return np.full(n, 1.0 / n)
    try:
        w = np.array([float(v) for v in text.split(",")])
    except ValueError:
        raise UsageError(f"--shares {text!r}: give {n} comma-separated weights, one per input of "
                         "T (or 'uniform')") from None
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise UsageError(f"--shares {text!r}: give {n} finite weights >= 0, not all 0, one per "
                         "input of T in its order")
    return w / w.sum()


def _run_randomiser(args: argparse.Namespace) -> int:
    """``--randomiser``: any matrix T, its input shares estimated with standard errors."""
    from dprivacy.cli.common import guard
    from dprivacy.cli.exits import OK, RefusedError, UsageError
    from dprivacy.local.estimation import check_identifiable, estimate_frequencies
    from dprivacy.local.query import Code, Query
    from dprivacy.local.simulation import simulate_outputs

    if args.eps is not None or args.share is not None:
        raise UsageError("--eps and --share describe the Warner query; with --randomiser the cost "
                         "is T's own and the inputs are drawn from --shares")
    method = args.method or "least_squares"
    T = _load_randomiser(args.randomiser)  # noqa: N806
    inputs = list(T.inputs or ())
    with guard(f"--randomiser {args.randomiser!r}", RefusedError):
        check_identifiable(T)  # before any simulated user answers
    w = _weights(args.shares, len(inputs))
    c = T.cost()
    if args.http and not c <= args.budget:
        raise UsageError(f"cost(T) = {c:.6g} is above --budget {args.budget:g} (or infinite: a zero "
                         "in some column): every device would refuse it; run without --http or "
                         "raise --budget")
    rng = np.random.default_rng(args.seed)
    truth = rng.choice(len(inputs), size=args.users, p=w)
    seeds = rng.integers(2**32, size=args.users)
    q = Query("estimate", T, Code.builtin("field"), fields=("answer",))
    values = np.empty(args.users, dtype=object)
    values[:] = [inputs[i] for i in truth.tolist()]
    t0 = time.perf_counter()
    if args.http:
        answers: Any = _over_http(args, values, seeds, q)
    else:
        z = simulate_outputs(q, {"answer": values}, rng)
        answers = [T.outputs[j] for j in z.tolist()] if T.outputs is not None else z
    with guard("estimate", RefusedError):
        est = estimate_frequencies(T, answers, method=method)
    share = np.bincount(truth, minlength=len(inputs)) / max(args.users, 1)
    print(json.dumps({"users": args.users, "answered": est.users, "inputs": inputs,
                      "true_share": share.tolist(), "estimate": est.shares.tolist(),
                      "std_error": est.std_errors.tolist(), "method": method,
                      "cost": c if math.isfinite(c) else None,
                      "mode": "http" if args.http else "vectorised",
                      "seconds": round(time.perf_counter() - t0, 3)}, allow_nan=False))
    return OK


def _plain_value(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def run(args: argparse.Namespace) -> int:
    """Simulate, estimate and print one JSON line (the handler of ``local simulate``)."""
    from dprivacy.cli.exits import OK, UsageError
    from dprivacy.local.case_studies import warner_estimate, warner_query
    from dprivacy.local.simulation import simulate_outputs

    if args.randomiser is not None:
        return _run_randomiser(args)
    if args.shares is not None or args.method is not None:
        raise UsageError("--shares and --method go with --randomiser")
    args.eps = 1.0 if args.eps is None else args.eps
    args.share = 0.3 if args.share is None else args.share
    rng = np.random.default_rng(args.seed)
    truth = rng.random(args.users) < args.share
    seeds = rng.integers(2**32, size=args.users)  # one per user: the run does not depend on threads
    q = warner_query("share", args.eps, "answer", ["yes", "no"])
    T = np.asarray(getattr(q.T, "matrix"))  # noqa: B009, N806 (a MatrixRandomiser)
    t0 = time.perf_counter()
    if args.http:
        answers = _over_http(args, np.where(truth, "yes", "no"), seeds, q)
        est = warner_estimate(answers, T, ["yes", "no"])[0]
        answered = len(answers)
    else:
        z = simulate_outputs(q, {"answer": np.where(truth, "yes", "no")}, rng)
        est, answered = warner_estimate(z, T)[0], int(z.size)
    print(json.dumps({"users": args.users, "answered": answered, "true_share": float(truth.mean()),
                      "estimate": float(est), "std_error": std_error(args.users, args.eps),
                      "mode": "http" if args.http else "vectorised",
                      "seconds": round(time.perf_counter() - t0, 3)}))
    return OK


def add_parser(sub: Any) -> None:
    """Add ``simulate`` to the ``local`` sub-commands."""
    from dprivacy.cli.common import bounded_int, budget_arg, nonneg_int

    def share(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0.0 <= v <= 1.0:
            raise argparse.ArgumentTypeError(f"{v} is not a share in [0, 1]")
        return v

    s = sub.add_parser("simulate", help="a Warner query, or any randomiser T, answered by "
                       "simulated users; estimate",
                       description=__doc__.split("\n\n")[1].replace("``", ""),
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--users", type=bounded_int(1, 10**9), default=500, metavar="N",
                   help="number of simulated users (default 500)")
    s.add_argument("--eps", type=budget_arg, default=None,
                   help="privacy budget of the Warner query: cost(T) each user pays (default 1)")
    s.add_argument("--share", type=share, default=None,
                   help="probability that a user's true answer is 'yes' (default 0.3)")
    s.add_argument("--randomiser", metavar="JSON", default=None,
                   help="a matrix randomiser T as JSON (e.g. written by 'dprivacy local optimal') "
                        "instead of the Warner query: users hold its inputs, their shares are "
                        "estimated with standard errors")
    s.add_argument("--shares", metavar="W1,W2,...", default=None,
                   help="with --randomiser: weights of T's inputs (in order) from which each "
                        "user's true input is drawn (default uniform)")
    s.add_argument("--method", choices=("least_squares", "mle"), default=None,
                   help="with --randomiser: least squares (unbiased; default) or maximum "
                        "likelihood on the simplex (EM)")
    s.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the users' true answers and of their randomness (default 0; "
                        "the same seed gives the same output)")
    s.add_argument("--http", action="store_true",
                   help="run the deployment path instead: aggregator on loopback, one enrolled "
                        "device per user answering through its agent over HTTP (slower)")
    s.add_argument("--budget", type=budget_arg, default=2.0,
                   help="with --http: each user's total budget in a durable ledger (default 2)")
    s.add_argument("--workers", type=bounded_int(1, 64), default=2,
                   help="with --http: threads of simulated devices, each with its own HTTP "
                        "client (default 2)")
    s.set_defaults(local_func=run)
