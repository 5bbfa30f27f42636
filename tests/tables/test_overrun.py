"""An analyst function that runs too long on one record is stopped and gets the documented
default, like one that raised: neighbouring tables give the same observation."""

from __future__ import annotations

import signal
import time

import pytest

from dprivacy.tables.relations import overrun
from tests.tables.leak_harness import assert_indistinguishable, pinq_pair, proper_pair

EPS = 0.5


@pytest.fixture(autouse=True)
def short_limit(monkeypatch):
    monkeypatch.setattr(overrun, "CALL_TIME_LIMIT", 0.2)


def spin(r):
    """Busy for 20 s on the target only (returns True if never stopped)."""
    if r["name"] == "target":
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            pass
    return True


def sleepy(r):
    if r["name"] == "target":
        time.sleep(20)
    return 1.0


def stubborn(r):
    """Catches the first stop and spins again: stopped at the next tick."""
    if r["name"] == "target":
        try:
            spin(r)
        except BaseException:  # noqa: BLE001
            pass
        spin(r)
    return True


PROGRAMS = {
    "where spin": lambda t: t.where(spin).noisy_count(EPS),
    "where stubborn": lambda t: t.where(stubborn).noisy_count(EPS),
    "select sleep": lambda t: t.select(v=sleepy).noisy_sum(EPS, "v", 0, 2),
    "value sleep": lambda t: t.noisy_sum(EPS, sleepy, 0, 2),
    "median sleep": lambda t: t.noisy_median(EPS, sleepy, 0, 2, candidates=[0.0, 1.0, 2.0]),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_overlong_call_gets_the_default(name):
    t0 = time.monotonic()
    a, b = pinq_pair(PROGRAMS[name], seed=3)
    assert time.monotonic() - t0 < 15  # stopped, not run to the end (20 s)
    assert b.error is None
    # where: the target is dropped (0 difference); sum: it counts as the midpoint 1 (its value
    # had it finished, 1, is the same here), so the exact answers differ by the default only
    sens = {"where spin": 0, "where stubborn": 0, "select sleep": 1, "value sleep": 1,
            "median sleep": None}[name]
    assert_indistinguishable(a, b, sensitivity=sens)


def test_proper_overlong_call_gets_the_default():
    a, b = proper_pair(lambda p: p.where(spin).noisy_count(EPS), seed=3)
    assert b.error is None
    assert_indistinguishable(a, b, sensitivity=0)


def test_an_existing_alarm_handler_is_left_alone():
    calls = []

    def mine(signum, frame):
        calls.append(signum)

    old = signal.signal(signal.SIGALRM, mine)
    try:
        from dprivacy.tables import Queryable
        from tests.tables.leak_harness import people

        t = Queryable(people(), budget=1.0)
        t.where(lambda r: True).noisy_count(0.5)
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert calls == []


def test_the_timer_is_off_after_a_query():
    from dprivacy.tables import Queryable
    from tests.tables.leak_harness import people

    Queryable(people(), budget=1.0).where(spin).noisy_count(0.5)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
