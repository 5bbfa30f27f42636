"""The static work bound of a plan (from the plan and the sources' caps only), the refusal of a
plan above the service's capacity before any charge, the deadline that follows from the bound,
the sources' row caps, and the budget column kept out of the analyst's schema."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.errors import ConfigError, ValidationError
from dprivacy.remote import connect
from dprivacy.service.config import load_config
from dprivacy.service.execute import Builder
from dprivacy.service.plan import MAX_TABLES
from dprivacy.service.serve import ServiceThread
from dprivacy.service.shares import cpu_fraction, nice_weight, worker_nice
from dprivacy.service.sources import Owner
from dprivacy.service.workbound import (
    RELOAD_COMMITS,
    capacity_seconds,
    deadline_seconds,
    plan_bound,
    store_allowance,
    table_rows,
)
from tests.service.conftest import KEYS, people, write_service

CAPS = "max_rows = 300\nmax_work_rows = 2000000"
PUB14 = {"columns": ["j"], "rows": [[i] for i in range(14)]}
COUNT = {"op": "noisy_count", "eps": 0.1}


def _cfg(tmp_path: Path, service: str = CAPS):
    return load_config(write_service(tmp_path, people(200), service=service))


def _where(col: str = "age", v: int = 40) -> dict:
    return {"op": "where", "pred": {"expr": [
        {"op": "Field", "name": col}, {"op": "Literal", "value": v, "dtype": "int64"},
        {"op": "Greater", "args": {"left": {"ref": 0}, "right": {"ref": 1}}}]}}


def test_the_bound_of_every_step_follows_its_definition(tmp_path):
    cfg = _cfg(tmp_path)
    t = {"source": "people", "steps": [_where(), {"op": "product", "public": PUB14}]}
    assert table_rows(t, cfg) == 300 * 14
    t["steps"].append({"op": "select_many", "k": 3, "f": {"expr": []}, "columns": None})
    assert table_rows(t, cfg) == 300 * 14 * 3
    v = {"source": "visits", "steps": [{"op": "take", "n": 7}]}
    assert table_rows(v, cfg) == 7
    v = {"source": "visits", "steps": [{"op": "concat", "other": {"source": "visits",
                                                                  "steps": []}}]}
    assert table_rows(v, cfg) == 600
    j = {"source": "visits", "steps": [{"op": "join", "other": {"source": "visits", "steps": [
        {"op": "take", "n": 10}]}, "bound": [2, 5], "on": "age"}]}
    assert table_rows(j, cfg) == min(300 * 5, 10 * 2)
    g = {"source": "visits", "steps": [{"op": "group_by", "key": [], "aggs": {}}]}
    assert table_rows(g, cfg) == 300
    # work: every intermediate, the aggregation's read, and a ProPer charge
    b = plan_bound({"source": "people", "steps": [_where()]}, COUNT, cfg)
    assert (b.rows, b.work) == (300, 300 + 300 + 300 + 300)
    b = plan_bound({"source": "visits", "steps": []},
                   {"op": "exponential_mechanism", "eps": 1, "candidates": [1, 2, 3],
                    "scores": [{}, {}, {}]}, cfg)
    assert b.work == 300 + 3 * 300


def test_fan_out_is_capped_per_plan_not_per_step(tmp_path):
    """Each product of 14 rows is harmless alone; eight of them are refused as one plan."""
    cfg = _cfg(tmp_path)
    one = {"source": "people", "steps": [_where("pid", 0), {"op": "product", "public": PUB14}]}
    assert plan_bound(one, COUNT, cfg).rows == 300 * 14
    eight = {"source": "people", "steps": [_where("pid", 0)]
             + [{"op": "product", "public": PUB14}] * 8}
    with pytest.raises(ValidationError, match="capacity") as e:
        plan_bound(eight, COUNT, cfg)
    assert "\n" not in str(e.value)


def test_actual_rows_never_exceed_the_bound(tmp_path):
    """On the owner's side, every prefix of several plans has at most its bound's rows (data at
    the caps: 300 rows)."""
    cfg = load_config(write_service(tmp_path, people(300), service=CAPS))
    srv = ServiceThread(cfg)
    try:
        run = srv.runner
        pub = {"columns": ["age", "j"], "rows": [[a, i] for i, a in enumerate([0, 7, 7, 14])]}
        plans = [
            {"source": "people", "steps": [_where("age", 5), {"op": "product", "public": PUB14},
                                           {"op": "join_public", "public": pub, "on": "age"}]},
            {"source": "visits", "steps": [{"op": "concat", "other": {
                "source": "visits", "steps": [_where("age", 10)]}},
                {"op": "join", "other": {"source": "visits", "steps": []}, "bound": [2, 3],
                 "on": "age"}]},
            {"source": "visits", "steps": [{"op": "group_by", "key": "city", "aggs": {}},
                                           {"op": "take", "n": 5}]},
        ]

        owner = Owner(run.cfg)  # the owner's own view of the sources, in this thread

        def count(t: dict) -> int:
            tab = Builder(lambda s: owner.table(s, "alice")).table(t)
            return int(tab._rel.table.count().execute())

        for p in plans:
            for i in range(len(p["steps"]) + 1):
                t = {"source": p["source"], "steps": p["steps"][:i]}
                got = count(t)
                assert 0 < got <= table_rows(t, cfg), (t, got)
    finally:
        srv.stop()


def test_a_source_above_its_cap_is_refused_at_start(tmp_path):
    cfg = load_config(write_service(tmp_path, people(200), service="max_rows = 150"))
    with pytest.raises(ConfigError, match="above its max_rows"):
        ServiceThread(cfg)
    text = (tmp_path / "service.toml").read_text().replace(
        'budget_column = "eps"', 'budget_column = "eps"\nmax_rows = 250').replace(
        "budget = 1.0", "budget = 1.0\nmax_rows = 200")
    (tmp_path / "service.toml").write_text(text)
    cfg = load_config(tmp_path / "service.toml")
    assert [s.max_rows for s in cfg.sources] == [250, 200]
    ServiceThread(cfg).stop()  # within the caps: starts


def test_over_capacity_is_refused_before_any_charge_at_the_default_deadline(start):
    srv = start(query_seconds=0.2, service=CAPS)
    s = connect(srv.url, key=KEYS["alice"])
    p = s.table("people").where(_.pid == 3)
    for i in range(8):
        p = p.product(pd.DataFrame({f"j{i}": range(14)}))
    before = srv.runner.owner.budgets["people"].remaining(np.arange(200))
    t0 = time.perf_counter()
    with pytest.raises(ValidationError, match="capacity"):
        p.noisy_count(1.0)
    assert time.perf_counter() - t0 >= 0.2
    assert np.array_equal(srv.runner.owner.budgets["people"].remaining(np.arange(200)), before)


def test_the_deadline_follows_from_the_bound(start):
    """With a slow calibrated cost per row, a plan with a larger bound is answered later, at
    max(query_seconds, C / f) (f: the analyst's worker's guaranteed fraction of a CPU);
    query_seconds stays the floor."""
    srv = start(query_seconds=0.5, service="max_rows = 1000\nmax_work_rows = 100000\n"
                                           "row_seconds = 1e-5\nbase_seconds = 0.05")
    cfg = srv.runner.cfg
    s = connect(srv.url, key=KEYS["alice"])
    small = s.table("visits").take(5)
    big = s.table("people").product(pd.DataFrame({"j": range(20)}))
    # every step costs base_seconds: the capacity counts the most steps a plan may have
    assert capacity_seconds(cfg) == pytest.approx(0.05 * (1 + MAX_TABLES * cfg.max_plan_steps)
                                                  + 100000 * 1e-5)
    f = cpu_fraction(cfg, "alice")
    assert f == pytest.approx(min(1.0, cfg.cpus / 2))  # two analysts, equal shares
    wants: list[float] = []
    for t in (small, big):
        b = plan_bound(t.plan, COUNT, cfg)
        want = deadline_seconds(cfg, "alice", b, {t.plan["source"]})
        assert b.seconds(cfg) <= capacity_seconds(cfg)
        store = store_allowance(cfg, {t.plan["source"]})
        assert want == pytest.approx(max(0.5, b.seconds(cfg) / f + store / f))
        wants.append(want)
        t0 = time.perf_counter()
        t.noisy_count(0.1)
        dt = time.perf_counter() - t0
        assert want <= dt < want + 0.5, (want, dt)
    assert wants[0] == 0.5 and wants[1] > 0.55  # the floor, then the bound's deadline
    assert srv.runner.overruns == 0


def test_the_budget_store_allowance_follows_from_the_configuration(tmp_path):
    """A plan that charges personal budgets gets the budget store's allowance for the other
    analysts' commits (store_seconds per person, up to max_rows people, analysts +
    RELOAD_COMMITS commits), divided by the smallest guaranteed CPU fraction; a PINQ plan
    none. It depends on the configuration only: never on the data or on other requests."""
    cfg = _cfg(tmp_path, CAPS + "\nstore_seconds = 1e-4\nrow_seconds = 1e-9\ncpus = 1")
    assert cfg.store_seconds == 1e-4
    want = 1e-4 * 300 * (2 + RELOAD_COMMITS)
    assert store_allowance(cfg, {"people"}) == pytest.approx(want)
    assert store_allowance(cfg, {"visits"}) == 0.0
    f = min(cpu_fraction(cfg, a) for a in ("alice", "bob"))
    pro = plan_bound({"source": "people", "steps": []}, COUNT, cfg)
    pin = plan_bound({"source": "visits", "steps": []}, COUNT, cfg)
    assert deadline_seconds(cfg, "alice", pro, {"people"}) == pytest.approx(
        max(0.25, pro.seconds(cfg) / cpu_fraction(cfg, "alice") + want / f))
    assert deadline_seconds(cfg, "alice", pin, {"visits"}) == pytest.approx(
        max(0.25, pin.seconds(cfg) / cpu_fraction(cfg, "alice")))
    # one more analyst: one more commit to wait for, and a smaller share each
    text = write_service(tmp_path / "three", people(200), service=CAPS + "\nstore_seconds = "
                         "1e-4\ncpus = 1").read_text()
    path = tmp_path / "three" / "service.toml"
    path.write_text(text + '\n[[analyst]]\nname = "carol"\nkey_sha256 = "' + "0" * 64 + '"\n')
    three = load_config(path)
    assert store_allowance(three, {"people"}) == pytest.approx(1e-4 * 300 * (3 + RELOAD_COMMITS))
    with pytest.raises(ConfigError, match="store_seconds"):
        _cfg(tmp_path / "bad", CAPS + "\nstore_seconds = 0")


def test_the_budget_column_is_not_in_the_analysts_schema(start):
    srv = start(query_seconds=0.1)
    s = connect(srv.url, key=KEYS["alice"])
    p = s.table("people")
    assert "eps" not in p.columns and {"pid", "age", "name"} <= set(p.columns)
    h = {"Authorization": f"Bearer {KEYS['alice']}"}
    r = httpx.post(srv.url + "/v1/query", headers=h, json={
        "v": 1, "table": {"source": "people", "steps": [_where("eps", 0)]}, "query": COUNT})
    assert r.status_code == 400
    with pytest.raises(ValidationError):
        p.noisy_sum(0.1, "eps", 0, 1)


def test_shares_split_the_engine(tmp_path):
    path = write_service(tmp_path, people(10))
    text = path.read_text()
    cfg = load_config(path)
    assert cfg.share("alice") == cfg.share("bob") == 0.5
    path.write_text(text.replace('name = "alice"\n', 'name = "alice"\nshare = 0.8\n'))
    cfg = load_config(path)
    assert cfg.share("alice") == 0.8 and cfg.share("bob") == pytest.approx(0.2)
    b = plan_bound({"source": "visits", "steps": []}, COUNT, cfg)
    # bob's worker runs round(log_1.25(0.8 / 0.2)) = 6 nice steps below alice's
    assert worker_nice(cfg, "bob", base=0) - worker_nice(cfg, "alice", base=0) == 6
    fa, fb = cpu_fraction(cfg, "alice", base=0), cpu_fraction(cfg, "bob", base=0)
    wa, wb = nice_weight(5), nice_weight(11)
    assert fb == pytest.approx(min(1.0, cfg.cpus * wb / (wa + wb))) and fb < fa
    assert deadline_seconds(cfg, "bob", b, {"visits"}) == pytest.approx(
        max(0.25, b.seconds(cfg) / cpu_fraction(cfg, "bob")))
    # the CPUs the workers share: declared, or this process's
    path.write_text(text.replace("[service]\n", "[service]\ncpus = 1\n"))
    one = load_config(path)
    assert one.cpus == 1 and cpu_fraction(one, "bob", base=0) == pytest.approx(0.5)
    for bad in ("share = 1.0", "share = 1.5", "share = 0"):
        path.write_text(text.replace('name = "alice"\n', f'name = "alice"\n{bad}\n'))
        with pytest.raises(ConfigError, match="share"):
            load_config(path)


def test_calibration_at_start_measures_the_engine(tmp_path):
    """calibrate = true: the costs are measured on synthetic records at start and used (at
    least the configured ones); the deadlines follow the measured costs."""
    from dprivacy.service.calibrate import measure, measure_store

    base, per_row = measure(rows=20_000, repeat=3)
    assert 0 < base < 5 and 0 < per_row < 1e-3
    per_person = measure_store(people=20_000, repeat=3)
    assert 0 < per_person < 1e-3
    cfg = load_config(write_service(tmp_path, people(50), service="calibrate = true\n"
                                    "calibrate_factor = 2\nbase_seconds = 0.001\n"
                                    "row_seconds = 1e-9\nstore_seconds = 1e-12"))
    srv = ServiceThread(cfg)
    try:
        got = srv.runner.cfg
        assert got.base_seconds > 0.001 and got.row_seconds > 1e-9
        assert got.store_seconds > 1e-12  # the budget store's commit, measured
        s = connect(srv.url, key=KEYS["alice"])
        assert abs(s.table("visits").noisy_count(1.0) - 50) < 30
    finally:
        srv.stop()
