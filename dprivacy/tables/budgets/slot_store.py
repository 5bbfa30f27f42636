"""ProPer's personal budgets as arrays, made durable by a compact per-query record of who paid.

:class:`SlotStore` keeps every registered individual in a *slot* (its registration position):
``ids[slot]`` is the person id, ``remaining[slot]`` and ``initial[slot]`` the budgets in integer
units of 10⁻⁹ ε (as :mod:`dprivacy.tables.budgets.ledger`). A query's charge is a vectorised update of
``remaining``; what makes it durable is one *record* appended to the store's file: the query
number, its label, and who paid how much: with one amount per payer (ε-queries on unique
relations), the payers' bitmap over the slots, N/8 bytes for N people whoever pays; with several
amounts, a compressed bitmap per amount, or the compressed (slot, amount) pairs if smaller.
Opening the file loads the last snapshot and replays the records after it; once the records
outweigh a few bytes per person they are folded into a new snapshot (*compaction*: written to a
temporary file, synced, renamed over the store).

**Compaction off the query path.** By default the snapshot is written in the background: the
query that crosses the threshold only starts a thread and answers at once. A child process at a
lower CPU priority (:mod:`~dprivacy.tables.budgets.slot_snapshot`; a helper thread at the lowest
priority if no process can start) rebuilds the budgets from the file itself (its snapshot and
the records up to that query, their bitmaps folded together in one pass over the budgets:
nothing in memory is copied or locked), compresses them into ``<path>.tmp<pid>.bg`` and syncs it
in slices (so that a query's own commit never waits behind the whole snapshot). The thread, at
the queries' priority, then appends in bulk the records committed meanwhile and takes the lock
for the short last step: the few records committed since, and the rename over the store (so a
query waiting for the lock never waits for a starved process or thread, and the compaction
never holds this process's interpreter lock). Should the
compaction fall far behind (records beyond three times the threshold: a starved CPU), the
query compacts on its own path, so the file stays bounded. If the store was replaced in
between (another process compacted or registered people) the copy is dropped.
``background=False`` compacts on the query's path.

**Crash safety.** A record is appended with one ``write`` and ``fsync`` (the commit) before
:meth:`SlotStore.charge` returns, so before any answer is computed; every record carries its
length and CRC-32: a process killed mid-write leaves a torn tail, which the next process to take
the lock discards (that charge never happened, and its answer never existed). The in-memory
debit runs alongside the commit and is undone if the commit fails.
Compaction replaces the file atomically (``rename``), so a kill leaves either the old file or
the new one, each complete. A budget is therefore always charged or not, never half.

**Processes.** Every operation on a file store holds an exclusive ``flock`` on ``<path>.lock``
(waiting up to ``timeout`` seconds) and first catches up with the records other processes
appended (or reloads a compacted file), so processes sharing a file never overspend together.

File layout: ``DPBUDGT1``, the snapshot (a JSON header, the compressed arrays and the query log
summary, a CRC-32), then records ``DPQ1 | length | CRC-32 | payload``.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

import numpy as np

from dprivacy.errors import DPrivacyError, ValidationError
from dprivacy.tables.budgets import slot_kernels
from dprivacy.tables.budgets.slot_index import SlotIndex
from dprivacy.tables.budgets.slot_records import (
    _REC,
    _append,
    _encode,
    _encode_bits,
    _fsync_dir,
    _pack,
    _unpack,
    _unpack_array,
)
from dprivacy.tables.budgets.slot_snapshot import (
    STALE,
    SYNC_SLICE,
    _read_snapshot,
    _replay_into,
    _replayed,
    _snapshot_bytes,
    _write_synced,
)

__all__ = ["SlotStore", "LedgerLockTimeout", "RowsChanged"]

_NICE = 19  # the background compaction's CPU priority (Linux threads): the lowest
_BACKSTOP = 3  # records beyond this many times the threshold: compact on the query's path
_TAIL_UNDER_LOCK = 1 << 20  # records committed during a compaction beyond this are copied
_CATCH_UP_ROUNDS = 4  # ... before it takes the lock (in at most this many rounds)
COMPACT_BYTES_PER_SLOT = 4  # fold the records into a snapshot beyond this many bytes per person


class LedgerLockTimeout(DPrivacyError):
    """The budget file stayed locked by other processes for longer than the timeout; nothing
    was charged."""


class RowsChanged(DPrivacyError):
    """A source's row count changed while its rows were being charged (nothing was)."""


class SlotStore:
    """Budgets of individuals in slots, in memory or in a file (see the module doc).

    Parameters:
        path: the store's file (created if missing); None keeps everything in memory.
        timeout: seconds to wait for other processes' locks on the file.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 60.0) -> None:
        self.path = None if path is None else os.fspath(path)
        self.timeout = float(timeout)
        self.lock = threading.RLock()
        self._pid = os.getpid()
        self._lockfd: int | None = None
        self._depth = 0
        self._reset()
        self.compact_bytes: int | None = None  # None: COMPACT_BYTES_PER_SLOT per person + 1 MiB
        self.background = True  # compact in the background (see the module doc)
        self.compact_in_process = True  # ... its heavy part in a child process
        self._bg: threading.Thread | None = None
        self.compaction_error: BaseException | None = None  # the last background failure
        if self.path is not None:
            _remove_stale_temporaries(self.path)
            with self.locked():
                if not os.path.exists(self.path):
                    self._write_snapshot()
                else:
                    self._sync()

    def _reset(self) -> None:
        self.ids = np.zeros(0, np.int64)
        self.initial = np.zeros(0, np.int64)
        self.remaining = np.zeros(0, np.int64)
        self.next_id = 0
        self.next_query = 1
        self.queries: list[list[Any]] = []  # [query, label, payers, total amount]
        self._index: SlotIndex | None = None
        self._paid: np.ndarray | None = None
        self._ino: int | None = None  # the inode of the file this store has read (``_held``)
        self._held: IO[bytes] | None = None
        self._off = 0
        self._log_bytes = 0
        self._packed: tuple[bytes, int, bytes, int] | None = None  # ids, initial compressed

    # ------------------------------------------------------------------ locking
    def locked(self) -> _Locked:
        """Context: this object's thread lock plus the file lock, caught up with the file."""
        return _Locked(self)

    def _acquire_file(self) -> None:
        if self.path is None:
            if self._pid != os.getpid():  # a copy of the budgets would be spent twice
                raise ValidationError("an in-memory BudgetTable cannot be shared with a forked "
                                      "process; give it a file path")
            return
        if self._pid != os.getpid():  # a forked child: its own descriptors and state
            self._lockfd, self._pid, self._ino, self._bg = None, os.getpid(), None, None
            self._hold(None)
        if self._lockfd is None:
            self._lockfd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LedgerLockTimeout(
                        f"the budget file {self.path} stayed locked by other processes for "
                        f"{self.timeout} s; nothing was charged") from None
                time.sleep(random.uniform(0.001, 0.01))

    def _release_file(self) -> None:
        if self.path is not None and self._lockfd is not None:
            fcntl.flock(self._lockfd, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ ids
    @property
    def size(self) -> int:
        """Number of registered individuals (slots)."""
        return int(self.ids.size)

    def index(self) -> SlotIndex:
        """The id -> slot map of the current ids (built once per set of ids)."""
        if self._index is None:
            self._index = SlotIndex(self.ids)
        return self._index

    def identity(self) -> bool:
        """Whether slot i holds person id i for every slot (ids need no lookup)."""
        return self.index().identity

    def slots_of(self, ids: np.ndarray) -> np.ndarray:
        """The slot of each person id (-1 for an unknown id)."""
        return self.lookup(ids)[0]

    def lookup(self, ids: np.ndarray, *, nonneg: bool = False) -> tuple[np.ndarray, bool]:
        """(the slot of each person id, -1 if unknown; whether every id is known).
        ``nonneg``: the caller knows the ids are >= 0 (saves a pass)."""
        return self.index().lookup(ids, nonneg=nonneg)

    # ------------------------------------------------------------------ changes
    def add(self, ids: np.ndarray, units: np.ndarray) -> None:
        """Register new individuals (ids not yet present, checked by the caller) with initial
        budgets ``units``; durable at once (a new snapshot). Call inside :meth:`locked`."""
        if ids.size == 0:
            return
        self.ids = np.concatenate([self.ids, ids.astype(np.int64)])
        self.initial = np.concatenate([self.initial, units.astype(np.int64)])
        self.remaining = np.concatenate([self.remaining, units.astype(np.int64)])
        self.next_id = max(self.next_id, int(ids.max()) + 1)
        self._index = None
        self._packed = None
        self._write_snapshot()

    def reserve(self, n: int) -> int:
        """Reserve ``n`` fresh ids; returns the first. Call inside :meth:`locked`."""
        start = max(self.next_id, int(self.ids.max()) + 1 if self.ids.size else 0)
        self.next_id = start + int(n)
        self._write_snapshot()
        return start

    def charge(self, slots: np.ndarray, amount: int | np.ndarray, label: str | None, *,
               ok: np.ndarray | None = None, after: np.ndarray | None = None) -> int:
        """Commit one query's debits and apply them; returns the query number.

        ``slots``: the sources asked to pay (each once); ``ok``: which of them pay (None: all;
        the caller decided it inside :meth:`locked`); ``amount``: what each pays (one number or
        one per slot); ``after``: the budgets of all ``slots`` after the charge (payers debited,
        the others unchanged), if the caller has them. With one amount, the record is the
        payers' bitmap over all slots, uncompressed, and the budgets of every asked slot are
        rewritten: the same work and the same bytes whoever pays.

        The record is encoded, written and synced in a helper thread while this one debits the
        budgets in memory (numpy and the system calls release the GIL): nothing outside this
        store reads the budgets before :meth:`locked` is left, and a failed commit undoes the
        debit before the error propagates."""
        slots = np.asarray(slots, dtype=np.int64)
        scalar = np.ndim(amount) == 0
        amounts = int(amount) if scalar else np.asarray(amount, dtype=np.int64)
        payers = slots.size if ok is None else int(np.count_nonzero(ok))
        qid = self.next_query
        if isinstance(amounts, int):
            total = amounts * payers
        else:
            total = int(np.sum(amounts if ok is None else amounts[ok]))
        failure: list[BaseException] = []
        worker = None
        written: list[int] = []
        if self.path is not None:
            path, n, off = self.path, self.size, self._off

            def commit() -> None:
                try:
                    rec = _encode(qid, label, n, slots, amounts, ok)
                    written.append(_append(path, off, rec))
                except BaseException as exc:  # re-raised by the caller's thread
                    failure.append(exc)

            worker = threading.Thread(target=commit, name="dprivacy-budget-commit")
            worker.start()
        self._apply_debit(slots, amounts, ok, after, +1)
        if worker is not None:
            worker.join()
            if failure:
                self._apply_debit(slots, amounts, ok, after, -1)  # the charge never happened
                raise failure[0]
        self._committed(qid, label, payers, total, written[0] if written else 0)
        return qid

    def charge_stream(self, chunks: Iterable[np.ndarray], amount: int, label: str | None, *,
                      rows: int | None = None, row_slots: np.ndarray | None = None,
                      check: Callable[[], bool] | None = None
                      ) -> tuple[np.ndarray, int, int]:
        """Charge ``amount`` to each person listed in ``chunks`` (person ids as they stream
        out of the engine; each person pays at most once, a negative id is a ⊥ record and an
        unregistered id pays nothing) whose budget covers it, then commit; returns (the payers'
        bitmap over the slots, ``np.packbits`` of their mask; the number of payers; the number
        of ⊥ records). Call inside :meth:`locked`.

        Each chunk is debited as it arrives (:func:`~dprivacy.tables.budgets.slot_kernels.
        charge_chunk`: the same work whoever pays), so the engine can produce the next chunk
        meanwhile; the record (the payers' bitmap, the same size whoever pays) is appended and
        synced once the stream ends, before this returns. If the stream or the commit fails,
        the debits are undone before the error propagates: the charge never happened.

        ``rows``: the chunks are instead a source's ``rows`` rows in order, one uint8 per row
        (non-zero: selected), row r being slot r (``row_slots`` None) or ``row_slots[r]``
        (:mod:`~dprivacy.tables.budgets.row_alignment`), charged by
        :func:`~dprivacy.tables.budgets.slot_kernels.charge_rows`. A stream of another length,
        or ``check()`` (asked once the stream has ended, before the commit) returning False,
        raises :class:`RowsChanged` (nothing charged)."""
        amount = int(amount)
        rem = self.remaining
        qid = self.next_query
        if rows is not None:
            paid = self._paid_mask()
            try:
                first = 0
                for m in chunks:
                    if slot_kernels.charge_rows(m, first, row_slots, rem, paid, amount) < 0:
                        raise RowsChanged(f"the source has more than {rows} rows")
                    first += int(m.size)
                if first != rows:
                    raise RowsChanged(f"the source has {first} rows, not {rows}")
                if check is not None and not check():
                    raise RowsChanged("the source's ids changed since it was registered")
                bits = np.packbits(paid)
                written = self._commit_bits(qid, label, bits, amount)
            except BaseException:
                slot_kernels.credit(rem, paid, amount)  # the charge never happened
                raise
            payers = int(np.bitwise_count(bits).sum())
            self._committed(qid, label, payers, amount * payers, written)
            return bits, payers, 0
        index = self.index()
        paid = self._paid_mask()
        bottom = 0
        try:
            for a in chunks:
                if index.identity:
                    bottom += slot_kernels.charge_chunk(a, rem, paid, amount)
                    continue
                neg = a < 0
                nneg = int(np.count_nonzero(neg))
                bottom += nneg
                slots = index.lookup(a[~neg] if nneg else a, nonneg=True)[0]
                slots[slots < 0] = rem.size  # unregistered: out of range, pays nothing
                slot_kernels.charge_chunk(slots, rem, paid, amount)
            bits = np.packbits(paid)
            written = self._commit_bits(qid, label, bits, amount)
        except BaseException:
            slot_kernels.credit(rem, paid, amount)  # the charge never happened
            raise
        payers = int(np.count_nonzero(paid))
        self._committed(qid, label, payers, amount * payers, written)
        return bits, payers, bottom

    def _commit_bits(self, qid: int, label: str | None, bits: np.ndarray, amount: int) -> int:
        """Append and sync the record of a query whose payers (``bits``) each paid ``amount``;
        the bytes written (0 in memory)."""
        if self.path is None:
            return 0
        rec = _encode_bits(qid, label, self.size, bits.tobytes(), amount)
        return _append(self.path, self._off, rec)

    def _paid_mask(self) -> np.ndarray:
        """A cleared bool mask over the slots, reused from query to query (no fresh pages)."""
        buf = self._paid
        if buf is None or buf.size != self.size:
            buf = self._paid = np.zeros(self.size, dtype=bool)
        else:
            buf.fill(False)
        return buf

    def _committed(self, qid: int, label: str | None, payers: int, total: int,
                   written: int) -> None:
        self._off += written
        self._log_bytes += written
        self.next_query = qid + 1
        self.queries.append([qid, label, payers, total])
        limit = (COMPACT_BYTES_PER_SLOT * self.size + (1 << 20) if self.compact_bytes is None
                 else self.compact_bytes)
        if self.path is not None and self._log_bytes > limit:
            running = self._bg is not None and self._bg.is_alive()
            if self.background and not (running and self._log_bytes > _BACKSTOP * limit):
                self._start_compaction()
            else:  # no background, or it fell far behind (a starved CPU): the file stays bounded
                self._write_snapshot()  # (a running background copy then finds it stale)

    def _start_compaction(self) -> None:
        """Copy the budgets and fold them into a snapshot in a background thread. Inside
        :meth:`locked` (the copy is the state of the file up to ``self._off``)."""
        if self._bg is not None and self._bg.is_alive():
            return
        if self._held is None:
            return
        state = None  # rebuilt from the file by the thread: nothing is copied on this path
        pin = os.fdopen(os.dup(self._held.fileno()), "rb")  # this inode, while the thread runs
        self._bg = threading.Thread(target=self._compact,
                                    args=(state, self._ino, self._off, pin),
                                    name="dprivacy-budget-compaction-commit", daemon=True)
        self._bg.start()

    def _compact(self, state: tuple[Any, ...] | None, ino: int | None, off: int,
                 src: IO[bytes]) -> None:
        """The background compaction: the snapshot is built, written and synced elsewhere (by
        default a child process at a lower CPU priority, :mod:`~dprivacy.tables.budgets.
        slot_snapshot`; else a helper thread at the lowest priority), then this thread, at the
        priority of the queries, appends in bulk the records committed meanwhile and takes the
        lock only for the short last step (the few records committed since, the rename).

        ``src`` is the file of inode ``ino``, open: while it is open no other file can get
        that inode number, so a file at ``path`` with inode ``ino`` is this one (ext4 hands
        a freed number to the next new file at once)."""
        assert self.path is not None and ino is not None
        tmp = f"{self.path}.tmp{os.getpid()}.bg"
        try:
            size = self._build_snapshot(state, ino, off, tmp)
            if size is None:  # the store was replaced meanwhile
                if os.path.exists(tmp):
                    os.unlink(tmp)
                return
            with src:  # the old file, even if renamed meanwhile
                copied = off
                for _round in range(_CATCH_UP_ROUNDS):  # without the lock: committed records
                    end = self._off  # (advanced after each commit's fsync) copied in bulk
                    if self._ino != ino or end - copied <= _TAIL_UNDER_LOCK:
                        break
                    copied += _copy_range(src, copied, end, tmp)
                with self.locked():  # the few records committed since, then the rename
                    if self._ino != ino or os.stat(self.path).st_ino != ino:
                        os.unlink(tmp)  # the store was replaced meanwhile: this copy is stale
                        return
                    _copy_range(src, copied, self._off, tmp)
                    ino_new = self._install(tmp)
                    tail = self._off - off
                    self._ino, self._off, self._log_bytes = ino_new, size + tail, tail
        except BaseException as exc:  # the old file is complete: compaction can wait
            self.compaction_error = exc
            if os.path.exists(tmp):
                os.unlink(tmp)
        finally:
            src.close()

    def _build_snapshot(self, state: tuple[Any, ...] | None, ino: int, off: int,
                        tmp: str) -> int | None:
        """Write the snapshot of the file up to ``off`` (or of ``state``) to ``tmp``, synced;
        its size, or None if the store was replaced meanwhile."""
        assert self.path is not None
        if state is None and self.compact_in_process:
            size = _build_in_child(self.path, ino, off, tmp)
            if size is not False:
                return size
        failed: list[BaseException] = []
        done: list[int | None] = []

        def prepare() -> None:
            try:  # this thread only (Linux): queries keep the CPU while a snapshot compresses
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
            except (AttributeError, OSError):
                pass
            try:
                st = _replayed(self.path, ino, off) if state is None else state  # type: ignore[arg-type]
                if st is None:
                    done.append(None)
                    return
                data = _snapshot_bytes(*st)
                _write_synced(tmp, data)
                done.append(len(data))
            except BaseException as exc:  # re-raised by the caller's thread
                failed.append(exc)

        helper = threading.Thread(target=prepare, name="dprivacy-budget-compaction",
                                  daemon=True)
        helper.start()
        helper.join()
        if failed:
            raise failed[0]
        return done[0] if done else None

    def wait_for_compaction(self, timeout: float | None = None) -> None:
        """Wait until a background compaction (if any) has finished."""
        bg = self._bg
        if bg is not None and bg.is_alive() and bg is not threading.current_thread():
            bg.join(timeout)

    def _apply_debit(self, slots: np.ndarray, amounts: int | np.ndarray, ok: np.ndarray | None,
                     after: np.ndarray | None, sign: int) -> None:
        rem = self.remaining
        if after is not None:
            if sign > 0:
                rem[slots] = after
            else:  # undo: the payers get their amount back
                back = amounts if ok is None else np.where(ok, amounts, 0)
                rem[slots] = after + back
            return
        if ok is None:
            _debit(rem, slots, sign * amounts)
        else:
            _debit(rem, slots[ok], sign * (amounts if isinstance(amounts, int) else amounts[ok]))

    # ------------------------------------------------------------------ files
    def _write_snapshot(self) -> None:
        """Fold everything into a new file (atomic rename). Inside :meth:`locked`."""
        if self.path is None:
            return
        identity = self.identity()
        if self._packed is None:  # ids and initial budgets change only when people are added
            self._packed = (b"" if identity else _pack(self.ids), 0 if identity else
                            self.ids.nbytes, _pack(self.initial), self.initial.nbytes)
        data = _snapshot_bytes(identity, None, None, self.remaining, self.queries,
                               self.next_id, self.next_query, self._packed)
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._ino, self._off, self._log_bytes = self._install(tmp), len(data), 0

    def _load(self) -> None:
        assert self.path is not None
        f = open(self.path, "rb")
        try:
            ino = os.fstat(f.fileno()).st_ino
            meta, blobs, off = _read_snapshot(f, self.path)
        except BaseException:
            f.close()
            raise
        self._hold(f)  # kept open: its inode number then names this file and no other
        n = int(meta["n"])
        raw = meta["raw"]
        if meta["identity"]:  # person i in slot i: the map needs no check
            self._index = SlotIndex.range(n)
            self.ids = self._index.ids
        else:
            self._index = None
            self.ids = _unpack_array(blobs[0], raw[0])
        self.initial = _unpack_array(blobs[1], raw[1])
        self.remaining = _unpack_array(blobs[2], raw[2])
        self.queries = json.loads(_unpack(blobs[3], raw[3]) or b"[]")
        self._packed = (blobs[0], int(raw[0]), blobs[1], int(raw[1]))
        self.next_id, self.next_query = int(meta["next_id"]), int(meta["next_query"])
        self._ino, self._off, self._log_bytes = ino, off, 0

    def _sync(self) -> None:
        """Catch up with the file: reload it if it was replaced, replay new records, and cut a
        torn tail (its writer died before committing). Inside :meth:`locked`."""
        assert self.path is not None
        st = os.stat(self.path)
        if st.st_ino != self._ino:
            self._load()
        if st.st_size <= self._off:
            return
        with open(self.path, "rb") as f:
            f.seek(self._off)
            data = f.read()
        pos = self._replay(data)
        if pos < len(data):  # a torn record: its process died before the commit
            tail = data[pos: pos + len(_REC)]
            if tail != _REC[: len(tail)] and any(tail):
                raise ValidationError(
                    f"{self.path}: bytes at offset {self._off + pos} are neither a record nor "
                    "the start of one; the file was left as it is (nothing charged)")
            os.truncate(self.path, self._off + pos)
        self._off += pos
        self._log_bytes += pos

    def _replay(self, data: bytes) -> int:
        """Apply the complete records at the start of ``data``; returns the bytes they take."""
        pos, next_query = _replay_into(data, self.remaining, self.queries)
        if next_query is not None:
            self.next_query = next_query
        return pos

    def _install(self, tmp: str) -> int:
        """Rename the complete, synced file ``tmp`` over the store's and hold it open (see
        :meth:`_hold`); its inode number. Inside :meth:`locked`."""
        assert self.path is not None
        new = open(tmp, "rb")
        try:
            os.replace(tmp, self.path)
        except BaseException:
            new.close()
            raise
        self._hold(new)
        _fsync_dir(self.path)
        return os.fstat(new.fileno()).st_ino

    def _hold(self, f: IO[bytes] | None) -> None:
        """Keep ``f``, the store's current file, open (closing the one held before): while a
        file is open its inode number is not given to another file, so comparing inode
        numbers tells whether another process replaced the file."""
        old, self._held = self._held, f
        if old is not None:
            old.close()

    def __del__(self) -> None:  # a store dropped without close(): no unclosed-file warning
        held = getattr(self, "_held", None)
        if held is not None:
            held.close()

    def close(self) -> None:
        """Finish a background compaction and close the lock file and the held file."""
        self.wait_for_compaction()
        if self._lockfd is not None and self._pid == os.getpid():
            os.close(self._lockfd)
        self._lockfd = None
        self._hold(None)


class _Locked:
    def __init__(self, store: SlotStore) -> None:
        self.s = store

    def __enter__(self) -> SlotStore:
        s = self.s
        s.lock.acquire()
        try:
            if s._depth == 0:
                s._acquire_file()
                try:
                    if s.path is not None and os.path.exists(s.path):
                        s._sync()
                except BaseException:
                    s._release_file()
                    raise
            s._depth += 1
        except BaseException:
            s.lock.release()
            raise
        return s

    def __exit__(self, *exc: Any) -> None:
        s = self.s
        s._depth -= 1
        try:
            if s._depth == 0:
                s._release_file()
        finally:
            s.lock.release()


def _debit(rem: np.ndarray, slots: np.ndarray, amounts: int | np.ndarray) -> None:
    if slots.size:
        rem[slots] -= amounts


def _copy_range(src: Any, start: int, end: int, tmp: str) -> int:
    """Append bytes [start, end) of the open file ``src`` to ``tmp`` and sync them (in slices of
    ``SYNC_SLICE``, as the snapshot); the bytes copied."""
    if end <= start:
        return 0
    src.seek(start)
    with open(tmp, "ab") as f:
        pos = start
        while pos < end:
            chunk = src.read(min(SYNC_SLICE, end - pos))
            if not chunk:
                raise OSError("the budget file is shorter than its committed records")
            f.write(chunk)
            f.flush()
            os.fdatasync(f.fileno())
            pos += len(chunk)
        os.fsync(f.fileno())
    return end - start


_CHILD_SECONDS = 600  # a child building a snapshot is killed after this long


def _build_in_child(path: str, ino: int, off: int, tmp: str) -> int | None | bool:
    """Build the snapshot in a child process (:mod:`~dprivacy.tables.budgets.slot_snapshot`, at
    a lower CPU priority): its size, None if the store was replaced meanwhile, or False if
    no child could be started (the caller then builds it in a thread)."""
    import subprocess
    import sys

    if not sys.executable:
        return False
    here = os.path.abspath(__file__)  # <root>/dprivacy/tables/budgets/slot_store.py
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dprivacy.tables.budgets.slot_snapshot", path, str(ino),
             str(off), tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            close_fds=True)
    except OSError:
        return False
    try:
        out, err = proc.communicate(timeout=_CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise OSError("the snapshot's child process took too long") from None
    if proc.returncode == STALE:
        return None
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise OSError(f"the snapshot's child process failed ({proc.returncode}): {tail[0]}")
    return int(out.split()[-1])


def _remove_stale_temporaries(path: str) -> None:
    """Delete snapshot copies left by processes that died while writing them."""
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.basename(path) + ".tmp"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(stem):
            continue
        pid = name[len(stem):].split(".")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        except OSError:
            pass
