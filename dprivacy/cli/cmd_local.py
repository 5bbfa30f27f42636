"""``dprivacy local serve | credentials | agent | cost | optimal | simulate``: the local model from
the command line.

``register(subparsers)`` adds the ``local`` command to the main ``dprivacy`` parser (its one
registration point, :data:`dprivacy.cli.app.COMMANDS`); ``python -m dprivacy.local ...`` runs the
same commands standalone.

* ``serve``: the aggregator (uvicorn) on ``--host``/``--port`` (port 0 picks a free one; the
  first line printed is ``listening on URL``) over its SQLite state ``--db``.
* ``credentials``: an analyst's API key or a user's device credential, issued into ``--db``.
* ``agent``: one user's agent polling a server with its device credential: data from a JSON
  file, a durable budget in an SQLite ledger, sandboxed analyst code (refused where bubblewrap
  does not work).
* ``cost T.csv``: cost(T) of a matrix file (Paper IV Def. 3), and with ``--metric D.csv`` the
  d_X check of every pair.
* ``optimal``: the optimal d_X-local randomiser of a universe and metric (:mod:`.local_optimal`).
* ``simulate``: a Warner query answered by N simulated users (:mod:`.local_simulate`).
"""

from __future__ import annotations

import argparse
import json
import math
import socket
from typing import Any

import numpy as np

__all__ = ["register", "run"]

DESCRIPTION = ("the local model (PreTPost) from the command line: an aggregator (serve) and its "
               "credentials (credentials), a user's agent (agent), the cost of a randomiser matrix "
               "(cost), the optimal d_X-local randomiser (optimal), simulated users (simulate)")


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from dprivacy.cli.common import guard
    from dprivacy.local.aggregator.server import create_app
    from dprivacy.local.aggregator.store import AggregatorStore

    with guard(f"--db {args.db!r}"):
        store = AggregatorStore(args.db)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    app = create_app(store, max_body=args.max_body)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])
    return 0


def _cmd_credentials(args: argparse.Namespace) -> int:
    from dprivacy.cli.common import guard
    from dprivacy.cli.exits import OK
    from dprivacy.local.aggregator.store import AggregatorStore

    with guard(f"--db {args.db!r}"):
        store = AggregatorStore(args.db)
        try:
            if args.analyst:
                cred = store.add_analyst(args.analyst)
            else:
                cred = store.enrol(args.device, replace=args.replace)
        finally:
            store.close()
    print(cred)
    return OK


def _cmd_agent(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dprivacy.cli.common import guard
    from dprivacy.cli.files import read_json
    from dprivacy.local.aggregator.client import connect, run_agent
    from dprivacy.local.device.agent import UserAgent
    from dprivacy.local.device.budget import PersonalBudget
    from dprivacy.local.device.policy import PublicPolicy

    data = read_json(args.data, "--data")
    per_field = json.loads(args.per_field) if args.per_field else None
    budget = PersonalBudget(args.ledger, args.user, total=args.budget, per_field=per_field,
                            per_event=args.per_event)
    policy = PublicPolicy(allowed_fields=args.fields, max_cost=args.max_cost,
                          publishers=args.publishers)
    with guard(f"--credential-file {args.credential_file!r}"):
        credential = Path(args.credential_file).read_text().strip()
    agent = UserAgent(args.user, data, budget, policy=policy, sandbox="auto", pad=not args.no_pad)
    with connect(args.server, credential) as c:
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


def _add(sub: Any) -> None:
    from dprivacy.cli import local_optimal, local_simulate

    s = sub.add_parser("serve", help="run the aggregator (HTTP, JSON, authenticated)",
                       description="Run the aggregator: analysts publish queries (POST /queries), "
                       "agents fetch them and post replies, analysts collect the replies to their "
                       "own queries (GET /replies/{id}). Every request but /health carries a "
                       "credential (Authorization: Bearer ...) issued by 'dprivacy local "
                       "credentials'. The first line printed is 'listening on URL'.")
    s.add_argument("--db", required=True,
                   help="SQLite file of the aggregator's state (credentials, queries, replies; "
                        "created if missing, kept across restarts)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--max-body", type=int, default=8 << 20,
                   help="largest request body in bytes (default 8 MiB; larger ones are refused, 413)")
    s.set_defaults(local_func=_cmd_serve)

    s = sub.add_parser("credentials", help="issue an analyst's API key or enrol a user's device",
                       description="Print a new credential once (only its sha256 is stored in "
                                   "--db). Analysts send it as 'Authorization: Bearer KEY'; a "
                                   "device's agent reads it from --credential-file.")
    s.add_argument("--db", required=True, help="the aggregator's SQLite file (as given to serve)")
    who = s.add_mutually_exclusive_group(required=True)
    who.add_argument("--analyst", metavar="NAME", help="issue an API key for this analyst")
    who.add_argument("--device", metavar="USER", help="enrol this user's device (one per user)")
    s.add_argument("--replace", action="store_true",
                   help="with --device: revoke the user's current device credential, issue a new one")
    s.set_defaults(local_func=_cmd_credentials)

    s = sub.add_parser("agent", help="run one user's agent against a server",
                       description="Run one user's agent: poll the aggregator for queries, price "
                       "each one's randomiser, check it against the public policy and the durable "
                       "personal budget (charged before any data is read), and reply with the "
                       "randomised answer. On exit it prints the remaining budgets.")
    s.add_argument("--server", required=True, help="aggregator URL, e.g. http://127.0.0.1:8000")
    s.add_argument("--user", required=True, help="the user's id (names the budget in the ledger)")
    s.add_argument("--credential-file", required=True,
                   help="file holding the device credential issued when the user was enrolled")
    s.add_argument("--publishers", nargs="*", default=None,
                   help="the analysts whose queries are answered (default any publisher)")
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

    local_optimal.add_parser(sub)
    local_simulate.add_parser(sub)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``local`` command (with its sub-commands) to a ``dprivacy`` subparsers object."""
    p = subparsers.add_parser("local", help="local model (PreTPost): serve, credentials, agent, cost, "
                                            "optimal, simulate",
                              description=DESCRIPTION)
    _add(p.add_subparsers(dest="local_command", metavar="LOCAL_COMMAND", required=True))
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Dispatch a parsed ``local`` command."""
    return int(args.local_func(args))
