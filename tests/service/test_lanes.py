"""Lanes and admission control: one query in flight per analyst (a second is refused at once,
charging nothing), each analyst's queries run in a worker process of their own (one that
overruns is killed and replaced, and the status and charge of the answer were decided at
arrival), and an analyst who floods the service neither delays another analyst's answers past
their deadlines nor gets more than their own lane."""

from __future__ import annotations

import json
import os
import threading
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.errors import BudgetExceededError
from dprivacy.remote import ServiceBusyError, connect
from dprivacy.service.config import load_config
from dprivacy.service.lanes import Lanes
from dprivacy.service.workbound import deadline_seconds, plan_bound
from tests.service.conftest import KEYS, people, write_service


def test_each_analyst_has_a_worker_process_of_their_own(start):
    srv = start(query_seconds=1.0)
    pids = {a: w.pid for a, w in srv.runner.workers.items()}
    assert set(pids) == {"alice", "bob"} and len(set(pids.values())) == 2
    assert os.getpid() not in pids.values()
    for pid in pids.values():
        os.kill(pid, 0)  # alive
    s = connect(srv.url, key=KEYS["bob"])
    assert abs(s.table("visits").noisy_count(1.0) - 200) < 30  # a real answer, from bob's worker


def test_an_overrun_is_killed_and_the_decision_at_arrival_stands(start):
    """A worker that runs past the deadline is killed and replaced and the decided default is
    released (charged, status 200); a query over the budget is refused (409) whether or not the
    worker overruns, even while the worker is being replaced: the status and the charge come
    from the ledger and the plan at arrival, never from the worker's timing."""
    srv = start(query_seconds=0.3)
    run = srv.runner
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    before = run.workers["alice"].pid
    run.stall("alice", 5.0)
    t0 = time.perf_counter()
    got = v.noisy_count(0.5)
    dt = time.perf_counter() - t0
    assert 0.3 <= dt < 0.8
    assert abs(got) < 60  # the default: noise around 0 (the real count is 200)
    assert run.overruns == 1
    t_end = time.monotonic() + 10
    while run.workers["alice"].pid == before and time.monotonic() < t_end:
        time.sleep(0.01)  # replaced on the lane's dispatch thread, after the answer
    assert run.workers["alice"].pid != before
    assert run.overruns == 1 and run.workers["alice"].kills == 1  # never killed again
    assert v.remaining_budget() == pytest.approx(0.5)  # charged at arrival, once
    # over the budget: refused, with or without an overrun, with no charge
    for stall in (5.0, 0.0, None):
        if stall is not None:
            run.stall("alice", stall)
        t0 = time.perf_counter()
        with pytest.raises(BudgetExceededError):
            v.noisy_count(0.6)
        assert 0.3 <= time.perf_counter() - t0 < 0.8
    assert v.remaining_budget() == pytest.approx(0.5)
    assert run.workers["alice"].wait_ready(time.monotonic() + 60)
    assert abs(v.noisy_count(0.1) - 200) < 60  # the new worker answers for real


def test_a_worker_still_starting_is_sent_nothing(tmp_path):
    """A worker that has not opened its sources when a query comes (a replacement after an
    overrun) is sent nothing: the query gets the default at once, and the worker is neither
    killed again nor given work it could not finish by the deadline."""
    from dprivacy.service.plan import PLAN_VERSION
    from dprivacy.service.workers import LaneWorker

    cfg = load_config(write_service(tmp_path, people(50)))
    w = LaneWorker(cfg, "alice")
    try:
        body = json.dumps({"v": PLAN_VERSION, "table": {"source": "visits", "steps": []},
                           "query": {"op": "noisy_count", "eps": 0.1}}).encode()
        assert w.run((0.0, body), time.monotonic() + 30) == ("starting", None)
        assert w.kills == 0 and not w.dead
        assert w.wait_ready(time.monotonic() + 60)
        got = w.run((0.0, body), time.monotonic() + 30)
        assert got is not None and got[0] == "value" and abs(got[1] - 50) < 100
        assert w.kills == 0
    finally:
        w.close()


def test_each_analyst_is_decided_in_a_process_of_their_own(start):
    """Parsing, bounds and decisions run in a decider process per analyst, never in the
    service process (whose event loop releases everyone's answers); a malformed plan is refused
    there with the same one-line error, and a decision still charges before the answer."""
    srv = start(query_seconds=0.3)
    pids = {a: d.pid for a, d in srv.runner.deciders.items()}
    assert set(pids) == {"alice", "bob"} and len(set(pids.values())) == 2
    assert os.getpid() not in pids.values()
    assert not set(pids.values()) & {w.pid for w in srv.runner.workers.values()}
    h = {"Authorization": f"Bearer {KEYS['alice']}"}
    bad = httpx.post(srv.url + "/v1/query", headers=h, timeout=30,
                     json={"v": 1, "table": {"source": "visits", "steps": [{"op": "nope"}]},
                           "query": {"op": "noisy_count", "eps": 0.1}})
    assert bad.status_code == 400 and bad.json()["error"] == "ValidationError"
    hidden = httpx.post(srv.url + "/v1/query", headers={"Authorization": f"Bearer {KEYS['bob']}"},
                        json={"v": 1, "table": {"source": "people", "steps": []},
                              "query": {"op": "noisy_count", "eps": 0.1}}, timeout=30)
    assert hidden.status_code == 404 and hidden.json()["message"] == "no source 'people'"
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    assert abs(v.noisy_count(0.25) - 200) < 60
    assert v.remaining_budget() == pytest.approx(0.75)
    assert set(v.schema) == {"age", "city"}


def test_the_deadline_runs_from_the_arrival_not_from_the_end_of_the_body(start):
    """The arrival is stamped when the service first sees the request: a body that trickles in
    for 0.4 s does not move the answer's release (deadline 1.0 s after the headers)."""
    srv = start(query_seconds=1.0)
    h = {"Authorization": f"Bearer {KEYS['alice']}", "Content-Type": "application/json"}
    raw = json.dumps({"v": 1, "table": {"source": "visits", "steps": []},
                      "query": {"op": "noisy_count", "eps": 0.1}}).encode()

    def slowly():
        yield raw[:10]
        time.sleep(0.4)
        yield raw[10:]

    t0 = time.perf_counter()
    r = httpx.post(srv.url + "/v1/query", headers=h, content=slowly(), timeout=30)
    dt = time.perf_counter() - t0
    assert r.status_code == 200
    assert 1.0 <= dt < 1.3, dt  # not 1.4 s: the deadline counts from the headers


def test_a_lane_holds_one_query_until_its_deadline():
    lanes = Lanes(["a", "b"])
    assert lanes.admit("a", 10.0, 10.5) == 0.0
    assert lanes.admit("a", 10.2, 11.0) == pytest.approx(0.3)  # refused: nothing taken
    assert lanes.admit("b", 10.2, 10.7) == 0.0  # another analyst's lane is free
    assert lanes.admit("a", 10.5, 11.0) == 0.0  # at the deadline, free again


def _until_in_flight(srv, analyst: str) -> None:
    """Wait until the service has admitted a query of ``analyst`` (their lane is taken). The
    test slept 0.4 s instead: on a loaded machine the first request could arrive after the
    second, which then was the one admitted and the check failed for a reason of scheduling."""
    t0 = time.monotonic()
    while srv.runner.lanes.busy_for(analyst, time.monotonic()) <= 0:
        assert time.monotonic() - t0 < 30, "the first query never arrived"
        time.sleep(0.005)


def test_a_second_query_in_flight_is_refused_at_once_and_charges_nothing(start):
    srv = start(query_seconds=1.5)
    h = {"Authorization": f"Bearer {KEYS['alice']}"}
    body = {"v": 1, "table": {"source": "visits", "steps": []},
            "query": {"op": "noisy_count", "eps": 0.1}}
    out: dict[str, httpx.Response] = {}

    def first() -> None:
        out["first"] = httpx.post(srv.url + "/v1/query", headers=h, json=body, timeout=30)

    th = threading.Thread(target=first)
    th.start()
    _until_in_flight(srv, "alice")
    t0 = time.perf_counter()
    second = httpx.post(srv.url + "/v1/query", headers=h, json=body, timeout=30)
    dt = time.perf_counter() - t0
    budget = httpx.post(srv.url + "/v1/budget", headers=h,
                        json={"v": 1, "table": {"source": "visits", "steps": []}}, timeout=30)
    th.join()
    assert out["first"].status_code == 200
    assert second.status_code == 429 and dt < 0.7  # at once, not at the deadline (1.5 s)
    assert second.json()["error"] == "ServiceBusyError"
    assert int(second.headers["retry-after"]) >= 1
    assert budget.status_code == 429  # the budget moves when the engine gets there
    s = connect(srv.url, key=KEYS["alice"])
    assert s.table("visits").remaining_budget() == pytest.approx(0.9)  # one charge only
    with pytest.raises(ServiceBusyError):  # the client's error
        def again() -> None:
            s.table("visits").noisy_count(0.1)
        th = threading.Thread(target=again)
        th.start()
        _until_in_flight(srv, "alice")
        try:
            s.table("visits").noisy_count(0.1)
        finally:
            th.join()


@pytest.mark.slow
def test_a_flooding_analyst_gets_refusals_and_delays_nobody(tmp_path):
    """The service in its own process; bob sends heavy plans (near the capacity) from four
    threads for 8 s; alice's queries all come back as real answers at their deadlines, bob's
    extra requests are refused at admission and only his admitted queries are charged."""
    from tests.service.test_crash import _port, _serve

    # costs ten times the idle machine's: the CI machine's load average reaches 10 or more
    caps = "max_rows = 3000\nmax_work_rows = 3000000\nrow_seconds = 3e-7\nbase_seconds = 0.05"
    path = write_service(tmp_path, people(2000).assign(eps=1e6), query_seconds=0.5,
                         service=caps, bob_sources='["visits", "people"]')
    cfg = load_config(path)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(path, port)
    try:
        hb = {"Authorization": f"Bearer {KEYS['bob']}"}
        bob = connect(url, key=KEYS["bob"])
        heavy = bob.table("people").product(pd.DataFrame({"j": range(14)})).product(
            pd.DataFrame({"k": range(14)}))
        heavy_body = {"v": 1, "table": heavy.plan, "query": {"op": "noisy_count", "eps": 1e-4}}
        pinq_body = {"v": 1, "table": {"source": "visits", "steps": []},
                     "query": {"op": "noisy_count", "eps": 1e-4}}
        assert plan_bound(heavy.plan, heavy_body["query"], cfg).work > 1_000_000
        stop = threading.Event()
        codes: list[list[int]] = [[], [], [], []]

        def flood(body: dict, out: list[int]) -> None:
            with httpx.Client(headers=hb, timeout=60) as c:
                while not stop.is_set():
                    out.append(c.post(url + "/v1/query", json=body).status_code)

        bodies = (heavy_body, heavy_body, heavy_body, pinq_body)
        floods = [threading.Thread(target=flood, args=(b, out))
                  for b, out in zip(bodies, codes, strict=True)]
        for th in floods:
            th.start()
        alice = connect(url, key=KEYS["alice"])
        q = alice.table("people").where(_.age >= 0)
        want = deadline_seconds(cfg, "alice", plan_bound(
            q.plan, {"op": "noisy_count", "eps": 1.0}, cfg), {"people"})
        late, answers = [], []
        t_end = time.monotonic() + 8.0
        try:
            while time.monotonic() < t_end:
                t0 = time.perf_counter()
                answers.append(q.noisy_count(1.0))
                late.append(time.perf_counter() - t0 - want)
        finally:
            stop.set()
            for th in floods:
                th.join()
        every = [c for out in codes for c in out]
        assert every.count(429) > every.count(200) > 0  # bob got his lane and refusals
        assert set(every) <= {200, 429}
        # charges = answers: only bob's admitted PINQ queries were charged
        left = bob.table("visits").remaining_budget()
        assert left == pytest.approx(1.0 - 1e-4 * codes[3].count(200), abs=1e-9)
    finally:
        proc.kill()
        proc.wait()
    # bob's own heavy queries may overrun on a loaded machine (his worker is then replaced);
    # alice's never wait for his: none of hers overran
    log = proc.log.read_text().splitlines()
    assert not [x for x in log if "alice" in x and ("overran" in x or "not ready" in x)], log
    assert len(answers) >= 5
    assert all(abs(a - 2000) < 30 for a in answers), answers  # real answers, not defaults
    # released at the deadline: never before it, and late only by the network and the
    # shared machine (the load average on the 2-core CI machine reaches 10 or more)
    assert min(late) >= 0 and float(np.median(late)) < 0.05 and max(late) < 0.5, (want, late)
