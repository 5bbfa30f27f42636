"""Many analysts at once against ``dprivacy serve``, then one of them flooding, with a kill -9.

A Parquet file of ``--rows`` records (pid, age 0-89, zone 0-49, x ~ U[0,1]) is served as a PINQ
source ``pinq`` (each analyst's budget 1e9, a d_X release universe over the 90 ages) and a ProPer
source ``proper`` (personal budgets 1e9) by ``python -m dprivacy serve`` in a subprocess (so that
it can be killed). ``--analysts`` analysts each keep ONE request outstanding (their share) and
cycle, in a seeded random order, through five queries, each analyst's client in a process of
its own (as a remote analyst's is):

* ``pinq_count`` / ``proper_count``: ``where(x > 0.5).noisy_count(eps)``;
* ``pinq_grouped`` / ``proper_grouped``: ``count_by(zone in 0..59, eps)`` (one request; ten of
  the public keys have no record);
* ``pinq_release``: a d_X release of the 90 age counts (identity workload, Discrete metric).

Phase ``steady`` runs them for ``--duration`` seconds. Phase ``flood`` runs them again while
analyst a0 also sends ``--flood`` times its share: a request every deadline/flood seconds,
whatever the answers (open loop), from a process of its own too. Every client process is
started, with its imports done and its connection open, before the phase begins, so that no
client's set-up is counted in a request's time. Halfway through the flood the server is
killed with SIGKILL and restarted on the same state; requests in flight then fail on the
client's side.

Reported per phase and analyst: answers, how many look real (a count above rows/4: the default
answer of an overrun query is noise around 0), lateness = response time − the query's deadline
(median, p99, max; the deadline computed from the plan and the configuration as the service
does), refusals at admission (HTTP 429/503), budget refusals (409), connection failures; the
server's count of overruns (its log); and the budget audit: each analyst's PINQ ledger spending
against the costs of the answers they received (each kind's cost measured on the ledger in a
warm-up), and the ProPer store's committed queries against the ProPer answers. The owner's
``dprivacy budgets`` output is appended to the report. Where the lateness comes from: the
service writes its own arrival stamp, deadline and release time of every query
(``DPRIVACY_SERVICE_TRACE``), and each answer's lateness is split into the client's send to the
arrival stamp (itself split into ``client``: until the client begins to write the request's
bytes, and ``wire``: from there to the arrival stamp, the kernel and the service's event loop),
the service's release after its deadline, the release to the moment the service wrote the
response's bytes to its socket (``respond``) and from there to the client's receipt
(``delivery``; every answer's parts in ``_stages.csv``). The CPU seconds the benchmark's own
clients use in each phase (the analysts' processes, the flooder's; this process's memory
sampler) are reported with the phase. The
service's memory: the peak proportional set size (PSS) of its process tree (the service, its
fork server, the workers and the deciders), sampled every 5 s.

The service runs each analyst's queries in a worker process of their own, 5 nice steps below
the service process; the costs are calibrated here on one DuckDB thread with a worker's memory
limit and the ProPer budgets in a durable store (as a worker runs them), and the budget store's
commit and catch-up on a store of ``--rows`` people (the allowance for the other analysts'
charges), and configured with a margin of 3. Run under ``nice`` the server (a child) is niced too: on a
busy machine its wake-ups at the deadlines are then delayed by the scheduler, which the lateness
includes, and its workers get less than their share.

Run ``python -m experiments.bench_service_load`` (8 analysts, 10^7 rows, 600 s per phase) or
with ``--rows 1000000 --duration 60``; ``--quick`` is a few seconds on 2000 rows (the test).
Writes ``<results>/bench_service_load[_quick].csv``, ``.md``, ``_requests.csv`` (every
request: phase, analyst, kind, status, start, sent and response seconds, deadline) and
``_stages.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprivacy.errors import DPrivacyError

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ["pinq_count", "proper_count", "pinq_grouped", "proper_grouped", "pinq_release"]
ZONES = 50
KEYS = list(range(ZONES + 10))


def write_parquet(path: Path, rows: int, chunk: int = 2_000_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    schema = pa.schema([("pid", pa.int64()), ("age", pa.int64()), ("zone", pa.int64()),
                        ("x", pa.float64())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            w.write_table(pa.table({"pid": np.arange(start, start + n, dtype=np.int64),
                                    "age": rng.integers(0, 90, n),
                                    "zone": rng.integers(0, ZONES, n), "x": rng.random(n)},
                                   schema=schema))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _has(field: str) -> bool:
    from dprivacy.service.config import ServiceConfig

    return field in {f.name for f in dataclasses.fields(ServiceConfig)}


class Server:
    """``python -m dprivacy serve`` in a subprocess, its stderr in ``log``."""

    def __init__(self, cfg: Path, port: int, log: Path, trace: Path | None = None) -> None:
        self.cfg, self.port, self.log, self.trace = cfg, port, log, trace
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600.0) -> float:
        import httpx

        t0 = time.monotonic()
        env = dict(os.environ)
        if self.trace is not None:  # the service's own release times, one JSON line a query
            env["DPRIVACY_SERVICE_TRACE"] = str(self.trace)
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dprivacy", "serve", "--config", str(self.cfg),
                 "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=err, env=env)
        while time.monotonic() - t0 < timeout:
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the service did not start: " + self.log.read_text()[-2000:])
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("the service did not start in time")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def overruns(self) -> int:
        """Queries the service answered by their default (its log): overruns, failures."""
        text = self.log.read_text() if self.log.exists() else ""
        return text.count("overran its deadline") + text.count("answered by the default")

    def demotions(self) -> int:
        """How often the service's threads left real-time priority (above its CPU cap)."""
        text = self.log.read_text() if self.log.exists() else ""
        return text.count("its threads are in the fair class")

    def restarting(self) -> int:
        """Queries answered by their default because their worker was still restarting after
        an overrun (its log)."""
        text = self.log.read_text() if self.log.exists() else ""
        return text.count("was still starting")


def _policy(server: Server) -> str:
    """The scheduling class of the service's event loop (its main thread): ``"realtime"`` or
    ``"fair"``."""
    try:
        from dprivacy.service.realtime import policy_of
    except ImportError:
        return "fair"
    assert server.proc is not None
    return policy_of(server.proc.pid)


def write_config(work: Path, rows: int, analysts: list[str], query_seconds: float,
                 row_seconds: float | None, max_work_rows: int | None,
                 store_seconds: float | None = None) -> dict[str, str]:
    """The service's TOML (and one key per analyst; returns name -> key)."""
    from dprivacy.service import new_key

    pd.DataFrame({"age": np.arange(90)}).to_csv(work / "ages.csv", index=False)
    keys, people = {}, []
    for a in analysts:
        key, digest = new_key()
        keys[a] = key
        people.append(f'[[analyst]]\nname = "{a}"\nkey_sha256 = "{digest}"\n')
    bound = _has("max_work_rows")
    svc = ['state_dir = "state"', f"query_seconds = {query_seconds}", "max_body_bytes = 1048576"]
    if bound:
        svc += [f"max_rows = {rows}", f"max_work_rows = {max_work_rows or 6 * rows}"]
        if row_seconds is not None:
            svc.append(f"row_seconds = {row_seconds}")
    if store_seconds is not None and _has("store_seconds"):
        svc.append(f"store_seconds = {store_seconds}")
    src_rows = f"max_rows = {rows}\n" if bound else ""
    (work / "service.toml").write_text(f"""
[service]
{chr(10).join(svc)}

[[source]]
name = "pinq"
path = "people.parquet"
kind = "pinq"
budget = 1e9
{src_rows}
[source.release]
universe = "ages.csv"
key = ["age"]
metric = "Discrete"
params = {{ eps = 1.0 }}

[[source]]
name = "proper"
path = "people.parquet"
kind = "proper"
id = "pid"
budget = 1e9
{src_rows}
{chr(10).join(people)}""")
    return keys


def bodies(cfg_path: Path, eps: float) -> dict[str, bytes]:
    """The request body of each kind, built as the client library builds them (expressions
    encoded on the sources' public schema; the release designed for the owner's universe and
    metric of the configuration)."""
    import ibis
    from ibis import _

    import dprivacy as dp
    from dprivacy.service.config import load_config
    from dprivacy.service.exprcodec import encode
    from dprivacy.service.plan import PLAN_VERSION
    from dprivacy.service.releases import open_release

    cfg = load_config(cfg_path)
    records = ibis.table(ibis.schema({"pid": "int64", "age": "int64", "zone": "int64",
                                      "x": "float64"}), name="records")
    half = encode((_.x > 0.5).resolve(records))
    out: dict[str, bytes] = {}
    for src in ("pinq", "proper"):
        where = {"source": src, "steps": [{"op": "where", "pred": half}]}
        out[f"{src}_count"] = json.dumps({"v": PLAN_VERSION, "table": where,
                                          "query": {"op": "noisy_count", "eps": eps}}).encode()
        out[f"{src}_grouped"] = json.dumps({
            "v": PLAN_VERSION, "table": {"source": src, "steps": []},
            "query": {"op": "grouped", "eps": eps, "by": "zone", "keys": KEYS,
                      "aggs": {"n": {"how": "count"}}}}).encode()
    src = cfg.source("pinq")
    assert src is not None and src.release is not None
    inputs = open_release(src.release)
    W = dp.Workload(np.eye(90))  # noqa: N806
    text = dp.MechanismConfig.from_design(W, inputs.universe, inputs.metric, dp.Design(
        w=np.ones(90), beta=np.full(90, 0.5))).to_json()
    out["pinq_release"] = json.dumps({"v": PLAN_VERSION, "table": {"source": "pinq",
                                                                   "steps": []},
                                      "query": {"op": "release", "config": text,
                                                "F": np.eye(90).tolist()}}).encode()
    return out


def work_rows(cfg_path: Path, body: dict[str, bytes]) -> dict[str, int] | None:
    """Each kind's static work bound in rows (None if the service has no work bound)."""
    from dprivacy.service.config import load_config
    from dprivacy.service.plan import parse_plan

    try:
        from dprivacy.service import workbound
    except ImportError:
        return None
    cfg = load_config(cfg_path)
    out = {}
    for k, raw in body.items():
        plan = parse_plan(raw, cfg)
        out[k] = int(workbound.plan_bound(plan.table, plan.query, cfg).work)
    return out


def deadlines(cfg_path: Path, analysts: list[str], body: dict[str, bytes]
              ) -> tuple[dict[tuple[str, str], float], str]:
    """Each (analyst, kind)'s deadline in seconds, computed as the service does from the plan
    and the configuration (and which rule applied)."""
    from dprivacy.service.config import load_config
    from dprivacy.service.plan import parse_plan

    cfg = load_config(cfg_path)
    out = {}
    rule = "query_seconds"
    for a in analysts:
        for k, raw in body.items():
            plan = parse_plan(raw, cfg)
            rel = plan.query is not None and plan.query["op"] == "release"
            try:
                from dprivacy.service import workbound

                b = workbound.plan_bound(plan.table, plan.query, cfg)
                try:
                    out[(a, k)] = workbound.deadline_seconds(cfg, a, b, set(plan.sources),
                                                             release=rel, body_bytes=len(raw))
                except TypeError:  # a service without the body's parsing allowance
                    out[(a, k)] = workbound.deadline_seconds(cfg, a, b, set(plan.sources),
                                                             release=rel)
                rule = "static work bound"
            except ImportError:
                out[(a, k)] = cfg.deadline_seconds(set(plan.sources), release=rel)
    return out, rule


class Load:
    """The analysts' threads of one phase; every request is recorded."""

    def __init__(self, server: Server, keys: dict[str, str], body: dict[str, bytes],
                 dl: dict[tuple[str, str], float], rows: int, seed: int) -> None:
        self.server, self.keys, self.body, self.dl, self.rows = server, keys, body, dl, rows
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.killed_at = float("inf")  # time.monotonic() of the kill
        self.flooder_cpu_s = float("nan")
        self.clients_cpu_s = 0.0  # the analysts' client processes, this phase
        self.seed = seed

    def one(self, client: Any, analyst: str, kind: str, phase: str, role: str
            ) -> tuple[int, float]:
        """Send one request and record it; (HTTP status or -1, Retry-After seconds)."""
        r = _send(client, self.body[kind])
        self.record(r["start"], r["seconds"], r["status"], r["value"], analyst, kind, phase,
                    role, r["sent"])
        return r["status"], r["retry"]

    def analyst(self, analyst: str, phase: str) -> Any:
        """The analyst's client, in a process of its own (as a remote analyst's is: no other
        analyst's client shares its interpreter, so its receipt stamps are not held behind
        theirs): started, its imports done and its connection opened now, before the phase; it
        sends from ``go()`` until the phase stops (run that in a thread)."""

        def got_cpu(cpu: float) -> None:
            with self.lock:
                self.clients_cpu_s += cpu

        return self._client_process(_analyst_process, (
            self.server.url, self.keys[analyst], self.body, f"{self.seed}-{analyst}-{phase}"),
            f"the client process of {analyst}", analyst, phase, "share", got_cpu)

    def flooder(self, analyst: str, phase: str, factor: int) -> Any:
        """The flooding analyst, in a process of its own (its many threads must not slow the
        other analysts' clients): open loop, a request every deadline/factor. The process is
        started (and its imports done) now, before the phase; it sends from ``go()`` until the
        phase stops (run that in a thread)."""
        period = min(self.dl[(analyst, k)] for k in KINDS) / factor

        def got_cpu(cpu: float) -> None:
            self.flooder_cpu_s = cpu

        return self._client_process(_flood_process, (
            self.server.url, self.keys[analyst], self.body, period, 4 * factor,
            f"{self.seed}-flood"), "the flooding process", analyst, phase, "flood", got_cpu)

    def _client_process(self, target: Any, args: tuple[Any, ...], what: str, analyst: str,
                        phase: str, role: str, got_cpu: Any) -> Any:
        """Start ``target(*args, stop, out, ready, start)`` in a process and wait until it is
        ready; returns ``go()``, which starts it sending, waits for the phase to stop, then
        records what it sent (as ``role``) and passes its CPU seconds to ``got_cpu``."""
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        stop, ready, start = ctx.Event(), ctx.Event(), ctx.Event()
        p = ctx.Process(target=target, args=(*args, stop, out, ready, start), daemon=True)
        p.start()
        if not ready.wait(300):
            raise RuntimeError(f"{what} did not start")

        def go() -> None:
            start.set()
            self.stop.wait()
            stop.set()
            recs, cpu = out.get(timeout=900)
            p.join(timeout=60)
            got_cpu(cpu)
            for r in recs:
                self.record(r["start"], r["seconds"], r["status"], r["value"], analyst,
                            r["kind"], phase, role, r["sent"])

        return go

    def record(self, t0: float, took: float, status: int, value: Any, analyst: str, kind: str,
               phase: str, role: str, sent: float = float("nan")) -> None:
        """Record one request (times on the system-wide monotonic clock; ``sent``: when the
        client began to write its bytes to the socket)."""
        rec = {"phase": phase, "analyst": analyst, "role": role, "kind": kind,
               "status": status, "start": t0, "sent": sent, "seconds": took,
               "deadline": self.dl[(analyst, kind)],
               "real": _real(kind, value, self.rows) if status == 200 else None,
               # a request that failed: in flight at the kill, or sent while the server was down
               "at_kill": status == -1 and t0 < self.killed_at <= t0 + took + 0.05,
               "while_down": status == -1 and t0 >= self.killed_at}
        with self.lock:
            self.records.append(rec)


def _send(client: Any, body: bytes) -> dict[str, Any]:
    """POST one query; its start and ``sent`` (when its bytes began to be written) stamps,
    seconds to the receipt, status (-1: no response), value and Retry-After seconds."""
    import httpx

    sent: list[float] = []

    def trace(event: str, info: Any) -> None:  # the moment its bytes start to be written
        if event == "http11.send_request_headers.started":
            sent.append(time.monotonic())

    req = client.build_request("POST", "/v1/query", content=body,
                               extensions={"trace": trace})
    t0 = time.monotonic()  # the request is built: its sending starts now
    status, value, retry = -1, None, 0.0
    try:
        r = client.send(req)
        took = time.monotonic() - t0  # the receipt: before the body is decoded
        status = r.status_code
        if status == 200:
            value = r.json()["value"]
        elif status in (429, 503):
            try:
                retry = float(r.headers.get("retry-after", 0.1))
            except ValueError:
                retry = 0.1
    except httpx.HTTPError:
        took = time.monotonic() - t0
        status = -1
    return {"start": t0, "seconds": took, "status": status, "value": value, "retry": retry,
            "sent": sent[0] if sent else float("nan")}


def _analyst_process(url: str, key: str, body: dict[str, bytes], seed: str, stop: Any,
                     out: Any, ready: Any, start: Any) -> None:
    """One analyst's client process: once ``start`` is set, sends the kinds in a seeded
    random order, one request at a time, until ``stop`` (after a refusal at admission it
    waits as told, after a failure 0.2 s); puts its records and CPU seconds on ``out``."""
    import resource

    with contextlib.suppress(ImportError):
        # a remote analyst's client has a machine of its own: here it shares the service's,
        # so it asks for the scheduler's shortest slice, and a receipt is not held behind
        # the service's workers (at real-time priority the delivery's p99 ranged from 7 to
        # 91 ms over five runs of 120-200 s, against 16-27 ms in the fair class: no gain)
        from dprivacy.service.slices import set_slice

        set_slice()
    client = _connected_client(url, key)
    ready.set()
    start.wait()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    rng = random.Random(seed)
    recs: list[dict[str, Any]] = []
    order = list(KINDS)
    with contextlib.closing(client):
        while not stop.is_set():
            rng.shuffle(order)
            for kind in order:
                if stop.is_set():
                    break
                r = _send(client, body[kind])
                recs.append({**r, "kind": kind})
                if r["status"] == -1:
                    time.sleep(0.2)  # the server is down: retry until it is back
                elif r["status"] in (429, 503):  # its lane is taken (by the flood): as told
                    time.sleep(min(max(r["retry"], 0.01), 10.0))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    out.put((recs, cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime))


def _connected_client(url: str, key: str, connections: int = 1) -> Any:
    """An HTTP client for the analyst with ``key``, its connection opened (a health check)."""
    import httpx

    c = httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        c.get("/v1/health")
    except httpx.HTTPError:
        pass
    return c


def _flood_process(url: str, key: str, body: dict[str, bytes], period: float, threads: int,
                   seed: str, stop: Any, out: Any, ready: Any, start: Any) -> None:
    """The flooder's process: once ``start`` is set, sends a random kind every ``period``
    seconds from a pool of ``threads`` until ``stop``; puts its records and the CPU seconds it
    used on ``out``."""
    import resource

    client = _connected_client(url, key, threads)  # one client (a pool) for every thread
    ready.set()
    start.wait()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)

    rng = random.Random(seed)
    recs: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send(kind: str) -> None:
        r = _send(client, body[kind])
        with lock:
            recs.append({**r, "kind": kind})

    with ThreadPoolExecutor(threads, thread_name_prefix="flood") as pool:
        nxt = time.monotonic()
        while not stop.is_set():
            pool.submit(send, rng.choice(KINDS))
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
    client.close()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    out.put((recs, cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime))


def _real(kind: str, value: Any, rows: int) -> bool:
    """Whether an answer is the real one: the default answer (an overrun query) is noise
    around 0, the real count is about rows/2 (counts) or rows (grouped, release)."""
    try:
        if kind.endswith("count"):
            return float(value) > rows / 4
        total = sum(float(v[0]) if isinstance(v, list) else float(v) for v in value
                    if v is not None)
        return total > rows / 2
    except (TypeError, ValueError):
        return False


def warm_up(load: Load, ledger: Path, analysts: list[str]) -> dict[str, float]:
    """Each kind once; returns its PINQ cost per answer, measured on the ledger."""
    import httpx

    from dprivacy.tables import Ledger

    cost: dict[str, float] = {}

    def spent(led: Any, a: str) -> float:
        return sum(i - r for n, i, r, _c in led.named_budgets(f"pinq:pinq/{a}")
                   if n == f"pinq:pinq/{a}")

    def run(a: str, kinds: list[str]) -> None:
        led = Ledger(ledger)
        with httpx.Client(base_url=load.server.url, timeout=600,
                          headers={"Authorization": f"Bearer {load.keys[a]}",
                                   "Content-Type": "application/json"}) as c:
            for k in kinds:
                before = spent(led, a)
                for _try in range(5):  # a refusal at admission (e.g. a cold start): retry
                    st, retry = load.one(c, a, k, "warm-up", "share")
                    if st not in (429, 503, -1):
                        break
                    time.sleep(min(max(retry, 0.2), 30.0))
                t0 = time.monotonic()  # an overrun query is charged after its answer: wait
                while k.startswith("pinq") and st == 200 and spent(led, a) == before \
                        and time.monotonic() - t0 < 30:
                    time.sleep(0.1)
                cost[k] = spent(led, a) - before if st == 200 else 0.0
        led.close()

    jobs = {a: KINDS[i::len(analysts)] for i, a in enumerate(analysts[:len(KINDS)])}
    threads = [threading.Thread(target=run, args=(a, ks)) for a, ks in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return cost


def run_phase(load: Load, phase: str, analysts: list[str], duration: float, flood: int,
              kill_at: float | None) -> dict[str, Any]:
    import resource

    load.stop.clear()
    # every client's process started and connected before the phase
    threads = [threading.Thread(target=load.analyst(a, phase)) for a in analysts]
    load.clients_cpu_s = 0.0
    if flood:  # its process started (and its imports done) before the phase
        threads.append(threading.Thread(target=load.flooder(analysts[0], phase, flood)))
    over0, rest0 = load.server.overruns(), load.server.restarting()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    for t in threads:
        t.start()
    info: dict[str, Any] = {}
    t0 = time.monotonic()
    down = 0.0
    if kill_at is not None:  # the phase runs `duration` seconds with the server up
        time.sleep(kill_at)
        load.killed_at = time.monotonic()
        load.server.kill()
        info["killed_at_s"] = round(time.monotonic() - t0, 2)
        down = load.server.start()
        info["restart_s"] = round(down, 2)
    time.sleep(max(0.0, duration + down - (time.monotonic() - t0)))
    load.stop.set()
    for t in threads:
        t.join()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    # the benchmark's own CPU: the analysts' client processes, this process (the memory
    # sampler), the flooder's process
    info["clients_cpu_s"] = round(load.clients_cpu_s, 2)
    info["bench_cpu_s"] = round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime
                                - cpu0.ru_stime, 2)
    if flood:
        info["flooder_cpu_s"] = round(load.flooder_cpu_s, 2)
    info["overruns"] = load.server.overruns() - over0
    info["defaults_while_restarting"] = load.server.restarting() - rest0
    return info


def summarise_one(g: pd.DataFrame, phase: str, analyst: str, role: str) -> dict[str, Any]:
    """One row of the report: the requests ``g`` of one phase and analyst (or a pool)."""
    ok = g[g.status == 200]
    late = (ok.seconds - ok.deadline).to_numpy()
    return {"phase": phase, "analyst": analyst, "role": role, "requests": len(g),
            "answers": len(ok), "real": int(ok.real.sum()),
            "late_median_ms": 1e3 * float(np.median(late)) if late.size else np.nan,
            "late_p99_ms": 1e3 * float(np.quantile(late, 0.99)) if late.size else np.nan,
            "late_max_ms": 1e3 * float(late.max()) if late.size else np.nan,
            "admission_refusals": int(g.status.isin([429, 503]).sum()),
            "budget_refusals": int((g.status == 409).sum()),
            "failed_in_flight_at_kill": int(g.at_kill.sum()),
            "failed_while_down": int(g.while_down.sum()),
            "failed_other": int(((g.status == -1) & ~g.at_kill & ~g.while_down).sum()),
            "other_errors": int((~g.status.isin([200, 429, 503, 409, -1])).sum())}


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    order = {"warm-up": 0, "steady": 1, "flood": 2}
    groups = sorted(df.groupby(["phase", "analyst", "role"]),
                    key=lambda kg: (order.get(kg[0][0], 9), int(kg[0][1][1:]), kg[0][2]))
    rows = [summarise_one(g, phase, analyst, role) for (phase, analyst, role), g in groups]
    out = pd.DataFrame(rows)
    for phase in ("steady", "flood"):  # every analyst but the flooder a0, pooled
        g = df[(df.phase == phase) & (df.analyst != "a0")]
        if len(g):
            one = summarise_one(g, phase, "others (not a0)", "share")
            out = pd.concat([out, pd.DataFrame([one])], ignore_index=True)
    return out


def audit(work: Path, df: pd.DataFrame, cost: dict[str, float], analysts: list[str],
          overruns: int) -> pd.DataFrame:
    """Each analyst's PINQ ledger spending against the answers they got; ProPer's committed
    queries against its answers."""
    from dprivacy.tables import Ledger
    from dprivacy.tables.budgets.slot_store import SlotStore

    led = Ledger(work / "state" / "pinq.sqlite")
    spent = {n.split("/")[-1]: i - r for n, i, r, _c in led.named_budgets("pinq:pinq/")}
    led.close()
    rows = []
    for a in analysts:
        g = df[(df.analyst == a) & df.kind.str.startswith("pinq")]
        ans = g[g.status == 200]
        lost = g[g.at_kill]
        paid = float(sum(cost[k] for k in ans.kind))
        extra = spent.get(a, 0.0) - paid
        flight = float(sum(cost[k] for k in lost.kind))
        rows.append({"analyst": a, "source": "pinq", "answers": len(ans),
                     "answered_cost": paid, "ledger_spent": spent.get(a, 0.0),
                     "in_flight_at_kill": len(lost), "in_flight_cost": flight,
                     # every answer paid, and nothing else charged but what was in flight
                     "charges_match": bool(-1e-6 * (len(ans) + 1) <= extra
                                           <= flight + 1e-6 * (len(ans) + 1))})
    store = SlotStore(work / "state" / "proper-proper.duckdb")
    with store.locked() as s:
        committed = len(s.queries)
    store.close()
    g = df[df.kind.str.startswith("proper")]
    answers, flight = int((g.status == 200).sum()), int(g.at_kill.sum())
    rows.append({"analyst": "(all)", "source": "proper", "answers": answers,
                 "answered_cost": np.nan, "ledger_spent": np.nan,
                 "in_flight_at_kill": flight, "in_flight_cost": np.nan,
                 # one committed query per answer (an overrun query that never started
                 # charges nobody), plus at most those in flight at the kill
                 "charges_match": bool(answers - overruns <= committed <= answers + flight),
                 "committed_queries": committed})
    return pd.DataFrame(rows)


def _children() -> dict[int, list[int]]:
    """Every process's children (from /proc)."""
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(d))
    return out


def tree_pss(pid: int) -> tuple[float, int]:
    """(GB of proportional set size, processes) of ``pid`` and all its descendants: the
    service, its fork server, the analysts' workers and deciders."""
    kids = _children()
    todo, total, n = [pid], 0, 0
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        n += 1
                        break
        except OSError:
            continue
    return total / 2**20, n


class Memory(threading.Thread):
    """Samples the service's tree every ``every`` seconds; ``peak_gb``, ``procs``."""

    def __init__(self, server: Server, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.server, self.every = server, every
        self.peak_gb, self.procs = 0.0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            proc = self.server.proc
            if proc is not None and proc.poll() is None:
                gb, n = tree_pss(proc.pid)
                if gb > self.peak_gb:
                    self.peak_gb, self.procs = gb, n


#: the stall probe sleeps this long at a time, and records a wake-up later than this past it
PROBE_SLEEP, PROBE_RECORD = 0.002, 0.002


def _probe_process(stop: Any, out: Any, ready: Any) -> None:
    """An idle process that does nothing but sleep ``PROBE_SLEEP`` at a time (at a real-time
    priority above the service's where the system allows it, else with the shortest fair
    slice): every wake-up more than ``PROBE_RECORD`` late is a moment when the machine ran no
    process that wanted to (the service's or a client's alike). Puts [(moment, lateness)] on
    ``out``."""
    with contextlib.suppress(ImportError):
        from dprivacy.service.realtime import RT_PRIORITY, enter

        enter(RT_PRIORITY + 8)
    stalls: list[tuple[float, float]] = []
    ready.set()
    n = 0
    while not stop.is_set():
        t = time.monotonic()
        time.sleep(PROBE_SLEEP)
        late = time.monotonic() - t - PROBE_SLEEP
        n += 1
        if late > PROBE_RECORD:
            stalls.append((t + PROBE_SLEEP, late))
    out.put((stalls, n))


class StallProbe:
    """The idle probe's process (:func:`_probe_process`), running from its construction to
    ``stop()``; ``stalls`` then holds its late wake-ups (moment, seconds late)."""

    def __init__(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._out, self._stop, ready = ctx.Queue(), ctx.Event(), ctx.Event()
        self._p = ctx.Process(target=_probe_process, args=(self._stop, self._out, ready),
                              daemon=True)
        self._p.start()
        if not ready.wait(300):
            raise RuntimeError("the stall probe did not start")
        self.stalls: list[tuple[float, float]] = []
        self.wakeups = 0

    def stop(self) -> None:
        self._stop.set()
        self.stalls, self.wakeups = self._out.get(timeout=120)
        self._p.join(timeout=30)

    def worst(self, t0: float, t1: float) -> float:
        """The probe's largest lateness (seconds) of a wake-up due in [t0, t1] (0 if none)."""
        return max((late for t, late in self.stalls if t0 <= t <= t1), default=0.0)


def stages(trace: Path, df: pd.DataFrame, probe: StallProbe | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where the lateness comes from, per phase, for the analysts other than a0: each answered
    request matched to the service's own record of it (``DPRIVACY_SERVICE_TRACE``), lateness =
    ``arrival`` (client's send to the service's arrival stamp) + ``deadline_diff`` (the
    service's deadline minus the one computed here) + ``release`` (the service's release minus
    its deadline) + ``respond`` (the release to the moment the service wrote the response's
    bytes to its socket) + ``delivery`` (from there to the client's receipt), in ms; and
    ``machine_stall``: the idle probe's worst late wake-up (:class:`StallProbe`) from 5 ms
    before the answer's deadline to its receipt."""
    if not trace.exists():
        return pd.DataFrame(), pd.DataFrame()
    tr = pd.DataFrame([json.loads(x) for x in trace.read_text().splitlines() if x.strip()])
    if tr.empty:
        return pd.DataFrame(), pd.DataFrame()
    tr = tr[~tr.refused]
    ok = df[df.status == 200].copy()
    ok["end"] = ok.start + ok.seconds
    rows = []
    for rec in tr.itertuples(index=False):
        c = ok[(ok.analyst == rec.analyst) & (ok.start <= rec.arrived) & (ok.end >= rec.released)]
        if not len(c):
            continue
        r = c.loc[c.start.idxmax()]
        rows.append({"phase": r.phase, "analyst": r.analyst, "kind": r.kind, "start": r.start,
                     "late": r.seconds - r.deadline, "arrival": rec.arrived - r.start,
                     "client": r.sent - r.start, "wire": rec.arrived - r.sent,
                     "deadline_diff": (rec.deadline - rec.arrived) - r.deadline,
                     "release": rec.released - rec.deadline,
                     "respond": getattr(rec, "written", rec.released) - rec.released,
                     "delivery": r.end - getattr(rec, "written", rec.released),
                     # the idle probe's worst late wake-up while this answer was due
                     "machine_stall": (probe.worst(rec.deadline - 0.005, r.end)
                                       if probe is not None else np.nan)})
    m = pd.DataFrame(rows)
    out = []
    for phase in ("steady", "flood"):
        g = m[(m.phase == phase) & (m.analyst != "a0")] if len(m) else m
        for comp in ("late", "arrival", "client", "wire", "deadline_diff", "release",
                     "respond", "delivery", "machine_stall"):
            if len(g):
                v = 1e3 * g[comp].to_numpy()
                out.append({"phase": phase, "component": comp, "n": len(v),
                            "median_ms": float(np.median(v)),
                            "p99_ms": float(np.quantile(v, 0.99)), "max_ms": float(v.max())})
    return pd.DataFrame(out), m


def _cpu_fraction(cfg_path: Path, analyst: str) -> float | None:
    """The fraction of a CPU the service's worker of ``analyst`` is guaranteed (None without
    worker processes)."""
    try:
        from dprivacy.service.config import load_config
        from dprivacy.service.shares import cpu_fraction
    except ImportError:
        return None
    return cpu_fraction(load_config(cfg_path), analyst)


def _markdown(table: pd.DataFrame, fmt: str) -> str:
    """A GitHub table (no tabulate dependency); floats with ``fmt``, NaN blank."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "" if np.isnan(v) else fmt.format(v)
        return str(v)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in r) + " |"
                              for r in table.itertuples(index=False)])


def calibrate(work: Path, rows: int, eps: float) -> dict[str, float]:
    """In-process seconds of each kind (median of 3, after one warm-up) on the data, on one
    engine thread with a worker's memory limit (the service's workers run one each), the
    ProPer budgets in a durable budget store (as the workers')."""
    import ibis
    from ibis import _

    import dprivacy as dp
    from dprivacy.tables import ProPerTable, Queryable

    try:  # one CPU and the worker's memory limit: as one analyst's worker runs it
        from dprivacy.service.sources import WORKER_MEMORY
        con = ibis.duckdb.connect(threads=1, memory_limit=WORKER_MEMORY)
    except ImportError:
        con = ibis.duckdb.connect(threads=1)
    view = con.read_parquet(str(work / "people.parquet"))
    q = Queryable(view, 1e12, backend="duckdb")
    # the personal budgets in a durable store, as the service's workers charge them
    from dprivacy.tables.budgets.budget_table import BudgetTable
    p = ProPerTable(view, 1e12, ledger=BudgetTable(work / "calibration-budgets"),
                    id_column="pid", backend="duckdb")
    U = dp.Universe.from_dataframe(pd.DataFrame({"age": np.arange(90)}), ["age"])  # noqa: N806
    M, W = dp.metrics.Discrete(1.0), dp.Workload(np.eye(90))  # noqa: N806
    design = dp.Design(w=np.ones(90), beta=np.full(90, 0.5))
    runs = {"pinq_count": lambda: q.where(_.x > 0.5).noisy_count(eps),
            "proper_count": lambda: p.where(_.x > 0.5).noisy_count(eps),
            "pinq_grouped": lambda: q.count_by(KEYS, "zone", eps),
            "proper_grouped": lambda: p.count_by(KEYS, "zone", eps),
            "pinq_release": lambda: q.release(W, design, U, metric=M)}
    out = {}
    for k, f in runs.items():
        f()
        ts = []
        for _i in range(3):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        out[k] = float(np.median(ts))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**7)
    ap.add_argument("--analysts", type=int, default=8)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds per phase")
    ap.add_argument("--flood", type=int, default=20, help="the flooder's multiple of its share")
    ap.add_argument("--eps", type=float, default=None,
                    help="each query's eps (default min(1, max(0.01, 1000/rows)): the noise "
                    "well below the counts, so that a default answer is told from a real one)")
    ap.add_argument("--query-seconds", type=float, default=None,
                    help="the deadline floor (default: from the in-process calibration)")
    ap.add_argument("--row-seconds", type=float, default=None,
                    help="the service's cost per row of work (default: calibrated here)")
    ap.add_argument("--no-kill", action="store_true", help="do not kill the server")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--quick", action="store_true", help="2000 rows, 3 analysts, 4 s phases")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.analysts, args.duration = 2000, 3, 4.0
    if args.eps is None:
        args.eps = min(1.0, max(0.01, 1000 / args.rows))
    analysts = [f"a{i}" for i in range(args.analysts)]
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(dir=args.tmp, prefix="bench_service_load_"))
    server: Server | None = None
    try:
        t0 = time.perf_counter()
        write_parquet(work / "people.parquet", args.rows)
        print(f"{args.rows:,} rows written in {time.perf_counter() - t0:.1f} s", flush=True)
        secs = calibrate(work, args.rows, args.eps)
        print("in-process seconds per query: " + ", ".join(f"{k} {v:.3f}"
                                                            for k, v in secs.items()), flush=True)
        worst = max(secs.values())
        cfg = work / "service.toml"
        # the declared capacity: the largest plan sent (its static work bound), and the cost
        # of a row of work: 3x the largest measured cost per bound row; the budget store's
        # cost per person of a commit and a catch-up: 3x the measured one on a store of as
        # many people (configured, so that the deadlines computed here are the service's)
        store_s = None
        try:
            from dprivacy.service.calibrate import measure_store

            store_s = 3 * measure_store(people=args.rows)
            print(f"budget store: {store_s / 3:.3g} s per person of a commit and catch-up "
                  f"(measured)", flush=True)
        except ImportError:
            pass
        write_config(work, args.rows, analysts, 1.0, None, 10**12, store_s)
        body = bodies(cfg, args.eps)
        bounds = work_rows(cfg, body)
        if bounds is not None:
            qs = args.query_seconds or 0.5
            row_s = args.row_seconds or 3 * max(secs[k] / bounds[k] for k in KINDS)
            cap = max(bounds.values())
            while True:  # the smallest capacity (doubling) that admits every plan sent
                write_config(work, args.rows, analysts, qs, row_s, cap, store_s)
                try:
                    work_rows(cfg, body)
                    break
                except DPrivacyError:
                    cap *= 2
            capacity: int | None = cap
            print(f"static work bounds (rows): {bounds}; row_seconds {row_s:.3g}; "
                  f"max_work_rows {cap}", flush=True)
        else:  # no work bound: one thread serves everyone, a query may wait for all others'
            qs = args.query_seconds or round(max(0.5, 3 * worst * (args.analysts + 1)), 2)
            row_s, capacity = None, None
        keys = write_config(work, args.rows, analysts, qs, row_s, capacity, store_s)
        server = Server(cfg, _port(), work / "serve.log", work / "trace.jsonl")
        started = server.start()
        release_policy = _policy(server)
        memory = Memory(server)
        probe = StallProbe()
        memory.start()
        print(f"service started in {started:.1f} s", flush=True)
        dl, rule = deadlines(cfg, analysts, body)
        print(f"deadlines ({rule}): " + ", ".join(f"{k} {dl[(analysts[0], k)]:.3f} s"
                                                  for k in KINDS), flush=True)
        load = Load(server, keys, body, dl, args.rows, seed=0)
        # warm-up: each kind once (kind i by analyst i mod n, the analysts in parallel), its
        # PINQ cost read from that analyst's own ledger record
        cost = warm_up(load, work / "state" / "pinq.sqlite", analysts)
        print(f"PINQ cost per answer (from the ledger): {cost}", flush=True)
        infos = {"steady": run_phase(load, "steady", analysts, args.duration, 0, None)}
        print(f"steady: {infos['steady']}", flush=True)
        infos["flood"] = run_phase(load, "flood", analysts, args.duration, args.flood,
                                   None if args.no_kill else args.duration / 2)
        print(f"flood: {infos['flood']}", flush=True)
        memory.done.set()
        probe.stop()
        server.stop()
        df = pd.DataFrame(load.records)
        summary = summarise(df)
        parts, per_request = stages(work / "trace.jsonl", df, probe)
        stall_ms = 1e3 * np.array([late for _t, late in probe.stalls])
        probe_info = {"wakeups": probe.wakeups,
                      f"late_over_{PROBE_RECORD * 1e3:g}ms": int(stall_ms.size),
                      "over_5ms": int((stall_ms > 5).sum()),
                      "over_10ms": int((stall_ms > 10).sum()),
                      "max_ms": round(float(stall_ms.max()), 1) if stall_ms.size else 0.0}
        if len(per_request):  # the answers late by more than 10 ms, and the machine then
            others = per_request[per_request.analyst != "a0"]
            late = others[others.late > 0.010]
            probe_info["answers_late_over_10ms"] = int(len(late))
            probe_info["of_which_probe_stalled_over_5ms"] = int(
                (late.machine_stall > 0.005).sum())
        aud = audit(work, df, cost, analysts, sum(i["overruns"] for i in infos.values()))
        owner = subprocess.run([sys.executable, "-m", "dprivacy", "budgets", "--config",
                                str(cfg)], capture_output=True, text=True, timeout=600).stdout
        load_end = os.getloadavg()
        out = Path(args.results)
        out.mkdir(parents=True, exist_ok=True)
        stem = "bench_service_load_quick" if args.quick else "bench_service_load"
        summary.to_csv(out / f"{stem}.csv", index=False)
        t_first = df.start.min()
        df.assign(start=df.start - t_first, sent=df.sent - t_first).to_csv(
            out / f"{stem}_requests.csv", index=False)
        if len(per_request):  # every answer's lateness split into its parts, in seconds
            per_request.assign(start=per_request.start - t_first).to_csv(
                out / f"{stem}_stages.csv", index=False)
        meta = {"rows": args.rows, "analysts": args.analysts, "duration_s": args.duration,
                "flood": args.flood, "eps": args.eps, "deadline_rule": rule,
                "query_seconds": qs, "row_seconds": row_s, "store_seconds": store_s,
                "in_process_s": secs,
                "work_rows": bounds, "max_work_rows": capacity,
                "deadlines_s": {k: dl[(analysts[0], k)] for k in KINDS},
                "worker_cpu_fraction": _cpu_fraction(cfg, analysts[0]),
                "pinq_cost": cost, "phases": infos, "service_start_s": started,
                "service_peak_pss_gb": round(memory.peak_gb, 2),
                "service_processes": memory.procs,
                "stall_probe": probe_info,
                "release_priority": release_policy,
                "release_priority_demotions": server.demotions(),
                "load_average_start": [round(x, 2) for x in load_start],
                "load_average_end": [round(x, 2) for x in load_end]}
        with open(out / f"{stem}.md", "w") as fh:
            fh.write(f"# Service under load: {args.analysts} analysts, {args.rows:,} rows, "
                     f"{args.duration:g} s per phase\n\n")
            fh.write(f"`python -m experiments.bench_service_load "
                     f"{' '.join(argv if argv is not None else sys.argv[1:])}`; load average "
                     f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end "
                     "(2 cores shared with other jobs).\n\n")
            fh.write("```json\n" + json.dumps(meta, indent=1) + "\n```\n\n")
            fh.write("## Per phase and analyst (lateness = response time - deadline)\n\n")
            fh.write(_markdown(summary, "{:.1f}") + "\n\n")
            if len(parts):
                fh.write("## Where the lateness of the other analysts' answers comes from\n\n"
                         "Each answer matched to the service's own record of it: lateness = "
                         "arrival (send to the service's arrival stamp; = client, until the "
                         "client begins to write the request, + wire, from there to the "
                         "arrival stamp) + deadline_diff + "
                         "release (the service's release minus its deadline) + respond "
                         "(release to the response's bytes written to the socket) + delivery "
                         "(written to the client's receipt). machine_stall: the worst late "
                         "wake-up of an idle probe process (it only sleeps 2 ms at a time, "
                         "with the priority of the service's event loop) from 5 ms before the answer's "
                         "deadline to its receipt: a stall of the whole machine, which delays "
                         "the service's and the clients' wake-ups alike.\n\n")
                fh.write(_markdown(parts, "{:.2f}") + "\n\n")
            fh.write("## Budgets: charges against the ledgers\n\n")
            fh.write(_markdown(aud, "{:.4f}") + "\n\n")
            fh.write("## The owner's view after the run (`dprivacy budgets`)\n\n```\n" + owner
                     + "```\n")
        print(summary.to_string(index=False))
        if len(parts):
            print(parts.to_string(index=False))
        print(f"service peak PSS {memory.peak_gb:.2f} GB over {memory.procs} processes")
        print(f"stall probe: {probe_info}")
        print(aud.to_string(index=False))
        print(f"wrote {out / (stem + '.csv')} and .md")
        return {"summary": summary, "audit": aud, "meta": meta, "records": df, "stages": parts}
    finally:
        if server is not None:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
