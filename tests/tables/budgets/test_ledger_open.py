"""Many processes opening one fresh ledger at the same moment (as a service's per-analyst
processes do at start) all get a working store: SQLite's "database is locked" while another
process switches the file to WAL or writes the schema is waited out, not raised."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from dprivacy.tables.budgets.ledger import Ledger


def _open_and_charge(path: str, barrier: object, out: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        led = Ledger(path)
        ids = led.new_ids(1)
        out.put(("ok", int(ids[0])))  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put(("failed", f"{type(exc).__name__}: {exc}"))  # type: ignore[attr-defined]


def test_processes_opening_one_fresh_ledger_at_once_all_succeed(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    n = 8
    for trial in range(3):
        path = str(tmp_path / f"ledger{trial}.sqlite")
        barrier, out = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_open_and_charge, args=(path, barrier, out)) for _ in range(n)]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in range(n)]
        for p in procs:
            p.join(timeout=60)
        assert [r for r in results if r[0] != "ok"] == []
        assert sorted(r[1] for r in results) == list(range(n))  # every process got its own id
