"""as_pinq through the service: the people are charged once, as in process; the tables an
analyst holds are capped before any charge."""

from __future__ import annotations

import pytest
from ibis import _

from dprivacy.errors import BudgetExceededError, UnsupportedOperationError, ValidationError
from dprivacy.remote import connect
from dprivacy.tables import ProPerTable
from tests.service.conftest import KEYS
from tests.service.release_fixtures import proper_charges, residents


def test_as_pinq_charges_the_people_once_as_in_process(service, monkeypatch):
    import dprivacy.service.execute as execute

    monkeypatch.setattr(execute, "_CACHE", 2)  # other plans evict derived tables quickly
    srv = service(query_seconds=1.5)  # generous: an overrun would change the charges
    s = connect(srv.url, key=KEYS["alice"])
    p = s.table("people")
    a = p.as_pinq(1.0)
    assert a.remaining_budget() == 1.0 and proper_charges(srv) == []  # nothing charged yet
    a.noisy_count(0.3)
    a.where(_.city == "a").noisy_count(0.3)
    for c in ("a", "b", "c"):  # fill (and overflow) the cache of derived tables
        p.where(_.city == c).noisy_count(0.1)
    a.take(10).noisy_count(0.1)  # stability 2: 0.2
    assert a.remaining_budget() == pytest.approx(0.2, abs=1e-12)
    with pytest.raises(BudgetExceededError):
        a.noisy_count(0.3)
    assert a.remaining_budget() == pytest.approx(0.2, abs=1e-12)  # a refusal charges nothing
    charges = proper_charges(srv)
    # the people paid the as_pinq's 1.0 once (60 payers), then the three 0.1 counts of their city
    assert [(n, round(t, 9)) for _q, _l, n, t in charges] == [(60, 60.0), (30, 3.0),
                                                               (20, 2.0), (10, 1.0)]
    # in process, the same program charges the same
    df = residents()
    local = ProPerTable(df, "eps", id_column="pid")
    la = local.as_pinq(1.0)
    la.noisy_count(0.3)
    la.where(lambda d: d["city"] == "a").noisy_count(0.3)
    la.take(10).noisy_count(0.1)
    assert la.remaining_budget() == pytest.approx(a.remaining_budget(), abs=1e-12)
    # a second as_pinq (another plan) is a second charge, as a second in-process call is
    b = p.where(_.city == "a").as_pinq(0.5)
    b.noisy_count(0.5)
    assert proper_charges(srv)[-1][2:] == (30, 15.0)
    assert b.remaining_budget() == 0.0


def test_as_pinq_tables_are_capped_before_any_charge(service):
    srv = service(query_seconds=1.5, service="max_as_pinq = 2")
    p = connect(srv.url, key=KEYS["alice"]).table("people")
    p.as_pinq(0.2).noisy_count(0.1)
    p.where(_.city == "a").as_pinq(0.1).noisy_count(0.1)
    before = proper_charges(srv)
    with pytest.raises(ValidationError, match="at most 2 as_pinq"):
        p.where(_.city == "b").as_pinq(0.1).noisy_count(0.1)
    assert proper_charges(srv) == before
    p.as_pinq(0.2).where(_.city == "c").noisy_count(0.1)  # an existing one still answers
    assert proper_charges(srv) == before and p.as_pinq(0.2).remaining_budget() < 1e-12
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    with pytest.raises(UnsupportedOperationError):
        v.as_pinq(0.1).remaining_budget()


def test_restart_keeps_release_charges_and_recharges_as_pinq(tmp_path):
    """Durable: a release's PINQ charge survives a restart. Per process: an as_pinq table is
    forgotten, so its first query after a restart charges the people again (over, never under)."""
    from tests.service.release_fixtures import owner_inputs, start_release_service

    _U, _M, W, d = owner_inputs()  # noqa: N806
    srv = start_release_service(tmp_path / "svc", residents(), query_seconds=1.5)
    try:
        s = connect(srv.url, key=KEYS["alice"])
        s.table("visits").release(W, d)
        s.table("people").as_pinq(1.0).noisy_count(0.1)
        first = proper_charges(srv)
    finally:
        srv.stop()
    srv = start_release_service(tmp_path / "svc", residents(), query_seconds=1.5)
    try:
        s = connect(srv.url, key=KEYS["alice"])
        assert s.table("visits").remaining_budget() == pytest.approx(99.5, abs=1e-12)
        a = s.table("people").as_pinq(1.0)
        assert a.remaining_budget() == 1.0  # a fresh as_pinq budget ...
        a.noisy_count(0.1)
        assert proper_charges(srv) == [*first, (2, None, 60, 60.0)]  # ... paid again
    finally:
        srv.stop()
