"""End to end: the real HTTP aggregator on loopback, a few hundred simulated user agents, each
with its own device credential."""

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
from dprivacy.local.aggregator.client import (
    collect,
    connect,
    poll_once,
    publish,
    run_server,
    simulate_users,
)
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
    def __init__(self, url: str, db: Path, analyst: str) -> None:
        self.url, self.db, self.analyst = url, db, analyst

    def enrol(self, users) -> dict[str, str]:
        """Device credentials of ``users``, issued by the operator's command into the server's db."""
        from dprivacy.local.aggregator.store import AggregatorStore

        store = AggregatorStore(self.db)
        try:
            return {u: store.enrol(u) for u in users}
        finally:
            store.close()


def _credential(db: Path, *flag: str) -> str:
    out = subprocess.run([sys.executable, "-m", "dprivacy.local", "credentials", "--db", str(db), *flag],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    return out.stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The aggregator started by its one command, in its own process, on loopback only, with an
    analyst key issued by the credentials command."""
    db = tmp_path_factory.mktemp("aggregator") / "agg.sqlite"
    analyst = _credential(db, "--analyst", "alice")
    assert analyst.startswith("dpa_")
    proc = subprocess.Popen([sys.executable, "-m", "dprivacy.local", "serve", "--db", str(db),
                             "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE, text=True,
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
        yield _Server(url, db, analyst)
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
    creds = server.enrol(f"u{i}" for i in range(n))
    with connect(server.url, server.analyst, timeout=30) as analyst:
        publish(analyst, warner_query("smokers", eps, "smoker", ["yes", "no"]))
        publish(analyst, duchi_query("mean-x", eps, "x"))
        with pytest.raises(httpx.HTTPStatusError):  # the server validates what it publishes
            analyst.post("/queries", json={"id": "bad", "T": {"kind": "matrix", "matrix": [[2.0]]}}
                         ).raise_for_status()

        def agent(i: int) -> UserAgent:  # one user's device and its durable budget
            return UserAgent(f"u{i}", {"smoker": "yes" if smokers[i] else "no", "x": float(ages[i])},
                             PersonalBudget(ledger, f"u{i}", total=2.5), sandbox=None, pad=False, rng=i)

        assert simulate_users(server.url, range(n), agent, creds, workers=2) == n
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
    creds = server.enrol(f"s{i}" for i in range(6))
    with connect(server.url, server.analyst, timeout=30) as c:
        publish(c, q)
        for i in range(6):
            b = PersonalBudget(tmp_path / "l.sqlite", f"s{i}", total=5.0)
            a = UserAgent(f"s{i}", {"v": 10 * (i % 2)}, b, sandbox=sb, pad=False, rng=i)
            poll_once(c, a, credential=creds[f"s{i}"])
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
        assert main(["simulate", "--http", "--users", "40", "--seed", "5", "--workers", workers]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        out.pop("seconds")
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] and outs[0]["answered"] == 40


def test_simulate_estimates_within_its_documented_error(capsys) -> None:
    """`dprivacy local simulate --users 500` (vectorised): the same seed gives the same line, and
    over 200 seeds the estimates are unbiased with the standard deviation its help documents."""
    import json

    from dprivacy.cli import main as cli_main
    from dprivacy.cli.local_simulate import std_error

    def run(*argv: str) -> dict:
        assert cli_main(["local", "simulate", *argv]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        out.pop("seconds")
        return out

    assert run("--users", "500", "--seed", "3") == run("--users", "500", "--seed", "3")
    errs = []
    for seed in range(200):
        out = run("--users", "500", "--seed", str(seed))
        assert out["mode"] == "vectorised" and out["answered"] == 500
        assert out["std_error"] == pytest.approx(std_error(500, 1.0))
        errs.append(out["estimate"] - out["true_share"])
        assert abs(errs[-1]) <= 4.5 * out["std_error"]
    errs_a = np.asarray(errs)
    se = std_error(500, 1.0)
    assert abs(errs_a.mean()) < 4.5 * se / math.sqrt(200)  # unbiased
    assert 0.75 < errs_a.std(ddof=1) / se < 1.25  # the documented spread (sd of the ratio ~5 %)


def test_agent_command_with_its_credential_file(server, tmp_path: Path, capsys) -> None:
    """`dprivacy local agent --credential-file F` answers as its enrolled user; with
    `--publishers` naming another analyst it refuses and spends nothing, and its later answer
    replaces the refusal."""
    import json

    from dprivacy.cli import main as cli_main

    cred = tmp_path / "cli1.credential"
    cred.write_text(server.enrol(["cli1"])["cli1"] + "\n")
    (tmp_path / "me.json").write_text(json.dumps({"smoker": "no"}))
    with connect(server.url, server.analyst, timeout=30) as analyst:
        publish(analyst, warner_query("cli-q", 1.0, "smoker", ["yes", "no"]))
        base = ["local", "agent", "--server", server.url, "--user", "cli1", "--credential-file",
                str(cred), "--data", str(tmp_path / "me.json"), "--polls", "1", "--no-pad"]
        assert cli_main([*base, "--ledger", str(tmp_path / "a.sqlite"), "--budget", "3",
                         "--publishers", "bob"]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out["remaining"]["total"] == pytest.approx(3.0)
        mine = [r for r in collect(analyst, "cli-q") if r["user"] == "cli1"]
        assert [r["status"] for r in mine] == ["rejected"] and "publisher" in mine[0]["reason"]
        assert cli_main([*base, "--ledger", str(tmp_path / "b.sqlite"), "--budget", "3"]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert "alice/cli-q" in out["answered"]  # ids are namespaced per analyst
        mine = [r for r in collect(analyst, "cli-q") if r["user"] == "cli1"]  # the refusal replaced
    assert len(mine) == 1 and mine[0]["status"] == "ok" and mine[0]["result"] in ("yes", "no")
