"""The forced-overrun membership probe: ``where(name == target)`` followed by products with a
14-row public table reads nothing without the target and many rows with it. Sent against three
neighbouring services (target absent, present, present with an exhausted personal budget),
followed 3 ms later by an over-budget PINQ query, it must be refused at the door or answered in
time on every neighbour: the same statuses and messages, and response times and answers that a
best-threshold classifier separates no better than 65 % over 40 + 40 trials (see
:mod:`tests.service.test_timing` for the classifier and the three attempts).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from dprivacy.service.config import load_config
from dprivacy.service.serve import ServiceThread
from tests.service.conftest import KEYS, at_once, people, write_service
from tests.service.test_timing import best_threshold_accuracy

pytestmark = pytest.mark.slow

TARGET = "target-7f3a"
# costs well above the idle machine's: three services (six worker processes) share the 2-core
# test machine with whatever else runs there
CAPS = "max_rows = 1000\nmax_work_rows = 2000000\nrow_seconds = 1e-7\nbase_seconds = 0.15"
PUB = {"columns": ["j"], "rows": [[i] for i in range(14)]}


def _probe(products: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"op": "where", "pred": {"expr": [
        {"op": "Field", "name": "name"}, {"op": "Literal", "value": TARGET, "dtype": "string"},
        {"op": "Equals", "args": {"left": {"ref": 0}, "right": {"ref": 1}}}]}}]
    for i in range(products):
        steps.append({"op": "product", "public": {"columns": [f"j{i}"], "rows": PUB["rows"]}})
    return {"v": 1, "table": {"source": "people", "steps": steps},
            "query": {"op": "noisy_count", "eps": 1.0}}


OVER_BUDGET = {"v": 1, "table": {"source": "visits", "steps": []},
               "query": {"op": "noisy_count", "eps": 5.0}}  # the budget is 1.0


def _services(start) -> dict[str, Any]:
    base = people(500).assign(eps=1e6)
    target = {"pid": 5000, "age": 50, "name": TARGET, "eps": 1e6}
    return {
        "absent": start("absent", base, query_seconds=0.05, service=CAPS),
        "present": start("present", people(500, extra=target).assign(eps=1e6),
                         query_seconds=0.05, service=CAPS),
        "exhausted": start("exhausted", people(500, extra=target).assign(
            eps=lambda d: np.where(d.pid == 5000, 0.0, 1e6)), query_seconds=0.05, service=CAPS),
    }


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The three neighbouring services, shared by the probes that do not stall a worker (they
    were started anew for each test: 9 starts, now 3). What a probe leaves behind is the same
    on every neighbour and none of it is what the next probe measures: people's charges of
    eps 1 against budgets of 10^6 (the target's 0 on "exhausted" stays 0), no PINQ charge (every
    over-budget query is refused, checked), and each test counts its own overruns."""
    d = tmp_path_factory.mktemp("neighbours")
    running: list[ServiceThread] = []

    def start(name: str, ppl: Any, **kw: Any) -> ServiceThread:
        running.append(ServiceThread(load_config(write_service(d / name, ppl, **kw))))
        return running[-1]

    try:
        yield _services(start)
    finally:
        for srv in running:
            srv.stop()


def _trial(c1: httpx.Client, c2: httpx.Client, url: str, probe: dict,
           gap: float = 0.003, after: Any = None, ends: dict | None = None) -> tuple:
    """The probe, and ``gap`` seconds (3 ms) later the over-budget query (or, with ``after``, as
    soon as ``after()`` is true): (statuses and errors, times, value). ``ends``, if given,
    receives when each response came back (``"probe"``, ``"second"``; perf_counter)."""
    out: dict[str, Any] = {}
    sending = threading.Event()

    def first() -> None:
        sending.set()
        t0 = time.perf_counter()
        r = c1.post(url + "/v1/query", json=probe)
        out["end"] = time.perf_counter()
        out["t"] = out["end"] - t0
        out["r"] = r

    th = threading.Thread(target=first)
    th.start()
    sending.wait()
    if after is None:
        time.sleep(gap)
    else:
        t0 = time.monotonic()
        while not after():
            assert time.monotonic() - t0 < 30, "the probe never arrived"
            time.sleep(0.005)
    t0 = time.perf_counter()
    r2 = c2.post(url + "/v1/query", json=OVER_BUDGET)
    t2_end = time.perf_counter()
    t2 = t2_end - t0
    th.join()
    if ends is not None:
        ends.update(probe=out["end"], second=t2_end)
    r1 = out["r"]
    shape = (r1.status_code, r1.json().get("error"), r1.json().get("message"),
             r2.status_code, r2.json().get("error"), r2.json().get("message"))
    return shape, out["t"], t2, r1.json().get("value")


def _run(srv: dict[str, Any], products: int, second: str) -> tuple[tuple, dict[str, float]]:
    first_overruns = {n: s.runner.overruns for n, s in srv.items()}
    heads = {a: {"Authorization": f"Bearer {KEYS[a]}"} for a in KEYS}
    clients = {(n, a): httpx.Client(headers=heads[a], timeout=30) for n in srv for a in KEYS}
    probe = _probe(products)
    best: dict[str, float] = {}
    shapes: dict[str, list] = {n: [] for n in srv}

    def trials(n: str) -> tuple[list, dict[str, list]]:
        """40 trials on service ``n``: their outcomes, and their times and values."""
        out: list = []
        rec: dict[str, list] = {"t1": [], "t2": [], "v": []}
        for _i in range(40):
            shape, t1, t2, v = _trial(clients[(n, "alice")], clients[(n, second)], srv[n].url,
                                      probe)
            out.append(shape)
            rec["t1"].append(t1)
            rec["t2"].append(t2)
            rec["v"].append(v)
        return out, rec

    try:
        for _attempt in range(3):
            # A, B and C at the same time (a thread each, their own clients): the machine's
            # load hits all alike, and they wait for their deadlines together
            got = at_once({n: (lambda n=n: trials(n)) for n in srv})
            rec = {n: got[n][1] for n in srv}
            for n in srv:
                shapes[n].extend(got[n][0])
            for other in ("present", "exhausted"):
                acc = categorical_accuracy(shapes["absent"][-40:], shapes[other][-40:])
                best[f"{other}:status"] = min(best.get(f"{other}:status", 1.0), acc)
                for k in ("t1", "t2"):
                    acc = best_threshold_accuracy(np.array(rec["absent"][k]),
                                                  np.array(rec[other][k]))
                    best[f"{other}:{k}"] = min(best.get(f"{other}:{k}", 1.0), acc)
            if rec["absent"]["v"][0] is not None:  # answered: exhausted is left out like absent
                acc = best_threshold_accuracy(np.array(rec["absent"]["v"], dtype=float),
                                              np.array(rec["exhausted"]["v"], dtype=float))
                best["exhausted:value"] = min(best.get("exhausted:value", 1.0), acc)
            if max(best.values()) <= 0.65:
                break
    finally:
        for c in clients.values():
            c.close()
    assert max(best.values()) <= 0.65, best
    # every query's work is bounded and its deadline leaves it its calibrated cost on its own
    # worker; on the shared 2-core test machine (three services, six workers, load average up
    # to 24) a rare stall (a commit's fsync, the scheduler) can still exceed it: at most 6 of
    # the up to 360 queries a service answers over the attempts. An overrun only swaps the real
    # answer for the default one: the statuses above are decided at arrival
    overruns = [s.runner.overruns - first_overruns[n] for n, s in srv.items()]
    assert all(k <= 6 for k in overruns), overruns
    every = [x for n in srv for x in shapes[n]]
    print(f"best-threshold accuracies ({products} products): {best}")
    # the usual outcome (the other order of the two requests, the second one first, is rare
    # and happens alike on every neighbour)
    return max(set(every), key=every.count), best


def categorical_accuracy(a: list, b: list) -> float:
    """The best accuracy of telling ``a``'s outcomes from ``b``'s by the outcome alone."""
    keys = set(a) | set(b)
    return sum(max(a.count(k), b.count(k)) for k in keys) / (len(a) + len(b))


def test_the_forced_overrun_probe_is_refused_at_the_door(neighbours):
    """Eight products: the bound (1000 · 14^8 rows) is far above the capacity, so the probe is
    refused before anything runs; the over-budget query 3 ms later (same analyst) is refused
    for its budget, at its own deadline, on every neighbour."""
    shape, _best = _run(neighbours, 8, "alice")
    assert shape[0] == 400 and "capacity" in shape[2]
    assert shape[3] == 409 and shape[4] == "BudgetExceededError"


def test_an_admitted_fan_out_probe_is_answered_in_time(neighbours):
    """One product (14 rows from the target) is within the capacity: the probe runs and is
    answered at its deadline on every neighbour; the over-budget query of another analyst 3 ms
    later is refused for its budget at its own deadline, whatever the probe did."""
    shape, _best = _run(neighbours, 1, "bob")
    assert shape[0] == 200
    assert shape[3] == 409 and shape[4] == "BudgetExceededError"


def test_the_second_query_of_a_busy_analyst_is_refused_at_once(neighbours):
    """The same analyst's second query while its admitted probe is in flight: 429 on every
    neighbour, charging nothing (the visits budget is untouched)."""
    srv = neighbours
    for s in srv.values():
        with httpx.Client(headers={"Authorization": f"Bearer {KEYS['alice']}"},
                          timeout=30) as c:
            # sent as soon as the probe has arrived (its deadline is about 0.45 s away). On a
            # loaded machine the second query can still arrive after the probe was released
            # (the lane is then free and the answer is 409, over budget): such a trial, where
            # the probe's answer came back before the second's, says nothing and is repeated
            # (at most 3 times). Whenever the probe was still out when the second query was
            # answered, its lane was busy at that query's arrival: 429, at once.
            for _attempt in range(3):
                ends: dict[str, float] = {}
                shape, _t1, t2, _v = _trial(c, c, s.url, _probe(1), ends=ends,
                                            after=lambda s=s: (
                                                s.runner.lanes.busy_for("alice",
                                                                        time.monotonic()) > 0))
                assert shape[0] == 200
                if ends["probe"] > ends["second"]:
                    break
            assert ends["probe"] > ends["second"], "the probe came back first three times"
            assert shape[3] == 429 and t2 < 0.25
            r = c.post(s.url + "/v1/budget", json={"v": 1, "table": {"source": "visits",
                                                                       "steps": []}})
            assert r.json()["remaining"] == 1.0


def test_an_overrun_never_changes_a_status_or_a_charge(start):
    """The overrun forced where it hurts most: on the neighbours with the target (present,
    exhausted) the analyst's worker is made to run past the deadline of every probe (as if the
    target's rows made it slow), on the neighbour without it the probe runs in time. Right
    after each probe's answer the same analyst sends an over-budget PINQ query. The statuses
    and messages of both, and both response times, must not tell the neighbours apart (40 + 40
    trials, best-threshold classifier at most 65 %; like every timing probe here, up to three
    independent attempts, see :mod:`tests.service.test_timing`): whether a query is refused is
    decided from the ledger and the plan at arrival, and every answer is released on the same
    path at its deadline, whether the worker answered or overran."""
    caps = CAPS
    base = people(500).assign(eps=1e6)
    target = {"pid": 5000, "age": 50, "name": TARGET, "eps": 1e6}
    srv = {
        "absent": start("absent", base, query_seconds=0.05, service=caps),
        "present": start("present", people(500, extra=target).assign(eps=1e6),
                         query_seconds=0.05, service=caps),
        "exhausted": start("exhausted", people(500, extra=target).assign(
            eps=lambda d: np.where(d.pid == 5000, 0.0, 1e6)), query_seconds=0.05, service=caps),
    }
    probe = _probe(1)
    h = {"Authorization": f"Bearer {KEYS['alice']}"}
    best: dict[str, float] = {}
    rng = random.Random(29)
    for attempt in range(3):
        shapes: dict[str, list] = {n: [] for n in srv}
        times: dict[str, dict[str, list[float]]] = {n: {"t1": [], "t2": []} for n in srv}
        # every stalled probe is answered by its default: its worker overran, or was still
        # restarting after the previous overrun (then it is sent nothing)
        before = {n: s.runner.overruns + s.runner.restarting for n, s in srv.items()}
        # idle connections are dropped by the client (1 s) before the server drops them (5 s):
        # a round can leave one service idle for seconds on a loaded machine, and a request
        # sent on a connection the server is closing fails ("Server disconnected")
        with httpx.Client(headers=h, timeout=30,
                          limits=httpx.Limits(keepalive_expiry=1.0)) as c:
            for _i in range(40):
                # the three services share this process and the machine: in a random order
                # each round, so that the work after one service's overrun (its worker's
                # replacement) lands alike on every neighbour's probes
                for n in rng.sample(list(srv), len(srv)):
                    s = srv[n]
                    if n != "absent":
                        s.runner.stall("alice", 2.0)  # the worker overruns its deadline
                    t0 = time.perf_counter()
                    r1 = c.post(s.url + "/v1/query", json=probe)
                    t1 = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    r2 = c.post(s.url + "/v1/query", json=OVER_BUDGET)
                    t2 = time.perf_counter() - t0
                    shapes[n].append((r1.status_code, r2.status_code, r2.json().get("error"),
                                      r2.json().get("message")))
                    times[n]["t1"].append(t1)
                    times[n]["t2"].append(t2)
        for n in ("present", "exhausted"):
            assert srv[n].runner.overruns + srv[n].runner.restarting - before[n] >= 40
        assert set(shapes["absent"]) == {(200, 409, "BudgetExceededError",
                                          shapes["absent"][0][3])}
        for other in ("present", "exhausted"):
            assert categorical_accuracy(shapes["absent"], shapes[other]) == 0.5
            for k in ("t1", "t2"):
                acc = best_threshold_accuracy(np.array(times["absent"][k]),
                                              np.array(times[other][k]))
                best[f"{other}:{k}"] = min(best.get(f"{other}:{k}", 1.0), acc)
                med = (np.median(times["absent"][k]), np.median(times[other][k]))
                print(f"overrun probe attempt {attempt} {other} {k}: accuracy {acc:.4f}, "
                      f"medians {1e3 * med[0]:.2f} / {1e3 * med[1]:.2f} ms")
        if max(best.values()) <= 0.65:
            break
    assert max(best.values()) <= 0.65, best
    # nothing was charged on the PINQ source: every over-budget query was refused
    for s in srv.values():
        r = httpx.post(s.url + "/v1/budget", headers=h, timeout=30,
                       json={"v": 1, "table": {"source": "visits", "steps": []}})
        assert r.json()["remaining"] == 1.0
