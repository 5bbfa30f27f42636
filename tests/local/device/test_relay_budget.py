"""Per-field and per-event budgets hold across queries: the page-cache relay.

The attack: a free query (T constant, cost 0) on field ``pin`` runs an analyst ``pre`` that
leaves the PIN in the page cache (it evicts a file every sandbox can read, then reads back one
page per 1-bit of the PIN); the next query's ``pre``, listed on field ``age`` only, reads the
PIN back by probing which pages are cached and returns it through a near-deterministic T. Two
sandboxed runs on one kernel share the page cache, so charging that query to ``age`` alone let
``pin``'s budget be bypassed. A query with analyst code is now charged to every field and event
budget: the relaying query is refused where ``pin`` cannot pay, and charged to ``pin`` where it
can (per-event budgets alike).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprivacy.local import (
    Code,
    MatrixRandomiser,
    PersonalBudget,
    ProductRandomiser,
    Query,
    Sandbox,
    UserAgent,
)
from tests.local.sandbox_support import make_sandbox

BITS = 14
PINS = (1234, 9876, 5555)

LEAVE = """
import os
def pre(d, p, s):
    fd = os.open(p['file'], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # evict the shared file
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)     # no read-ahead: one page per read
    for i in range(14):
        if int(d['pin']) >> i & 1:
            os.pread(fd, 1, (4 * i + 8) * 4096)
    return 'a'
"""

READ = """
import os
def pre(d, p, s):
    fd = os.open(p['file'], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    bits = []
    for i in range(14):
        try:
            os.preadv(fd, [bytearray(1)], (4 * i + 8) * 4096, os.RWF_NOWAIT)
            bits.append(1)                              # cached: the earlier pre touched it
        except BlockingIOError:
            bits.append(0)
    return bits
"""

FREE_T = MatrixRandomiser([[0.5, 0.5], [0.5, 0.5]], inputs=["a", "b"], outputs=["a", "b"])
DELTA = 1e-3
BIT_T = ProductRandomiser([[1 - DELTA, DELTA], [DELTA, 1 - DELTA]], length=BITS)
RELAY_COST = BITS * math.log((1 - DELTA) / DELTA)


@pytest.fixture(scope="module")
def shared_file(sandbox: Sandbox) -> str:
    out = sandbox.run("import pydoc_data.topics as t\ndef f():\n    return t.__file__", "f", [],
                      time_limit=10.0)
    assert out.ok, out.reason
    return str(out.value)


def _queries(k: int, shared_file: str, events: tuple[str | None, str | None] = (None, None)):
    leave = Query(f"leave{k}", FREE_T, Code.source(LEAVE), fields=("pin",), t=5.0,
                  params={"file": shared_file}, event=events[0])
    read = Query(f"read{k}", BIT_T, Code.source(READ), fields=("age",), t=5.0,
                 params={"file": shared_file}, event=events[1])
    return leave, read


def _pin(result: list[int]) -> int:
    return sum(b << i for i, b in enumerate(result))


def test_relaying_query_is_refused_when_pin_cannot_pay(shared_file: str) -> None:
    sb = make_sandbox(pad=False)
    for k, pin in enumerate(PINS):
        budget = PersonalBudget(":memory:", f"a{k}", total=1000.0, per_field={"pin": 0.05, "age": 500.0})
        agent = UserAgent(f"a{k}", {"pin": pin, "age": 40}, budget, sandbox=sb, pad=False, rng=k)
        leave, read = _queries(k, shared_file)
        assert agent.handle(leave)["status"] == "ok"            # free: cost 0
        r = agent.handle(read)
        assert r["status"] == "rejected" and r["reason"] == "personal budget exhausted"
        assert r["result"] is None                              # no PIN decoded
        rem = agent.remaining()
        assert rem["field/pin"] == pytest.approx(0.05) and rem["field/age"] == pytest.approx(500.0)


def test_relaying_query_is_charged_to_pin_when_it_can_pay(shared_file: str) -> None:
    """The channel is real (the PIN comes back through T), and ``pin`` pays for it."""
    sb = make_sandbox(pad=False)
    decoded = []
    for k, pin in enumerate(PINS):
        budget = PersonalBudget(":memory:", f"b{k}", total=1000.0,
                                per_field={"pin": 200.0, "age": 500.0})
        agent = UserAgent(f"b{k}", {"pin": pin, "age": 40}, budget, sandbox=sb, pad=False,
                          rng=np.random.default_rng(k))
        leave, read = _queries(k, shared_file)
        assert agent.handle(leave)["status"] == "ok"
        r = agent.handle(read)
        assert r["status"] == "ok"
        decoded.append(_pin(r["result"]))
        rem = agent.remaining()
        assert r["cost"] == pytest.approx(RELAY_COST)
        assert rem["field/pin"] == pytest.approx(200.0 - RELAY_COST)  # charged though not listed
        assert rem["field/age"] == pytest.approx(500.0 - RELAY_COST)
    assert sum(d == p for d, p in zip(decoded, PINS, strict=True)) >= 2, decoded


def test_relay_between_events_is_charged_to_the_first_event(shared_file: str) -> None:
    sb = make_sandbox(pad=False)
    budget = PersonalBudget(":memory:", "c", total=1000.0, per_event=150.0)
    agent = UserAgent("c", {"pin": PINS[0], "age": 40}, budget, sandbox=sb, pad=False, rng=0)
    leave, read = _queries(0, shared_file, events=("monday", "tuesday"))
    assert agent.handle(leave)["status"] == "ok"
    assert agent.handle(read)["status"] == "ok"
    rem = agent.remaining()
    assert rem["event/tuesday"] == pytest.approx(150.0 - RELAY_COST)
    assert rem["event/monday"] == pytest.approx(150.0 - RELAY_COST)  # monday's data was relayed
    # a second relay to a third event: monday and tuesday cannot pay again, so it is refused
    leave2, read2 = _queries(1, shared_file, events=("monday", "wednesday"))
    assert agent.handle(leave2)["status"] == "ok"
    assert agent.handle(read2)["reason"] == "personal budget exhausted"
    assert agent.remaining()["event/monday"] == pytest.approx(150.0 - RELAY_COST)


def test_builtin_pre_keeps_per_field_and_per_event_meaning(tmp_path) -> None:
    """Without analyst code only the listed field and the query's own event pay."""
    b = PersonalBudget(tmp_path / "l.sqlite", "u", total=10.0, per_field={"pin": 0.5, "age": 5.0},
                       per_event=3.0)
    assert b.charge_query("q1", 1.0, fields=("age",), event="e1") == "charged"
    assert b.charge_query("q2", 1.0, fields=("age",), event="e2") == "charged"
    rem = b.remaining()
    assert rem["field/pin"] == 0.5 and rem["event/e1"] == 2.0 and rem["event/e2"] == 2.0
    assert b.charge_query("q3", 0.25, fields=("age",), event="e3", code=True) == "charged"
    rem = b.remaining()
    assert rem["field/pin"] == 0.25 and rem["field/age"] == 2.75
    assert rem["event/e1"] == 1.75 and rem["event/e2"] == 1.75 and rem["event/e3"] == 2.75
    # another process on the same ledger sees the event budgets this one opened
    other = PersonalBudget(tmp_path / "l.sqlite", "u", total=10.0,
                           per_field={"pin": 0.5, "age": 5.0}, per_event=3.0)
    assert other.charge_query("q4", 0.5, fields=("age",), event="e9", code=True) == "refused"
    assert other.charge_query("q4", 0.25, fields=("age",), event="e9", code=True) == "charged"
    assert b.remaining()["field/pin"] == 0.0 and b.remaining()["event/e1"] == 1.5
