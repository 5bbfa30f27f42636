"""The persistent verdict store: a new process takes a verified verdict from disk; forged,
copied or foreign files are ignored (the design is verified again and an unsafe one refused);
unsafe folder or secret permissions are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dprivacy as dp
from dprivacy.errors import PrivacyViolationError, ValidationError
from dprivacy.tables import Queryable, verdict_store, verdicts
from dprivacy.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
K = 6
U = dp.Universe.from_domains({"a": list(range(K))})
W = dp.Workload(np.eye(K))
M = dp.metrics.Discrete(eps=1.0)


def _design(beta: float) -> dp.Design:
    return dp.Design(w=np.ones(K), beta=np.full(K, beta), constraints=M.constraint_set(U))


def _table() -> Queryable:
    return Queryable(pd.DataFrame({"a": [0, 1, 1, 5]}), budget=100.0, noise_seed=0)


def _key(design: dp.Design) -> str:
    key = verdicts._key(Workload(np.eye(K)), design, None, None)
    assert key is not None
    return key


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh store, an empty memory cache, and a counter of full Theorem-1 checks."""
    verdicts.clear()
    verdict_store.use(tmp_path / "verdicts")
    calls: list[int] = []
    orig = dp.Design.verify

    def counting(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    monkeypatch.setattr(dp.Design, "verify", counting)
    yield tmp_path / "verdicts", calls
    verdict_store.use(None)
    verdicts.clear()


def test_a_verdict_written_once_is_read_by_a_new_process(store):
    folder, calls = store
    _table().histogram(U).release(W, _design(0.5))
    assert len(calls) == 1
    files = [p for p in folder.iterdir() if p.suffix == ".json"]
    assert [p.stem for p in files] == [_key(_design(0.5))]
    assert (folder / "secret.key").stat().st_mode & 0o777 == 0o600
    verdicts.clear()  # as a new process: nothing in memory
    _table().histogram(U).release(W, _design(0.5))
    assert len(calls) == 1  # taken from the store, not verified again
    code = ("import numpy as np, pandas as pd, dprivacy as dp\n"
            "from dprivacy.tables import Queryable, verdict_store\n"
            f"verdict_store.use({str(folder)!r})\n"
            "calls = []\norig = dp.Design.verify\n"
            "dp.Design.verify = lambda s, *a, **k: calls.append(1) or orig(s, *a, **k)\n"
            f"U = dp.Universe.from_domains({{'a': list(range({K}))}})\n"
            f"M = dp.metrics.Discrete(eps=1.0)\n"
            f"D = dp.Design(w=np.ones({K}), beta=np.full({K}, 0.5), constraints=M.constraint_set(U))\n"
            f"W = dp.Workload(np.eye({K}))\n"
            "Queryable(pd.DataFrame({'a': [0, 1]}), 10.0).histogram(U).release(W, D)\n"
            "assert calls == [], calls\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr


def test_a_forged_verdict_does_not_make_an_unsafe_design_pass(store):
    folder, calls = store
    t = _table()
    t.histogram(U).release(W, _design(0.5))  # a genuine file to copy from
    genuine = json.loads((folder / f"{_key(_design(0.5))}.json").read_text())
    bad = _key(_design(0.6))  # beta 0.6: 0.6 + 0.6 > 1, not private
    forged = [
        {**genuine, "key": bad},  # a genuine record renamed to another fingerprint
        {**genuine, "key": bad, "mac": "0" * 64},  # a made-up MAC
        {**genuine, "key": bad, "ratio": (0.5).hex()},
    ]
    before = t.remaining_budget()
    for rec in forged:
        (folder / f"{bad}.json").write_text(json.dumps(rec))
        verdicts.clear()
        with pytest.raises(PrivacyViolationError):
            t.histogram(U).release(W, _design(0.6))
    assert t.remaining_budget() == before  # refused, nothing charged
    # a file authenticated by another store's secret is foreign here
    other = folder.parent / "other"
    verdict_store.use(other)
    verdicts.clear()
    t.histogram(U).release(W, _design(0.5))
    (folder / f"{_key(_design(0.5))}.json").write_text((other / f"{_key(_design(0.5))}.json")
                                                       .read_text())
    verdict_store.use(folder)
    verdicts.clear()
    n = len(calls)
    t.histogram(U).release(W, _design(0.5))
    assert len(calls) == n + 1  # verified again, and the file rewritten with this store's MAC
    verdicts.clear()
    t.histogram(U).release(W, _design(0.5))
    assert len(calls) == n + 1


def test_unsafe_permissions_are_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(ValidationError, match="writable by nobody else"):
        verdict_store.use(open_dir)
    ok = tmp_path / "ok"
    verdict_store.use(ok)
    (ok / "secret.key").chmod(0o644)
    try:
        with pytest.raises(ValidationError, match="readable by this user only"):
            verdict_store.use(ok)
    finally:
        verdict_store.use(None)
    assert verdict_store.folder() is None
