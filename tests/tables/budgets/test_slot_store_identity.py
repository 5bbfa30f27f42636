"""A budget file replaced by another process is always noticed, even when the file system
hands the replaced file's inode number to a newer file (ext4 reuses a freed inode at once: file
A replaced by B, then B by C, and C often gets A's number)."""

from __future__ import annotations

import numpy as np

from dprivacy.tables.budgets.slot_store import SlotStore


def _charge(store: SlotStore, slot: int, amount: int) -> None:
    with store.locked():
        store.charge(np.array([slot]), amount, "q")


def test_a_store_notices_every_replacement_of_its_file(tmp_path):
    path = tmp_path / "b.dpb"
    a = SlotStore(path)
    with a.locked():
        a.add(np.arange(4), np.full(4, 1000, dtype=np.int64))
    _charge(a, 3, 1)
    b = SlotStore(path)  # another process's view of the same file
    b.background, b.compact_bytes = False, 0  # a new file after each of b's queries
    for q in range(6):
        _charge(b, 0, 5)  # two new files between a's looks: the second may get the number of
        _charge(b, 0, 5)  # the file a last read
        # a catches up at every step: never stale, never cutting the file (a cut would leave
        # the next reader a snapshot shorter than its header: "not a budget file" or CRC)
        with a.locked():
            assert a.remaining.tolist() == [1000 - 10 * (q + 1), 1000, 1000, 999]
    _charge(a, 1, 5)
    fresh = SlotStore(path)
    with fresh.locked():
        assert fresh.remaining.tolist() == [940, 995, 1000, 999]
    for s in (a, b, fresh):
        s.close()


def test_a_background_compaction_never_copies_from_a_newer_file(tmp_path):
    """The race that corrupted a file in CI: a background compaction started on file A; two
    synchronous snapshots replaced A twice, the second one reusing A's inode number, so the
    compaction took the new file for A and appended bytes from the wrong offset."""
    path = tmp_path / "b.dpb"
    a = SlotStore(path)
    with a.locked():
        a.add(np.arange(3), np.full(3, 10_000, dtype=np.int64))
    a.compact_bytes = 0  # a background compaction after every query (the child process)
    b = SlotStore(path)
    b.background, b.compact_bytes = False, 0
    spent = np.zeros(3, dtype=np.int64)
    for q in range(8):
        _charge(a, q % 3, 7)  # starts a compaction of the file as it is now
        spent[q % 3] += 7
        _charge(b, (q + 1) % 3, 3)  # replaces the file twice while it runs
        spent[(q + 1) % 3] += 3
        _charge(b, (q + 2) % 3, 3)
        spent[(q + 2) % 3] += 3
    a.wait_for_compaction()
    assert a.compaction_error is None or not isinstance(a.compaction_error, AssertionError)
    for s in (a, b):
        with s.locked():
            assert s.remaining.tolist() == (10_000 - spent).tolist()
    fresh = SlotStore(path)
    with fresh.locked():
        assert fresh.remaining.tolist() == (10_000 - spent).tolist()
    for s in (a, b, fresh):
        s.close()
