"""Compaction off the query path: the snapshot is built in the background (a child process by
default, a helper thread otherwise), records committed meanwhile are kept, a stale copy is
dropped, and a reopened store sees every charge."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from dprivacy.tables.budgets import slot_store
from dprivacy.tables.budgets.slot_store import SlotStore


def _store(path, n=1000, budget=10**9, process=False):
    s = SlotStore(path)
    s.compact_in_process = process  # the tests that block the snapshot need it in a thread
    with s.locked():
        s.add(np.arange(n, dtype=np.int64), np.full(n, budget, np.int64))
    return s


def _replaced(old, path):
    """Whether ``path`` names another file than ``old`` (the file that was there, held open by
    the test). Held open, the old file keeps its inode number: a bare number kept and compared
    later could equal that of a newer file that reuses it once the old one is deleted (ext4
    hands freed numbers out again), and the test would wrongly see nothing replaced."""
    return not os.path.samestat(os.fstat(old.fileno()), os.stat(path))


def _charge(s, slots, amount=1000, label="q"):
    with s.locked():
        s.charge(np.asarray(slots, np.int64), amount, label)


def _blocked_snapshots(monkeypatch):
    """Make the background thread wait (after copying the state) until released."""
    started, release = threading.Event(), threading.Event()
    real = slot_store._snapshot_bytes

    def slow(*a):
        if threading.current_thread().name == "dprivacy-budget-compaction":
            started.set()
            assert release.wait(30)
        return real(*a)

    monkeypatch.setattr(slot_store, "_snapshot_bytes", slow)
    monkeypatch.setattr(slot_store, "_BACKSTOP", 10**6)  # the test decides when it is far behind
    return started, release


@pytest.mark.parametrize("under_lock", [1 << 20, 0])
def test_records_committed_during_a_background_compaction_are_kept(tmp_path, monkeypatch,
                                                                   under_lock):
    """``under_lock`` 0: every record committed meanwhile is copied before the lock is taken
    (the catch-up rounds), none under it; 1 MiB: all of them under the lock."""
    monkeypatch.setattr(slot_store, "_TAIL_UNDER_LOCK", under_lock)
    copies: list[bool] = []
    real_copy = slot_store._copy_range

    def spy(src, start, end, tmp):
        copies.append(end > start)
        return real_copy(src, start, end, tmp)

    monkeypatch.setattr(slot_store, "_copy_range", spy)
    path = str(tmp_path / "b.dpb")
    s = _store(path)
    s.compact_bytes = 1
    started, release = _blocked_snapshots(monkeypatch)
    _charge(s, range(0, 500))                      # crosses the threshold: compaction starts
    assert started.wait(10)
    size_before = os.path.getsize(path)
    with open(path, "rb") as before:
        for k in range(5):                         # answered while the copy is being written
            _charge(s, range(100 * k, 100 * k + 300), label=f"during{k}")
        assert not _replaced(before, path)         # nothing replaced yet: no query waited
        assert os.path.getsize(path) > size_before
        release.set()
        s.wait_for_compaction(30)
        assert s.compaction_error is None
        assert _replaced(before, path)             # the new snapshot is in place
    expected = s.remaining.copy()
    s.close()
    reopened = SlotStore(path)
    with reopened.locked():
        np.testing.assert_array_equal(reopened.remaining, expected)
        assert [q[1] for q in reopened.queries][-5:] == [f"during{k}" for k in range(5)]
    # slot 150 paid in the first query and in 'during0' and 'during1'
    assert expected[150] == 10**9 - 3 * 1000
    # the bulk copy happened before the lock when the threshold says so; the last call is the
    # one under the lock, which then has nothing left to copy
    assert copies == ([True, False] if under_lock == 0 else [True])


def test_a_copy_made_stale_by_another_process_is_dropped(tmp_path, monkeypatch):
    path = str(tmp_path / "b.dpb")
    s = _store(path)
    s.compact_bytes = 1
    started, release = _blocked_snapshots(monkeypatch)
    _charge(s, range(10))
    assert started.wait(10)
    other = SlotStore(path)                        # another handle compacts on its own path
    other.background = False
    other.compact_bytes = 0
    _charge(other, range(5, 20), label="other")
    release.set()
    s.wait_for_compaction(30)
    assert s.compaction_error is None
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]  # the stale copy is deleted
    _charge(s, range(3), label="after")
    other.close()
    s.close()
    final = SlotStore(path)
    with final.locked():
        left = 10**9 - final.remaining[:25]
        assert list(left[:3] // 1000) == [2, 2, 2] and list(left[5:10] // 1000) == [2] * 5
        assert list(left[10:20] // 1000) == [1] * 10 and left[20] == 0


def test_synchronous_mode_compacts_on_the_query_path(tmp_path):
    path = str(tmp_path / "b.dpb")
    s = _store(path)
    s.background, s.compact_bytes = False, 0
    with open(path, "rb") as before:
        _charge(s, range(10))
        assert _replaced(before, path) and s._bg is None


def test_a_dead_process_temporary_copy_is_removed_on_open(tmp_path):
    path = str(tmp_path / "b.dpb")
    _store(path).close()
    dead = 2**22 + 12345  # above the default pid_max of most systems: no such process
    junk = tmp_path / f"b.dpb.tmp{dead}.bg"
    junk.write_bytes(b"half a snapshot")
    SlotStore(path).close()
    assert not junk.exists()


def test_a_starved_background_compaction_does_not_let_the_file_grow(tmp_path, monkeypatch):
    path = str(tmp_path / "b.dpb")
    s = _store(path)
    started, release = _blocked_snapshots(monkeypatch)
    monkeypatch.setattr(slot_store, "_BACKSTOP", 3)
    _charge(s, range(10))
    record = os.path.getsize(path) - s._off + s._log_bytes  # one record's bytes
    s.compact_bytes = record                                 # the next charge crosses it
    _charge(s, range(10))
    assert started.wait(10)
    with open(path, "rb") as before:
        _charge(s, range(10))
        _charge(s, range(10))                                # 4 records > 3 x the threshold
        assert _replaced(before, path)                       # compacted on the query's path
    release.set()
    s.wait_for_compaction(30)
    s.close()
    final = SlotStore(path)
    with final.locked():
        assert list((10**9 - final.remaining[:11]) // 1000) == [4] * 10 + [0]


def test_the_snapshot_is_built_at_the_lowest_priority_and_renamed_by_another_thread(
        tmp_path, monkeypatch):
    """The heavy part (rebuilding and compressing the snapshot) runs in a helper thread that
    lowers its own CPU priority; the rename under the store's lock runs in the thread that
    started the helper, whose priority is left alone (a query waiting for the lock must not
    wait for a starved thread)."""
    seen: dict[str, list] = {"snapshot": [], "replace": [], "nice": []}
    real_snapshot, real_replace, real_nice = (slot_store._snapshot_bytes, os.replace,
                                              os.setpriority)

    def snapshot(*a):
        seen["snapshot"].append(threading.get_native_id())
        return real_snapshot(*a)

    def replace(src, dst):
        seen["replace"].append(threading.get_native_id())
        return real_replace(src, dst)

    def nice(which, who, prio):
        seen["nice"].append((who, prio))
        return real_nice(which, who, prio)

    monkeypatch.setattr(slot_store, "_snapshot_bytes", snapshot)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "setpriority", nice)
    path = str(tmp_path / "b.dpb")
    s = _store(path)
    s.compact_bytes = 1
    for k in seen:  # registration wrote its snapshots on the caller's thread
        seen[k].clear()
    _charge(s, range(10))
    s.wait_for_compaction(30)
    assert s.compaction_error is None
    helper, = seen["snapshot"]
    committer, = seen["replace"]
    assert helper != committer and committer != threading.get_native_id()
    assert seen["nice"] == [(helper, slot_store._NICE)] and slot_store._NICE == 19
    s.close()
    with SlotStore(path).locked() as again:
        assert list((10**9 - again.remaining[:11]) // 1000) == [1] * 10 + [0]


def test_the_default_builds_the_snapshot_in_a_child_process(tmp_path, monkeypatch):
    """By default the snapshot is built by a child process; records committed while it runs
    are kept, and the rename runs in the background thread, not in the query's."""
    built, renamed = [], []
    real_child, real_replace = slot_store._build_in_child, os.replace

    def child(*a):
        built.append(real_child(*a))
        return built[-1]

    def replace(src, dst):
        renamed.append(threading.current_thread().name)
        return real_replace(src, dst)

    monkeypatch.setattr(slot_store, "_build_in_child", child)
    monkeypatch.setattr(slot_store, "_BACKSTOP", 10**6)  # never far enough behind
    path = str(tmp_path / "b.dpb")
    s = _store(path, n=5000, process=True)
    fresh = SlotStore(path)
    assert fresh.compact_in_process  # the default
    fresh.close()
    monkeypatch.setattr(os, "replace", replace)
    s.compact_bytes = 1
    with open(path, "rb") as before:
        _charge(s, range(0, 3000))                 # starts the child
        for k in range(4):                         # while it imports and builds
            _charge(s, range(1000 * k, 1000 * k + 1500), label=f"during{k}")
        s.wait_for_compaction(120)
        assert s.compaction_error is None
        assert built and isinstance(built[0], int) and built[0] > 0
        assert renamed and set(renamed) == {"dprivacy-budget-compaction-commit"}
        assert _replaced(before, path)
    expected = s.remaining.copy()
    s.close()
    with SlotStore(path).locked() as again:
        np.testing.assert_array_equal(again.remaining, expected)
        assert [q[1] for q in again.queries][-4:] == [f"during{k}" for k in range(4)]
    assert expected[1200] == 10**9 - 3 * 1000 and expected[4999] == 10**9


def test_the_child_reports_a_stale_store_and_its_failures(tmp_path):
    path = str(tmp_path / "b.dpb")
    s = _store(path, process=True)
    _charge(s, range(10))
    ino, off = os.stat(path).st_ino, s._off
    tmp = str(tmp_path / "b.dpb.tmpx")
    assert slot_store._build_in_child(path, ino + 1, off, tmp) is None  # replaced meanwhile
    size = slot_store._build_in_child(path, ino, off, tmp)
    assert isinstance(size, int) and os.path.getsize(tmp) == size
    with pytest.raises(OSError, match="child process failed"):
        slot_store._build_in_child(str(tmp_path / "missing.dpb"), ino, off, tmp)
    s.close()


def test_a_paced_snapshot_reads_back_as_the_store(tmp_path):
    """The child's snapshot is compressed in pieces (consecutive frames) with pauses between
    slices of work; it loads as one array, equal to the budgets the records say."""
    from dprivacy.tables.budgets import slot_snapshot

    path = str(tmp_path / "p.dpb")
    n = 1_100_000  # 8.8 MB of budgets: two pieces
    s = _store(path, n=n)
    s.compact_bytes = 10**12
    for k in range(3):
        _charge(s, range(k * 300_000, k * 300_000 + 500_000), label=f"q{k}")
    want, ino, off = s.remaining.copy(), os.stat(path).st_ino, s._off
    s.close()
    calls = []
    pacer = slot_snapshot.Pacer(0.5)

    def pace():
        calls.append(1)
        pacer()

    tmp = str(tmp_path / "p.tmp")
    size = slot_snapshot.build(path, ino, off, tmp, jit=False, pace=pace)
    assert size == os.path.getsize(tmp) and len(calls) >= 2 + 5  # pieces, blocks, slices
    os.replace(tmp, path)
    with SlotStore(path).locked() as again:
        np.testing.assert_array_equal(again.remaining, want)
        assert [q[1] for q in again.queries] == ["q0", "q1", "q2"]
