"""``dprivacy local simulate``: a Warner (randomised response) query answered by simulated users.

By default every user's answer is drawn at once from the rows of T in this process
(:func:`dprivacy.local.simulation.simulate_outputs`); ``--http`` runs the deployment path instead:
an aggregator on loopback, one enrolled device per user with its own credential and durable
budget, each answering through its agent over HTTP.
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

example:
  dprivacy local simulate --users 500 --eps 1 --share 0.3"""


def std_error(users: int, eps: float) -> float:
    """Standard deviation of Warner's estimate of a share from ``users`` binary answers.

    Examples
    --------
    >>> round(std_error(1000, math.log(3)), 6)  # p = 3/4: sqrt(3/16/1000) / (1/2)
    0.027386
    """
    p = math.exp(eps) / (1.0 + math.exp(eps))
    return math.sqrt(p * (1 - p) / users) / (2 * p - 1)


def _over_http(args: argparse.Namespace, truth: np.ndarray, seeds: np.ndarray, q: Any) -> list[Any]:
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
                return UserAgent(f"u{i}", {"answer": "yes" if truth[i] else "no"},
                                 PersonalBudget(ledger, f"u{i}", total=args.budget), sandbox=None,
                                 pad=False, rng=int(seeds[i]))

            simulate_users(srv.url, range(args.users), agent, tokens, workers=args.workers)
            replies = collect(c, q.id)
    finally:
        srv.stop()
        store.close()
    return [r["result"] for r in replies if r["status"] == "ok"]


def run(args: argparse.Namespace) -> int:
    """Simulate, estimate and print one JSON line (the handler of ``local simulate``)."""
    from dprivacy.cli.exits import OK
    from dprivacy.local.case_studies import warner_estimate, warner_query
    from dprivacy.local.simulation import simulate_outputs

    rng = np.random.default_rng(args.seed)
    truth = rng.random(args.users) < args.share
    seeds = rng.integers(2**32, size=args.users)  # one per user: the run does not depend on threads
    q = warner_query("share", args.eps, "answer", ["yes", "no"])
    T = np.asarray(getattr(q.T, "matrix"))  # noqa: B009, N806 (a MatrixRandomiser)
    t0 = time.perf_counter()
    if args.http:
        answers = _over_http(args, truth, seeds, q)
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

    s = sub.add_parser("simulate", help="a Warner query answered by simulated users; estimate",
                       description=__doc__.split("\n\n")[1].replace("``", ""),
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--users", type=bounded_int(1, 10**9), default=500, metavar="N",
                   help="number of simulated users (default 500)")
    s.add_argument("--eps", type=budget_arg, default=1.0,
                   help="privacy budget of the query: cost(T) each user pays (default 1)")
    s.add_argument("--share", type=share, default=0.3,
                   help="probability that a user's true answer is 'yes' (default 0.3)")
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
