"""Crash and restart of ``dprivacy serve`` (SIGKILL while queries are in flight): no answer was
released without its committed charge, and budgets survive the restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from ibis import _

from dprivacy.remote import connect
from tests.service.conftest import KEYS, people, write_service

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(cfg: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    log = open(cfg.parent / f"serve-{port}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    p = subprocess.Popen([sys.executable, "-m", "dprivacy", "serve", "--config", str(cfg),
                          "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log)
    p.log = Path(log.name)  # type: ignore[attr-defined]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        if p.poll() is not None:
            raise RuntimeError(Path(log.name).read_text())
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("serve did not start")


def test_sigkill_releases_nothing_uncharged_and_budgets_survive(tmp_path: Path):
    cfg = write_service(tmp_path, people(50), query_seconds=0.3)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(cfg, port)
    answered = {"pinq": 0, "proper": 0}
    stop = threading.Event()

    def analyst() -> None:
        s = connect(url, key=KEYS["alice"], timeout=5)
        v = s.table("visits")
        p = s.table("people").where(_.pid < 10)
        while not stop.is_set():
            try:
                v.noisy_count(0.01)
                answered["pinq"] += 1
                p.noisy_count(0.01)
                answered["proper"] += 1
            except Exception:
                return

    th = threading.Thread(target=analyst)
    th.start()
    while answered["proper"] < 8:
        time.sleep(0.02)
    time.sleep(0.05)  # some query is in flight now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.set()
    th.join()
    n_pinq, n_proper = answered["pinq"], answered["proper"]
    # an overrun on this loaded machine answers with the default: a PINQ query is charged all
    # the same, a ProPer one that never started charges nobody (it read no record), nor one
    # answered while its worker was still restarting (it was sent nothing)
    log_text = proc.log.read_text()
    overruns = log_text.count("overran its deadline") + log_text.count("was still starting")

    from dprivacy.tables import Ledger
    from dprivacy.tables.budgets.budget_table import BudgetTable

    state = tmp_path / "service.state"
    led = Ledger(state / "pinq.sqlite")
    rid = led.named_record("pinq:visits/alice", None)
    pinq_left = float(led.remaining([rid])[0])
    led.close()
    bt = BudgetTable(state / "proper-people.duckdb")
    proper_left = bt.remaining(np.arange(10))
    others = bt.remaining(np.arange(10, 50))
    bt.close()
    # every released answer was charged (at most one more query in flight was charged too)
    assert 1.0 - 0.01 * (n_pinq + 1) - 1e-9 <= pinq_left <= 1.0 - 0.01 * n_pinq + 1e-9
    assert np.all(proper_left >= 1.0 - 0.01 * (n_proper + 1) - 1e-9)
    assert np.all(proper_left <= 1.0 - 0.01 * (n_proper - overruns) + 1e-9)
    assert np.all(others == 1.0)

    proc = _serve(cfg, port)  # restart: the stored budgets win over the config's
    try:
        s = connect(url, key=KEYS["alice"])
        assert s.table("visits").remaining_budget() == pytest.approx(pinq_left)
        s.table("visits").noisy_count(0.1)
        assert s.table("visits").remaining_budget() == pytest.approx(pinq_left - 0.1)
    finally:
        proc.kill()
        proc.wait()
