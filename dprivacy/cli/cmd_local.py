"""``dprivacy local serve | agent | cost | simulate``: the local model from the command line.

``register(subparsers)`` adds the ``local`` command to the main ``dprivacy`` parser (its one
registration point, :data:`dprivacy.cli.app.COMMANDS`); ``python -m dprivacy.local ...`` runs the
same commands standalone.

* ``serve``: the aggregator (uvicorn) on ``--host``/``--port`` (port 0 picks a free one; the
  first line printed is ``listening on URL``).
* ``agent``: one user's agent polling a server: data from a JSON file, a durable budget in an
  SQLite ledger, sandboxed analyst code (refused where bubblewrap does not work).
* ``cost T.csv``: cost(T) of a matrix file (Paper IV Def. 3), and with ``--metric D.csv`` the
  d_X check of every pair.
* ``simulate``: a server, N simulated users and a Warner query, end to end, in one command.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import time
from typing import Any

import numpy as np

__all__ = ["register", "run"]

DESCRIPTION = ("the local model (PreTPost) from the command line: an aggregator (serve), a user's "
               "agent (agent), the cost of a randomiser matrix (cost), an end-to-end run (simulate)")


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from dprivacy.local.aggregator.server import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning", access_log=False))
    server.run(sockets=[sock])
    return 0


def _cmd_agent(args: argparse.Namespace) -> int:
    import httpx

    from dprivacy.cli.files import read_json
    from dprivacy.local.aggregator.client import run_agent
    from dprivacy.local.device.agent import UserAgent
    from dprivacy.local.device.budget import PersonalBudget
    from dprivacy.local.device.policy import PublicPolicy

    data = read_json(args.data, "--data")
    per_field = json.loads(args.per_field) if args.per_field else None
    budget = PersonalBudget(args.ledger, args.user, total=args.budget, per_field=per_field,
                            per_event=args.per_event)
    policy = PublicPolicy(allowed_fields=args.fields, max_cost=args.max_cost)
    agent = UserAgent(args.user, data, budget, policy=policy, sandbox="auto", pad=not args.no_pad)
    with httpx.Client(base_url=args.server, timeout=60) as c:
        run_agent(c, agent, interval=args.interval, polls=args.polls)
    print(json.dumps({"user": args.user, "remaining": agent.remaining(),
                      "answered": sorted(agent.history)}))
    return 0


def _read_matrix(path: str, flag: str) -> np.ndarray:
    """A numeric CSV matrix (no header) through the CLI's checked readers: a missing, empty,
    ragged or non-numeric file is a one-line input error naming ``flag`` and the file."""
    from dprivacy.cli.files import _where, read_csv, to_numbers

    df = read_csv(path, flag, header=False)
    where = _where(flag, path)
    cols = [to_numbers(df[c], f"column {k + 1}", where) for k, c in enumerate(df.columns)]
    return np.column_stack(cols) if cols else np.zeros((0, 0))


def _cmd_cost(args: argparse.Namespace) -> int:
    from dprivacy.cli.exits import OK, REFUSED
    from dprivacy.local.cost import check_dx, cost

    T = _read_matrix(args.matrix, "T.csv")  # noqa: N806
    c = cost(T)
    print(f"cost(T) = {c:.12g}" + ("  (a column has a zero: refused)" if math.isinf(c) else ""))
    if args.metric:
        res = check_dx(T, _read_matrix(args.metric, "--metric"))
        x, y = res.worst
        print(f"d_X check: {'ok' if res.ok else 'VIOLATED'}; worst pair ({x}, {y}): loss "
              f"{res.loss:.6g} vs budget {res.eps:.6g}")
        return OK if res.ok else REFUSED
    return OK if math.isfinite(c) else REFUSED


def _cmd_simulate(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    import httpx

    from dprivacy.local.aggregator.client import collect, publish, run_server, simulate_users
    from dprivacy.local.aggregator.server import create_app
    from dprivacy.local.case_studies import warner_estimate, warner_query
    from dprivacy.local.device.agent import UserAgent
    from dprivacy.local.device.budget import PersonalBudget

    rng = np.random.default_rng(args.seed)
    truth = rng.random(args.users) < args.share
    seeds = rng.integers(2**32, size=args.users)  # one per user: the run does not depend on threads
    t0 = time.perf_counter()
    srv = run_server(create_app(), "127.0.0.1")
    q = warner_query("share", args.eps, "answer", ["yes", "no"])
    try:
        with tempfile.TemporaryDirectory() as tmp, httpx.Client(base_url=srv.url, timeout=60) as c:
            publish(c, q)
            ledger = Path(tmp) / "budgets.sqlite"

            def agent(i: int) -> UserAgent:
                return UserAgent(f"u{i}", {"answer": "yes" if truth[i] else "no"},
                                 PersonalBudget(ledger, f"u{i}", total=args.budget), sandbox=None,
                                 pad=False, rng=int(seeds[i]))

            simulate_users(srv.url, range(args.users), agent, workers=args.workers)
            replies = collect(c, q.id)
    finally:
        srv.stop()
    ok = [r["result"] for r in replies if r["status"] == "ok"]
    est = warner_estimate(ok, np.asarray(getattr(q.T, "matrix")), ["yes", "no"])[0]  # noqa: B009 (a MatrixRandomiser)
    print(json.dumps({"users": args.users, "answered": len(ok), "true_share": float(truth.mean()),
                      "estimate": float(est), "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


def _add(sub: Any) -> None:
    s = sub.add_parser("serve", help="run the aggregator (HTTP, JSON)",
                       description="Run the aggregator: analysts publish queries (POST /queries), "
                       "agents fetch them and post replies, analysts collect them (GET "
                       "/replies/{id}). The first line printed is 'listening on URL'.")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    s.set_defaults(local_func=_cmd_serve)

    s = sub.add_parser("agent", help="run one user's agent against a server",
                       description="Run one user's agent: poll the aggregator for queries, price "
                       "each one's randomiser, check it against the public policy and the durable "
                       "personal budget (charged before any data is read), and reply with the "
                       "randomised answer. On exit it prints the remaining budgets.")
    s.add_argument("--server", required=True, help="aggregator URL, e.g. http://127.0.0.1:8000")
    s.add_argument("--user", required=True, help="the user's id (names the budget in the ledger)")
    s.add_argument("--data", required=True, help="JSON file: an object of the user's private fields")
    s.add_argument("--ledger", required=True, help="SQLite file of the durable personal budget")
    s.add_argument("--budget", type=float, default=None,
                   help="total budget, the first time (later runs continue the stored one)")
    s.add_argument("--per-field", default=None,
                   help='budgets per field, JSON, e.g. {"age": 0.5} (default: only the total)')
    s.add_argument("--per-event", type=float, default=None,
                   help="budget per event (a query's event label; needs --budget, since the "
                   "analyst chooses the labels), default none")
    s.add_argument("--fields", nargs="*", default=None,
                   help="the fields offered to queries (default all fields of --data)")
    s.add_argument("--max-cost", type=float, default=math.inf,
                   help="refuse any single query costing more than this (default no limit)")
    s.add_argument("--interval", type=float, default=1.0,
                   help="seconds between two polls of the server (default 1)")
    s.add_argument("--polls", type=int, default=None,
                   help="stop after this many polls (default: poll until stopped)")
    s.add_argument("--no-pad", action="store_true",
                   help="do not pad analyst code to its time bound (padding hides its run time)")
    s.set_defaults(local_func=_cmd_agent)

    s = sub.add_parser("cost", help="cost(T) of a matrix CSV (and its d_X check)",
                       epilog="exit codes: 0 finite cost (and the d_X check passes), 4 refused "
                              "(a column has a zero, or the check fails), 3 a missing or "
                              "malformed file, 2 usage")
    s.add_argument("matrix", help="CSV of the right-stochastic matrix T (rows = inputs)")
    s.add_argument("--metric", default=None,
                   help="CSV of the budget matrix eps[x, x'] (N x N, no header): also check that "
                        "T is d_X-private for it")
    s.set_defaults(local_func=_cmd_cost)

    s = sub.add_parser("simulate", help="server + simulated users + a Warner query, end to end",
                       description="Start the aggregator on loopback, publish one Warner "
                       "randomised-response query about a yes/no field, let simulated users' "
                       "agents answer it (each with a durable budget in one temporary SQLite "
                       "ledger), collect the replies and estimate the share of 'yes'. Prints one "
                       "JSON line: users, answered, true_share, estimate, seconds.")
    s.add_argument("--users", type=int, default=500, help="number of simulated users (default 500)")
    s.add_argument("--eps", type=float, default=1.0,
                   help="cost of the Warner query, ln of its odds ratio (default 1)")
    s.add_argument("--share", type=float, default=0.3,
                   help="true share of users whose answer is 'yes' (default 0.3)")
    s.add_argument("--budget", type=float, default=2.0,
                   help="each user's total budget (default 2; a query costing more is refused)")
    s.add_argument("--workers", type=int, default=2,
                   help="threads answering for the users, each with its own HTTP client (default 2)")
    s.add_argument("--seed", type=int, default=0,
                   help="seed of the users' true answers and of their randomisers (default 0)")
    s.set_defaults(local_func=_cmd_simulate)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``local`` command (with its sub-commands) to a ``dprivacy`` subparsers object."""
    p = subparsers.add_parser("local", help="local model (PreTPost): serve, agent, cost, simulate",
                              description=DESCRIPTION)
    _add(p.add_subparsers(dest="local_command", metavar="LOCAL_COMMAND", required=True))
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Dispatch a parsed ``local`` command."""
    return int(args.local_func(args))
