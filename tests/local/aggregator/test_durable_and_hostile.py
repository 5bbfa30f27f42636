"""The aggregator keeps its state across a restart, and refuses hostile requests fast while it
keeps answering everyone else (a real uvicorn server on loopback, port 0, in a thread)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from dprivacy.local import PersonalBudget, UserAgent
from dprivacy.local.aggregator.client import collect, connect, poll_once, publish, run_server
from dprivacy.local.aggregator.server import create_app
from dprivacy.local.aggregator.store import AggregatorStore
from dprivacy.local.case_studies import warner_query

pytestmark = pytest.mark.timeout(120)


def test_state_and_replay_memory_survive_a_restart(tmp_path) -> None:
    db = tmp_path / "agg.sqlite"
    store = AggregatorStore(db)
    key, token = store.add_analyst("alice"), store.enrol("u1")
    q = warner_query("smokers", 1.0, "smoker", ["yes", "no"])
    agent = UserAgent("u1", {"smoker": "yes"}, PersonalBudget(tmp_path / "d.sqlite", "u1", total=5.0),
                      sandbox=None, pad=False, rng=3)
    srv = run_server(create_app(store))
    try:
        with connect(srv.url, key) as alice, connect(srv.url, token) as dev:
            publish(alice, q)
            poll_once(dev, agent)
            first = collect(alice, "smokers")
    finally:
        srv.stop()
        store.close()
    reply = agent.history["alice/smokers"]
    flipped = {**reply, "result": "no" if reply["result"] == "yes" else "yes"}

    store = AggregatorStore(db)  # a new process would open the same file the same way
    srv = run_server(create_app(store))
    try:
        with connect(srv.url, key) as alice, connect(srv.url, token) as dev:
            assert dev.get("/queries").json()["queries"][0]["id"] == "alice/smokers"  # creds kept
            r = dev.post("/replies", json=reply)  # the replayed reply is recognised ...
            assert r.status_code == 200 and r.json() == {"stored": False}
            assert dev.post("/replies", json=flipped).status_code == 409  # ... a changed one refused
            assert alice.post("/queries", json=q.to_dict()).status_code == 409  # the id is taken
            assert collect(alice, "smokers") == first and len(first) == 1
            with pytest.raises(Exception, match="already enrolled"):
                store.enrol("u1")
    finally:
        srv.stop()
        store.close()


HOSTILE = ('{"id":"h","T":{"kind":"product","matrices":[[0.5,0.5],[0.5,0.5]],"length":1000000000},'
           '"pre":{"builtin":"field"},"fields":["a"]}')


def _raw_chunked(url: str, key: str, total: int) -> bytes:
    """Stream ``total`` bytes as a chunked body over a raw socket; the status line answered."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(f"POST /queries HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"[" * 65536
        sent = 0
        try:
            while sent < total:
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass  # the server may stop reading once it has refused
        return s.recv(200).split(b"\r\n")[0]


def test_hostile_requests_are_refused_fast_and_others_keep_being_answered() -> None:
    store = AggregatorStore()
    key = store.add_analyst("mallory")
    srv = run_server(create_app(store, max_body=1 << 20))
    stop = threading.Event()
    lat: list[float] = []
    fails: list[BaseException] = []

    def health() -> None:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    c.get("/health").raise_for_status()
                    lat.append(time.monotonic() - t0)
                except httpx.HTTPError as exc:  # pragma: no cover (what the test guards against)
                    fails.append(exc)
                time.sleep(0.005)

    th = threading.Thread(target=health, daemon=True)
    th.start()
    try:
        with connect(srv.url, key, timeout=10) as m:
            attacks = {
                "126-byte product": lambda: m.post("/queries", content=HOSTILE),
                "huge matrix side": lambda: m.post("/queries", json={
                    "id": "w", "T": {"kind": "matrix", "matrix": [[1.0] * 5000]},
                    "pre": {"builtin": "field"}, "fields": ["a"]}),
                "deep nesting": lambda: m.post("/queries", content=b"[" * 200_000 + b"]" * 200_000),
                "8 MiB body": lambda: m.post("/queries", content=b" " * (8 << 20)),
            }
            for name, attack in attacks.items():
                t0 = time.monotonic()
                r = attack()
                took = time.monotonic() - t0
                assert r.status_code in (400, 413), (name, r.status_code, r.text[:200])
                assert took < 1.0, (name, took)
            t0 = time.monotonic()
            status = _raw_chunked(srv.url, key, 4 << 20)
            assert b" 413 " in status and time.monotonic() - t0 < 1.0, status
        time.sleep(0.2)
    finally:
        stop.set()
        th.join(timeout=10)
        srv.stop()
    assert not fails and len(lat) >= 5
    assert max(lat) < 1.0, max(lat)
    assert store.count() == 0
