"""The persistent verdict store: a new process takes a verified verdict from disk; forged,
copied or foreign files are ignored (the design is verified again and an unsafe one refused);
the key lives apart from the entries (a key file inside the folder, or none, is refused, and an
entry signed with anything read from the folder is not accepted); unsafe folder or key
permissions are refused."""

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
    verdict_store.use(tmp_path / "verdicts", key=tmp_path / "verdicts.key")
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
    assert (folder.parent / "verdicts.key").stat().st_mode & 0o777 == 0o600
    assert not (folder / "secret.key").exists()  # nothing in the folder can sign an entry
    verdicts.clear()  # as a new process: nothing in memory
    _table().histogram(U).release(W, _design(0.5))
    assert len(calls) == 1  # taken from the store, not verified again
    code = ("import numpy as np, pandas as pd, dprivacy as dp\n"
            "from dprivacy.tables import Queryable, verdict_store\n"
            f"verdict_store.use({str(folder)!r}, key={str(folder.parent / 'verdicts.key')!r})\n"
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
    verdict_store.use(other, key=folder.parent / "other.key")
    verdicts.clear()
    t.histogram(U).release(W, _design(0.5))
    (folder / f"{_key(_design(0.5))}.json").write_text((other / f"{_key(_design(0.5))}.json")
                                                       .read_text())
    verdict_store.use(folder, key=folder.parent / "verdicts.key")
    verdicts.clear()
    n = len(calls)
    t.histogram(U).release(W, _design(0.5))
    assert len(calls) == n + 1  # verified again, and the file rewritten with this store's MAC
    verdicts.clear()
    t.histogram(U).release(W, _design(0.5))
    assert len(calls) == n + 1


def test_an_entry_signed_with_a_key_read_from_the_folder_is_not_accepted(store):
    """Whoever can read the store folder finds no key there: an entry signed with any file of
    the folder (here a planted ``secret.key``, as older versions kept one) is ignored."""
    folder, calls = store
    t = _table()
    t.histogram(U).release(W, _design(0.5))
    planted = os.urandom(32)
    (folder / "secret.key").write_bytes(planted)
    (folder / "secret.key").chmod(0o600)
    bad = _key(_design(0.6))  # not private
    for secret in [planted] + [p.read_bytes() for p in folder.iterdir()]:
        rec = {"format": verdict_store._FORMAT, "version": dp.__version__, "key": bad,
               "ratio": (0.5).hex(), "mac": verdict_store._mac(secret, bad, 0.5)}
        (folder / f"{bad}.json").write_text(json.dumps(rec))
        verdicts.clear()
        before = t.remaining_budget()
        with pytest.raises(PrivacyViolationError):
            t.histogram(U).release(W, _design(0.6))
        assert t.remaining_budget() == before
    # the same forgery signed with the owner's key is accepted: the test can tell the two apart
    owner = (folder.parent / "verdicts.key").read_bytes()
    rec = {"format": verdict_store._FORMAT, "version": dp.__version__, "key": bad,
           "ratio": (0.5).hex(), "mac": verdict_store._mac(owner, bad, 0.5)}
    (folder / f"{bad}.json").write_text(json.dumps(rec))
    assert verdict_store.lookup(bad) == 0.5


def test_the_key_must_live_apart_from_the_entries(tmp_path, monkeypatch):
    monkeypatch.delenv("DPRIVACY_VERDICT_KEY_FILE", raising=False)
    folder = tmp_path / "verdicts"
    try:
        with pytest.raises(ValidationError, match="DPRIVACY_VERDICT_KEY_FILE"):
            verdict_store.use(folder)  # no key at all
        with pytest.raises(ValidationError, match="inside the store folder"):
            verdict_store.use(folder, key=folder / "secret.key")
        with pytest.raises(ValidationError, match="inside the store folder"):
            verdict_store.use(folder, key=folder / "sub" / ".." / "k")
        with pytest.raises(ValidationError, match="at least 32 bytes"):
            verdict_store.use(folder, key=b"short")
        monkeypatch.setenv("DPRIVACY_VERDICT_KEY_FILE", str(tmp_path / "env.key"))
        verdict_store.use(folder)
        assert verdict_store.folder() == folder
        assert len((tmp_path / "env.key").read_bytes()) == verdict_store.KEY_BYTES
        verdict_store.use(folder, key=os.urandom(32))  # the key's bytes, from a secret manager
        assert verdict_store.folder() == folder
        assert list(folder.iterdir()) == []  # no key was written into the folder
    finally:
        verdict_store.use(None)


def test_unsafe_permissions_are_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    key = tmp_path / "owner.key"
    with pytest.raises(ValidationError, match="writable by nobody else"):
        verdict_store.use(open_dir, key=key)
    ok = tmp_path / "ok"
    verdict_store.use(ok, key=key)
    key.chmod(0o644)
    try:
        with pytest.raises(ValidationError, match="readable by this user only"):
            verdict_store.use(ok, key=key)
    finally:
        verdict_store.use(None)
    assert verdict_store.folder() is None
