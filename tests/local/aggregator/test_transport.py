"""End to end: the real HTTP aggregator on loopback, a few hundred simulated user agents."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from dprivacy.local import Code, PersonalBudget, Query, UserAgent
from dprivacy.local.aggregator.client import collect, poll_once, publish, run_server, simulate_users
from dprivacy.local.aggregator.server import create_app
from dprivacy.local.case_studies import (
    duchi_estimate,
    duchi_query,
    duchi_variance,
    warner_estimate,
    warner_query,
)
from tests.local.sandbox_support import make_sandbox

pytestmark = pytest.mark.timeout(120)


class _Server:
    def __init__(self, url: str) -> None:
        self.url = url


@pytest.fixture(scope="module")
def server():
    """The aggregator started by its one command, in its own process, on loopback only."""
    proc = subprocess.Popen([sys.executable, "-m", "dprivacy.local", "serve", "--host", "127.0.0.1",
                             "--port", "0"], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[3])
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        t0 = time.monotonic()
        while True:  # the socket is bound before the line is printed; wait for the app
            try:
                httpx.get(url + "/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert time.monotonic() - t0 < 30 and proc.poll() is None
                time.sleep(0.1)
        yield _Server(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_in_process_thread() -> None:
    srv = run_server(create_app(), "127.0.0.1")
    try:
        assert httpx.get(srv.url + "/health").json()["ok"] is True
    finally:
        srv.stop()


def test_end_to_end_200_users(server, tmp_path: Path) -> None:
    n, eps = 200, 1.0
    rng = np.random.default_rng(0)
    smokers = rng.random(n) < 0.3
    ages = rng.uniform(-1, 1, n)
    ledger = tmp_path / "users.sqlite"
    with httpx.Client(base_url=server.url, timeout=30) as analyst:
        publish(analyst, warner_query("smokers", eps, "smoker", ["yes", "no"]))
        publish(analyst, duchi_query("mean-x", eps, "x"))
        with pytest.raises(httpx.HTTPStatusError):  # the server validates what it publishes
            analyst.post("/queries", json={"id": "bad", "T": {"kind": "matrix", "matrix": [[2.0]]}}
                         ).raise_for_status()

        def agent(i: int) -> UserAgent:  # one user's device and its durable budget
            return UserAgent(f"u{i}", {"smoker": "yes" if smokers[i] else "no", "x": float(ages[i])},
                             PersonalBudget(ledger, f"u{i}", total=2.5), sandbox=None, pad=False, rng=i)

        assert simulate_users(server.url, range(n), agent, workers=2) == n
        replies = collect(analyst, "smokers")
        means = collect(analyst, "mean-x")
    assert len(replies) == n and all(r["status"] == "ok" for r in replies)
    q = warner_query("smokers", eps, "smoker", ["yes", "no"])
    f = warner_estimate([r["result"] for r in replies], q.T.matrix, ["yes", "no"])
    p = math.exp(eps) / (1 + math.exp(eps))
    sd = math.sqrt(p * (1 - p) / n) / (2 * p - 1)
    assert abs(f[0] - smokers.mean()) < 4.5 * sd
    m = duchi_estimate([r["result"] for r in means])
    assert abs(m - ages.mean()) < 4.5 * math.sqrt(duchi_variance(ages, eps))
    # every user paid exactly the two costs, durably
    assert PersonalBudget(ledger, "u7", total=2.5).remaining()["total"] == pytest.approx(2.5 - 2 * eps)


def test_sandboxed_query_over_http(server, tmp_path: Path) -> None:
    sb = make_sandbox(pad=False)
    code = "def pre(d, p, s):\n    return 'yes' if d['v'] > 5 else 'no'"
    q = Query("sb", warner_query("x", 3.0, "v", ["yes", "no"]).T, Code.source(code), fields=("v",), t=2.0)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        publish(c, q)
        for i in range(6):
            b = PersonalBudget(tmp_path / "l.sqlite", f"s{i}", total=5.0)
            a = UserAgent(f"s{i}", {"v": 10 * (i % 2)}, b, sandbox=sb, pad=False, rng=i)
            poll_once(c, a)
        out = collect(c, "sb")
    assert len(out) == 6 and all(r["status"] == "ok" and r["result"] in ("yes", "no") for r in out)


def test_simulate_is_reproducible_across_threads(capsys) -> None:
    """`dprivacy local simulate --seed S` gives the same answers whatever order its worker threads
    build the users in (each user's seed is drawn up front)."""
    import json

    from dprivacy.cli import main as cli_main

    def main(argv: list[str]) -> int:
        return cli_main(["local", *argv])

    outs = []
    for workers in ("1", "3", "3"):
        assert main(["simulate", "--users", "40", "--seed", "5", "--workers", workers]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        out.pop("seconds")
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] and outs[0]["answered"] == 40
