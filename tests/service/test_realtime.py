"""The release path's real-time priority (:mod:`dprivacy.service.realtime`): granted to the
calling thread only, never inherited by a child process, and taken back while the service
process uses more than its CPU cap."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest

from dprivacy.service import realtime
from dprivacy.service.realtime import Guard, policy_of


def _fifo_allowed() -> bool:
    out: dict[str, bool] = {}

    def probe() -> None:
        out["ok"] = realtime._fifo(0, realtime.RT_PRIORITY)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return out["ok"]


needs_rt = pytest.mark.skipif(
    not hasattr(os, "SCHED_FIFO") or not _fifo_allowed(),
    reason="this system does not allow real-time priority to this user (it needs root, "
           "CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 3): the service then keeps the fair "
           "scheduler, which the other tests cover")


class _Fake:
    """A clock and a CPU counter the test moves by hand, and the threads' moves recorded."""

    def __init__(self, monkeypatch: Any) -> None:
        self.t = 0.0
        self.c = 0.0
        self.moves: list[tuple[str, int]] = []
        monkeypatch.setattr(realtime, "_fifo", lambda tid, prio: self.moves.append(("rt", tid))
                            or True)
        monkeypatch.setattr(realtime, "to_fair", lambda tid=0: self.moves.append(("fair", tid))
                            or True)
        monkeypatch.setattr(realtime, "enter", lambda priority=1: True)

    def run(self, guard: Guard, seconds: float, cpu_fraction: float) -> None:
        for _ in range(round(seconds / guard.period)):
            self.t += guard.period
            self.c += guard.period * cpu_fraction
            guard.tick()


def test_the_guard_takes_real_time_back_above_the_cap_and_returns_it_after_calm(monkeypatch):
    f = _Fake(monkeypatch)
    g = Guard(cap=0.25, calm=5.0, period=0.1, clock=lambda: f.t, cpu=lambda: f.c)
    monkeypatch.setattr(g, "_start", lambda: None)  # ticks are driven by the test
    assert g.enter() is True and g.realtime and g.allowed
    tid = threading.get_native_id()
    f.run(g, 3.0, 0.05)  # a normal service: a few per cent of a CPU
    assert g.realtime and f.moves == [] and g.demotions == 0
    f.run(g, 1.0, 0.9)  # a flood of requests: the loop busy
    assert not g.realtime and g.demotions == 1 and f.moves == [("fair", tid)]
    f.run(g, 3.0, 0.05)  # calm, but not for long enough yet
    assert not g.realtime
    f.run(g, 4.0, 0.05)  # the last second's use fell below half the cap, then 5 s passed
    assert g.realtime and f.moves[-1] == ("rt", tid)
    assert g.use() == pytest.approx(0.05)


def test_a_thread_entering_while_demoted_stays_fair(monkeypatch):
    f = _Fake(monkeypatch)
    slices: list[int] = []
    monkeypatch.setattr(realtime, "set_slice", lambda: slices.append(1) or True)
    g = Guard(cap=0.25, clock=lambda: f.t, cpu=lambda: f.c)
    monkeypatch.setattr(g, "_start", lambda: None)
    assert g.enter() is True
    f.run(g, 1.0, 1.0)
    assert not g.realtime
    out: dict[str, bool] = {}
    t = threading.Thread(target=lambda: out.setdefault("rt", g.enter()))
    t.start()
    t.join()
    assert out == {"rt": False} and slices == [1]  # the shortest fair slice instead


def test_without_permission_the_thread_gets_the_short_slice_and_no_guard(monkeypatch):
    monkeypatch.setattr(realtime, "_fifo", lambda tid, prio: False)
    slices: list[int] = []
    monkeypatch.setattr(realtime, "set_slice", lambda: slices.append(1) or True)
    g = Guard()
    assert g.enter() is False
    assert not g.allowed and not g.realtime and g._thread is None and slices == [1]


@needs_rt
def test_real_time_is_the_calling_threads_only_and_not_inherited_by_a_child():
    import multiprocessing as mp

    before = policy_of()
    got: dict[str, Any] = {}

    def run() -> None:
        got["entered"] = realtime.enter()
        got["policy"] = policy_of()
        ctx = mp.get_context("fork")
        q = ctx.SimpleQueue()
        p = ctx.Process(target=lambda: q.put(policy_of()))
        p.start()
        got["child"] = q.get()
        p.join()
        got["back"] = realtime.to_fair()
        got["after"] = policy_of()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == {"entered": True, "policy": "realtime", "child": "fair", "back": True,
                   "after": "fair"}
    assert policy_of() == before == "fair"  # this thread untouched


@needs_rt
def test_the_guard_moves_a_real_thread_back_to_the_fair_class():
    g = Guard(cap=0.25, period=0.05)
    stop = threading.Event()
    seen: dict[str, Any] = {}

    def worker() -> None:
        seen["entered"] = g.enter()
        seen["tid"] = threading.get_native_id()
        stop.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    try:
        while "tid" not in seen:
            stop.wait(0.01)
        assert seen["entered"] and policy_of(seen["tid"]) == "realtime"
        assert g._thread is not None and g.realtime
        g._set(False)  # what a tick above the cap does
        assert policy_of(seen["tid"]) == "fair"
    finally:
        stop.set()
        t.join()
        g.close()


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            continue
        for k in kids:
            out.append(int(k))
            out.extend(_descendants(int(k)))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scheduling classes are Linux's")
def test_dprivacy_serve_releases_at_real_time_and_its_workers_stay_fair(tmp_path):
    """``dprivacy serve`` as a user runs it: its event loop is real-time where the system allows
    it (else fair, as before), and no analyst's worker or decider process is."""
    from tests.service.conftest import people, write_service
    from tests.service.test_crash import _port, _serve

    cfg = write_service(tmp_path, people(50), query_seconds=0.3)
    proc = _serve(cfg, _port())
    try:
        allowed = _fifo_allowed()
        assert policy_of(proc.pid) == ("realtime" if allowed else "fair")
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        classes = [policy_of(t) for t in tids]
        assert ("realtime" in classes) == allowed
        children = _descendants(proc.pid)
        assert children  # the fork server, the analysts' workers and deciders
        assert {policy_of(c) for c in children} == {"fair"}
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait()
