"""The client's table API through the service: order statistics over data-independent
candidates, budgets of a PINQ program equal to the same program in-process."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.remote import connect
from dprivacy.tables import Queryable
from tests.service.conftest import KEYS


def test_median_outputs_lie_in_the_same_finite_candidate_set(start):
    srv = start(query_seconds=0.15)
    p = connect(srv.url, key=KEYS["alice"]).table("people")
    empty, one = p.where(_.age < 0), p.where(_.pid == 3)
    grid = np.linspace(0, 100, 1025)
    for t in (empty, one):
        for _i in range(5):
            x = t.noisy_median(0.01, "age", 0, 100)
            assert np.isclose(grid, x, rtol=0, atol=1e-12).any(), x
        x = t.noisy_median(0.01, "age", 0, 100, candidates=[10.0, 20.5, 70.25])
        assert x in (10.0, 20.5, 70.25)
        x = t.noisy_order_statistic(0.01, 0.25, "age", 0, 100, candidates=np.array([1.0, 2.0]))
        assert x in (1.0, 2.0)


def test_pinq_budgets_match_the_in_process_program(start):
    """join (stability 2·bound), group_by (2), select_many (k) and partition (max) cost the same
    through the service as in-process."""
    srv = start(query_seconds=0.15)
    visits_df = pd.read_parquet(srv.runner.cfg.source("visits").path)

    def program(v):
        j = v.join(v, 1, "age")  # both sides of one source: 2 + 2
        j.noisy_count(0.05)
        v.group_by("city").noisy_count(0.05)
        v.select_many(3, lambda t: [t.age, t.age + 1]).noisy_count(0.05)
        parts = v.partition(["x", "y"], "city")
        parts["x"].noisy_count(0.1)
        parts["y"].noisy_count(0.05)
        return v.remaining_budget()

    remote = program(connect(srv.url, key=KEYS["alice"]).table("visits"))
    local = program(Queryable(visits_df, budget=1.0, backend="duckdb"))
    assert remote == pytest.approx(local, abs=1e-9)  # the ledger counts in 1e-9 units
    assert remote < 1.0 - 0.05 * 4


def test_csv_and_duckdb_database_sources(tmp_path):
    import duckdb

    from dprivacy.service import key_sha256, load_config
    from dprivacy.service.serve import ServiceThread

    df = pd.DataFrame({"pid": np.arange(50), "age": np.arange(50) % 30})
    df.to_csv(tmp_path / "a.csv", index=False)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("CREATE TABLE people AS SELECT * FROM df")
    con.close()
    (tmp_path / "s.toml").write_text(f"""
[service]
query_seconds = 0.2
[[source]]
name = "csv"
path = "a.csv"
kind = "pinq"
budget = 1.0
[[source]]
name = "db"
path = "w.duckdb"
table = "people"
kind = "proper"
id = "pid"
budget = 1.0
[[analyst]]
name = "alice"
key_sha256 = "{key_sha256(KEYS['alice'])}"
""")
    srv = ServiceThread(load_config(tmp_path / "s.toml"))
    try:
        s = connect(srv.url, key=KEYS["alice"])
        assert s.table("csv").schema == {"pid": "int64", "age": "int64"}
        assert abs(s.table("csv").where(_.age < 10).noisy_count(1.0) - 20) < 25
        assert abs(s.table("db").where(_.age < 10).noisy_count(1.0) - 20) < 25
        assert s.table("csv").remaining_budget() == 0.0
    finally:
        srv.stop()


def test_an_answer_without_value_is_a_service_error_not_a_type_error(monkeypatch):
    """The service answers ``null`` only where the default answer itself failed on the owner's
    side; the client says so with its own error instead of float(None)'s TypeError."""
    from dprivacy.remote import RemoteTable, ServiceError

    t = RemoteTable.__new__(RemoteTable)
    monkeypatch.setattr(RemoteTable, "_ask", lambda self, query: None)
    with pytest.raises(ServiceError, match="answered no value"):
        t.noisy_count(1.0)
    monkeypatch.setattr(RemoteTable, "_ask", lambda self, query: 3)
    assert t.noisy_count(1.0) == 3.0
