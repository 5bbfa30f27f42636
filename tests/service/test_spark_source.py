"""Sources served through Spark (``engine = "spark"``): the configuration, Spark's own costs in
the static work bound, and the service's security tests on Spark-backed PINQ and ProPer sources
(neighbouring datasets, response times, kill -9 of the server), as for DuckDB sources.

The Spark tests need a Java runtime (they skip with the reason otherwise) and start a local
Spark session; they are few and marked slow."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from ibis import _

from dprivacy.errors import ConfigError, ValidationError
from dprivacy.remote import connect
from dprivacy.service.auth import key_sha256
from dprivacy.service.config import load_config, parse_config
from dprivacy.service.plan import MAX_TABLES
from dprivacy.service.shares import cpu_fraction
from dprivacy.service.workbound import capacity_seconds, deadline_seconds, plan_bound
from tests.service.conftest import KEYS, at_once, people

COUNT = {"op": "noisy_count", "eps": 0.1}


def _doc(spark: dict | None = None, **src: object) -> dict:
    people_src = {"name": "people", "path": "people.parquet", "kind": "proper", "id": "pid",
                  "budget_column": "eps", "engine": "spark", "max_rows": 1000, **src}
    doc = {"service": {"base_seconds": 0.02, "row_seconds": 5e-8, "query_seconds": 0.1},
           "source": [people_src,
                      {"name": "visits", "path": "visits.parquet", "kind": "pinq",
                       "budget": 1.0, "max_rows": 1000}],
           "analyst": [{"name": "alice", "key_sha256": "0" * 64}]}
    if spark is not None:
        doc["spark"] = spark
    return doc


def test_the_spark_configuration(tmp_path: Path) -> None:
    cfg = parse_config(_doc({"master": "local[2]", "base_seconds": 0.5, "row_seconds": 1e-6,
                             "max_work_rows": 10_000, "conf": {"spark.sql.adaptive.enabled":
                                                               True}}),
                       tmp_path, Path("st"))
    src = cfg.source("people")
    assert src is not None and src.engine == "spark" and src.format == "parquet"
    assert src.url == str((tmp_path / "people.parquet").resolve())
    assert cfg.source("visits").engine == "duckdb"  # type: ignore[union-attr]
    assert cfg.spark is not None and cfg.spark.budget_dir == (tmp_path / "st" / "spark-budgets")
    assert cfg.spark.conf == (("spark.sql.adaptive.enabled", "true"),)
    url = parse_config(_doc({"budget_dir": "file:///mnt/shared/budgets"},
                            path="s3a://bucket/people/"), tmp_path, Path("st"))
    assert url.source("people").url == "s3a://bucket/people/"  # type: ignore[union-attr]
    assert url.spark.budget_dir == Path("/mnt/shared/budgets")  # type: ignore[union-attr]
    cat = _doc({})
    del cat["source"][0]["path"]
    cat["source"][0]["table"] = "warehouse.people"
    assert parse_config(cat, tmp_path, Path("st")).source("people").format == "catalog"  # type: ignore[union-attr]
    for doc, msg in ((_doc(None), r"needs a \[spark\] table"),
                     (_doc({}, engine="flink"), "engine 'flink'"),
                     (_doc({"budget_dir": "s3a://bucket/budgets"}), "POSIX"),
                     (_doc({}, path="people.duckdb", table="t"), "not a DuckDB database"),
                     (_doc({"mastr": "local"}), "unknown key 'mastr'"),
                     (_doc({"row_seconds": 0}), "row_seconds"),
                     (_doc({"budgets": "ledger"}), "expected 'table' or 'slots'")):
        with pytest.raises(ConfigError, match=msg):
            parse_config(doc, tmp_path, Path("st"))
    from dprivacy.service.spark_sources import spark_budgets

    csv = parse_config(_doc({"budgets": "slots"}, path="people.csv"), tmp_path, Path("st"))
    with pytest.raises(ConfigError, match="beside the rows of Parquet files"):
        spark_budgets(csv, csv.sources[0], None)


def test_spark_plans_are_bounded_with_sparks_costs(tmp_path: Path) -> None:
    cfg = parse_config(_doc({"base_seconds": 0.5, "step_seconds": 0.001, "row_seconds": 1e-6,
                             "max_work_rows": 10_000}), tmp_path, Path("st"))
    spark = plan_bound({"source": "people", "steps": []}, COUNT, cfg)
    duck = plan_bound({"source": "visits", "steps": []}, COUNT, cfg)
    assert (spark.engine, duck.engine) == ("spark", "duckdb")
    assert spark.seconds(cfg) == pytest.approx(0.5 + spark.work * 1e-6)
    assert duck.seconds(cfg) == pytest.approx(0.02 + duck.work * 5e-8)
    three = [{"op": "where", "pred": {"col": "age"}}] * 3
    b3 = plan_bound({"source": "people", "steps": three}, COUNT, cfg)
    assert b3.seconds(cfg) == pytest.approx(0.5 + 3 * 0.001 + b3.work * 1e-6)
    # the largest admissible plan of each engine, every possible step counted; a deadline
    # follows from the plan's own cost and the analyst's worker's CPU fraction
    steps = MAX_TABLES * cfg.max_plan_steps
    assert capacity_seconds(cfg, "spark") == pytest.approx(0.5 + steps * 0.001 + 10_000 * 1e-6)
    assert capacity_seconds(cfg, "duckdb") == pytest.approx(0.02 * (1 + steps)
                                                            + 2_000_000 * 5e-8)
    assert capacity_seconds(cfg) == max(capacity_seconds(cfg, "spark"),
                                        capacity_seconds(cfg, "duckdb"))
    assert deadline_seconds(cfg, "alice", duck, {"visits"}) == pytest.approx(
        max(cfg.query_seconds, duck.seconds(cfg) / cpu_fraction(cfg, "alice")))
    where = {"op": "where", "pred": {"col": "age"}}
    with pytest.raises(ValidationError, match="capacity of 1e.04 rows"):  # Spark's own
        plan_bound({"source": "people", "steps": [where] * 8}, COUNT, cfg)
    plan_bound({"source": "visits", "steps": [where] * 4}, COUNT, cfg)  # DuckDB's
    join = {"op": "concat", "other": {"source": "visits", "steps": []}}
    with pytest.raises(ValidationError, match="one engine"):
        plan_bound({"source": "people", "steps": [join]}, COUNT, cfg)
    with pytest.raises(ValidationError, match="as_pinq is not served on Spark"):
        plan_bound({"source": "people", "steps": [{"op": "as_pinq", "eps": 0.5}]}, COUNT, cfg)


# ---------------------------------------------------------------------- on a Spark session
def _need_java() -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime: none on PATH and JAVA_HOME unset "
                    "(install one, e.g. the distribution's openjdk-17-jre-headless)")


#: Spark's costs in these tests: a ProPer count on Spark takes 0.3-3 s on the shared 2-core
#: machine (its charge writes and syncs a version of the budgets); with one analyst (the whole
#: engine) a plan's deadline is B + C, about 2 x base_seconds
SPARK = """
[spark]
master = "local[2]"
driver_memory = "1g"
base_seconds = {base}
step_seconds = 0.001
row_seconds = 1e-6
max_work_rows = 10000
budgets = "{budgets}"
"""


def write_spark_service(d: Path, ppl: pd.DataFrame, *, max_rows: int = 1000,
                        base_seconds: float = 2.0, budgets: str = "table") -> Path:
    """people (ProPer, personal budgets from ``eps``) and visits (PINQ, budget 1.0), both read
    through Spark; one analyst (alice)."""
    d.mkdir(parents=True, exist_ok=True)
    ppl.to_parquet(d / "people.parquet")
    visits = pd.DataFrame({"age": ppl["age"].to_numpy(),
                           "city": (["x", "y"] * len(ppl))[: len(ppl)]})
    visits.to_parquet(d / "visits.parquet")
    cfg = d / "service.toml"
    cfg.write_text(f"""
[service]
query_seconds = 0.25

[[source]]
name = "people"
path = "people.parquet"
kind = "proper"
engine = "spark"
id = "pid"
budget_column = "eps"
max_rows = {max_rows}

[[source]]
name = "visits"
path = "visits.parquet"
kind = "pinq"
engine = "spark"
budget = 1.0
max_rows = {max_rows}

[[analyst]]
name = "alice"
key_sha256 = "{key_sha256(KEYS['alice'])}"
{SPARK.format(base=base_seconds, budgets=budgets)}""")
    return cfg


@pytest.mark.slow
def test_neighbours_timing_and_the_row_cap_on_spark_sources(tmp_path: Path) -> None:
    """The analyst program of the DuckDB neighbour tests, on Spark-backed sources (ProPer
    budgets beside the rows: ``budgets = "slots"``; the kill -9 test uses the table store): a
    record whose personal budget is exhausted and an absent one give the same errors, messages
    and budgets; the ProPer drop probe's response times do not tell them apart; a source above
    its row cap is refused at start."""
    _need_java()
    from dprivacy.service.serve import ServiceThread
    from tests.service.test_neighbours import TARGET, _shape, program
    from tests.service.test_timing import _times, best_threshold_accuracy

    with pytest.raises(ConfigError, match="above its max_rows = 150"):
        ServiceThread(load_config(write_spark_service(tmp_path / "big", people(200),
                                                      max_rows=150)))
    base = people(200)
    exhausted = people(200, extra=dict(TARGET, eps=0.0))
    running = []
    try:
        # deadlines of about 4 s: an overrun is answered by its default, which would turn a
        # refusal into a value on one neighbour only, for a reason that is not the data
        for name, ppl in (("a", base), ("b", exhausted)):
            running.append(ServiceThread(load_config(write_spark_service(
                tmp_path / name, ppl, budgets="slots"))))
        a, b = running
        # both programs at the same time: each neighbour's service has its own worker and Spark
        # session, and the programs mostly wait for their deadlines (4 s, against a Spark
        # count's 0.3-3 s); any overrun still shows as a difference of the outcomes below
        runs = at_once({"a": lambda: program(a.url), "b": lambda: program(b.url)})
        ra, rb = runs["a"], runs["b"]
        assert _shape(ra) == _shape(rb)
        assert ra[4] == ("public", 0.5) and ra[10] == ("public", 0.4)
        assert ra[3][:2] == ("error", "BudgetExceededError")
        assert ra[5][:2] == ("error", "UnsupportedOperationError")
        assert ra[6][:2] == ("error", "UnsupportedOperationError")
        assert ra[11][1] in ("x", "y")
        for srv in running:
            srv.stop()
        running.clear()

        # the drop probe: the target (pid 999) has budget 0 on b and is absent on a; deadlines
        # of about 1 s (an overrun changes the answer, never the time it is released at)
        for name, ppl in (("ta", base), ("tb", exhausted)):
            running.append(ServiceThread(load_config(write_spark_service(
                tmp_path / name, ppl, base_seconds=0.5, budgets="slots"))))
        a, b = running
        probe = connect(a.url, key=KEYS["alice"]).table("people").where(
            (_.pid == 999) | (_.age > 60))
        body = {"v": 1, "table": probe.plan, "query": {"op": "noisy_count", "eps": 0.001}}
        accs = []
        for _attempt in range(3):
            ta, tb = _times(a.url, b.url, body)
            accs.append(best_threshold_accuracy(ta, tb))
            if accs[-1] <= 0.65:
                break
        assert min(accs) <= 0.65, accs
    finally:
        for srv in running:
            srv.stop()
    _row_guard(tmp_path / "guard")


def _row_guard(d: Path) -> None:
    """A Parquet source (a directory of files) counted at start, then rewritten longer and
    grown by a new file: no more rows than were counted get through."""
    import ibis

    from dprivacy.service.spark_sources import open_spark_source, spark_session

    (d / "parts").mkdir(parents=True)
    for i in range(2):
        pd.DataFrame({"pid": np.arange(100) + 100 * i}).to_parquet(d / "parts" / f"{i}.parquet")
    doc = _doc({}, path="parts", max_rows=200, budget=1.0)
    del doc["source"][0]["budget_column"]
    cfg = parse_config(doc, d, Path("st"))
    assert cfg.spark is not None
    con = ibis.pyspark.connect(spark_session(cfg.spark))
    t = open_spark_source(con, cfg.sources[0])
    assert int(t.count().execute()) == 200
    pd.DataFrame({"pid": np.arange(5000)}).to_parquet(d / "parts" / "0.parquet")
    pd.DataFrame({"pid": np.arange(5000)}).to_parquet(d / "parts" / "2.parquet")
    assert int(t.count().execute()) <= 200
    with pytest.raises(ConfigError, match="above its max_rows"):  # read again: 10 100 rows
        open_spark_source(con, cfg.sources[0])


def _serve(cfg: Path, port: int) -> subprocess.Popen:
    """``dprivacy serve`` in a subprocess, once it answers its health check (a Spark session
    and its warm-up take up to a minute or two on a loaded machine)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    log = open(cfg.parent / f"serve-{port}.log", "w")  # noqa: SIM115
    p = subprocess.Popen([sys.executable, "-m", "dprivacy", "serve", "--config", str(cfg),
                          "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log)
    p.log = Path(log.name)  # type: ignore[attr-defined]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        if p.poll() is not None:
            raise RuntimeError(Path(log.name).read_text())
        time.sleep(0.2)
    p.kill()
    p.wait()
    raise RuntimeError("serve did not start in 300 s")


@pytest.mark.slow
def test_sigkill_of_a_server_with_spark_sources(tmp_path: Path, capsys) -> None:
    """kill -9 of ``dprivacy serve`` while an analyst queries Spark-backed sources: every
    released answer was charged (PINQ in the ledger, ProPer in the SparkBudgetTable), nothing
    is lost or charged twice, and the committed queries are the ones the budgets show (and the
    owner's ``dprivacy budgets`` prints)."""
    _need_java()
    from dprivacy.tables import Ledger
    from dprivacy.tables.budgets.spark_budgets import SparkBudgetTable
    from tests.service.test_crash import _port

    cfg = write_spark_service(tmp_path, people(50), base_seconds=1.0)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(cfg, port)
    answered = {"pinq": 0, "proper": 0}
    stop = threading.Event()

    def analyst() -> None:
        s = connect(url, key=KEYS["alice"], timeout=30)
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
    t0 = time.monotonic()
    while answered["proper"] < 5 and time.monotonic() - t0 < 300:
        time.sleep(0.05)
    time.sleep(0.5)  # a ProPer query is in flight now (its charge takes ~1 s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.set()
    th.join()
    n_pinq, n_proper = answered["pinq"], answered["proper"]
    assert n_proper >= 5
    text = proc.log.read_text()  # type: ignore[attr-defined]
    # (a query answered while its worker was still restarting was sent nothing: no charge)
    overruns = text.count("overran its deadline") + text.count("was still starting")
    # a query that overran before it started was answered by its default (pure noise) and is
    # charged when the engine reaches it: a kill before then loses that PINQ charge
    skipped = text.count("not started")
    time.sleep(2.0)  # the driver's JVM exits when its Python parent is gone

    state = tmp_path / "service.state"
    led = Ledger(state / "pinq.sqlite")
    pinq_left = float(led.remaining([led.named_record("pinq:visits/alice", None)])[0])
    led.close()
    store = SparkBudgetTable(state / "spark-budgets" / "proper-people")
    left, others = store.remaining(np.arange(10)), store.remaining(np.arange(10, 50))
    queries = store.queries()
    store.close()
    # every released PINQ answer was charged (one more query may have been in flight)
    assert 1.0 - 0.01 * (n_pinq + 1) - 1e-9 <= pinq_left <= 1.0 - 0.01 * (n_pinq - skipped) + 1e-9
    # ProPer: each committed query charged the ten people once (none lost, none twice) ...
    charged = [q for q in queries if q[2] > 0]
    assert all(q[2] == 10 and q[3] == pytest.approx(0.1) for q in charged)
    assert np.allclose(left, 1.0 - 0.01 * len(charged)) and np.all(others == 1.0)
    # ... and every released answer was committed first (an overrun one that never started
    # charged nobody; at most one more query was in flight)
    assert n_proper - overruns <= len(charged) <= n_proper + 1

    from dprivacy.cli.app import main

    capsys.readouterr()
    assert main(["budgets", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"source people (ProPer, 50 people, {len(queries)} queries committed)" in out
    lines = [ln.split() for ln in out.splitlines()]
    k = 10 if charged else 0
    assert ["all", "(untouched)", str(50 - k)] in lines and ["(75%,", "100%)", str(k)] in lines


def test_the_documented_spark_configuration_parses(tmp_path: Path) -> None:
    """docs/service.md's [[source]] + [spark] example is a valid configuration."""
    import re
    import tomllib

    page = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    section = page[page.index("## Sources in a cluster (Spark)"):]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    doc = tomllib.loads(block.group(1))
    doc["analyst"] = [{"name": "alice", "key_sha256": "0" * 64}]
    cfg = parse_config(doc, tmp_path, Path("st"))
    src = cfg.sources[0]
    assert (src.engine, src.url, src.max_rows) == ("spark", "s3a://warehouse/people/", 10**8)
    assert cfg.spark is not None and cfg.spark.budget_dir == Path("/mnt/shared/dprivacy-budgets")
    assert cfg.costs("spark") == (2.0, 0.02, 2e-7, 500_000_000)
