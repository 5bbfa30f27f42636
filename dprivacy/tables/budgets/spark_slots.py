"""ProPer's personal budgets in the cluster, laid out like the data: one slot per source row.

:class:`SparkSlotBudgets` implements :class:`dprivacy.tables.relations.protocol.PersonalBudgets`
for a ProPer table read by Spark from Parquet files, without a join or a shuffle per query.

**Slots.** At registration every row of the source gets a *slot*: the number of its file (in
the source's file list) times 2⁴⁰ plus its row number in that file (Spark's ``_metadata``
columns), computed by Spark while it reads the row. The person ids are distinct, so a slot is a
person. The relation the table queries carries the slot as its internal id: a query's selected
rows come out of the scan already knowing where their budgets are.

**Layout** under ``path`` (shared by the driver and the executors; a local disk for a local
session, a network filesystem on a cluster):

- the *base*: one pair of Parquet files per registered range of slots, written by the
  registration's tasks: ``(slot, id, initial)`` (written once) and ``remaining`` (rewritten by
  folds), integers in units of 10⁻⁹ ε;
- per query, its *debit*: for each base range it touched, the bitmap of the payers over the
  touched slots and their cost (one number when it is the same for all, else one per payer),
  N/8 bytes for N selected slots whoever pays;
- numbered commits (:mod:`dprivacy.tables.budgets.version_log`) naming the base files and the
  debits not yet folded into them.

**One query** (ProPer, POPL'15 Fig. 3): for a where/select chain over the source (one record
per person), ONE Spark pass: the scan evaluates the filter and hands each task the slots of its
selected rows; the task reads the base of those slots minus the unfolded debits, debits every
selected person whose remaining budget covers ε, writes and syncs its debit bitmap, and returns
how many paid. Other relations (several records per person, element costs) are charged per
source from one GROUP BY (the same as :class:`~dprivacy.tables.budgets.spark_budgets.
SparkBudgetTable`), range-partitioned by slot into the same tasks. Then the driver publishes the
commit; only then is the relation restricted to the payers' records (a count's answer is the
number of payers, known from the pass). Neither ids nor budgets travel to the driver.

**Folds**: every ``fold_every`` queries the debits are folded into a new ``remaining`` of each
base range by a Spark job in a background thread (queries go on meanwhile, reading the old base
and every unfolded debit); its commit replaces the base and drops exactly the debits it folded.

**Crash rule**: no answer leaves before its charge is committed, and a process killed at any
point leaves every budget either charged (the commit exists) or not (the previous commit is
current); Spark's retried tasks write new files, and the commit names only those of the
attempts whose results the driver received. Files no kept commit names are deleted later.

The source must be Parquet files read by Spark (``spark.read.parquet(...)`` or a path), the
store holds the people of that one source, and the files must not change while it is used:
every charge checks their sizes and modification times first (files on a local or mounted
filesystem).

Examples:
    A ProPer table on Spark whose budgets live under ``warehouse/budgets``::

        from dprivacy.tables import ProPerTable
        budgets = SparkSlotBudgets("warehouse/budgets")
        people = ProPerTable(spark.read.parquet("people.parquet"), budget=1.0,
                             ledger=budgets, id_column="pid")
        people.where(_.age > 17).noisy_count(0.1)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import (
    _MAX_UNITS,
    _PER_EPS,
    charge_units,
    keep_payers,
    pin_payers,
)
from dprivacy.tables.budgets.version_log import StoreLockTimeout, VersionLog
from dprivacy.tables.relations.engine.ibis_plan import PID

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["SparkSlotBudgets", "StoreLockTimeout"]

_FILE_BITS = 40  # slot = file number << 40 | row number in the file
_SLOT = "__dp_slot"
_BLOCKS = ("file string, key int, lo long, hi long, cost long, payers long, total long, "
           "records long, bottom long")


class SparkSlotBudgets:
    """Personal budgets of a ProPer table on Spark, held in the cluster beside the data's slots
    (see the module doc).

    Parameters:
        path: the store's directory, shared by the driver and the executors (created if
            missing; durable, shared by processes).
        session: the SparkSession for the curator's reads and the folds (charges use the
            session of the relation they charge); None: the active session.
        keep_versions: commits whose files are kept (>= 2; an eligible relation other than a
            count reads its query's debit files).
        fold_every: fold the debits into the base once this many are unfolded (>= 1).
        background: fold in a background thread (False: in the query that reached
            ``fold_every``, after its answer is committed).
        timeout: seconds to wait for other processes' lock on the store.
    """

    def __init__(self, path: str | os.PathLike, *, session: Any = None, keep_versions: int = 3,
                 fold_every: int = 8, background: bool = True, timeout: float = 60.0) -> None:
        for name, v, lo in (("keep_versions", keep_versions, 2), ("fold_every", fold_every, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValidationError(f"{name} = {v!r}: an integer >= {lo}")
        self.log = VersionLog(path, timeout=timeout)
        self.path = self.log.root
        self.keep_versions = keep_versions
        self.fold_every = fold_every
        self.background = bool(background)
        self._session = session
        self._fold_thread: threading.Thread | None = None
        self.fold_error: BaseException | None = None
        self.last_query_id: int | None = None

    # ------------------------------------------------------------------ plumbing
    def _spark(self) -> Any:
        if self._session is not None:
            return self._session
        from pyspark.sql import SparkSession

        from dprivacy.tables.relations.engine.spark import local_session

        return SparkSession.getActiveSession() or local_session()

    def _new_dir(self, prefix: str) -> tuple[str, int]:
        """A fresh directory under the store, held by this process (an ``flock`` on its
        ``_writing`` file) until :meth:`_release`, so no collector deletes it meanwhile."""
        name = f"{prefix}-{uuid.uuid4().hex}"
        d = os.path.join(self.path, name)
        os.makedirs(d)
        fd = os.open(os.path.join(d, "_writing"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return name, fd

    @staticmethod
    def _release(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def _publish(self, k: int, meta: dict[str, Any]) -> None:
        """Publish ``meta`` as version k + 1 (inside the log's lock), then collect garbage."""
        if not self.log.publish(k + 1, {**meta, "data": meta["base_dir"]}):
            raise StoreLockTimeout(f"version {k + 1} of {self.path} was published by another "
                                   "writer holding no lock; nothing was charged")
        self._collect()

    def _collect(self) -> None:
        """Delete the directories that no kept commit names, except those a live writer holds
        (inside the log's lock)."""
        import shutil

        nums = self.log.numbers()
        live: set[str] = set()
        for k in nums[-self.keep_versions:]:
            m = self.log.read(k)
            live.update(m.get("dirs", []))
        for n in os.listdir(self.path):
            p = os.path.join(self.path, n)
            if n[:2] not in ("b-", "r-", "q-") or n in live or not os.path.isdir(p):
                continue
            lock = os.path.join(p, "_writing")
            try:
                fd = os.open(lock, os.O_RDWR)
            except FileNotFoundError:
                fd = -1
            try:
                if fd >= 0:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer's directory
            finally:
                if fd >= 0:
                    os.close(fd)
            shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ registration
    def attach(self, rel: IbisRelation, budget: float | str, *, id_column: str | None,
               source: Any = None) -> tuple[IbisRelation, SparkSlotBudgets]:
        """Register the people of ``source`` (a Spark DataFrame read from Parquet files, or
        Parquet path(s); ``rel`` is its relation) with ``budget`` each (a number or a column
        name), unless this store registered the same files before (their people keep their
        budgets); return the relation whose internal ids are the rows' slots, and this store."""
        from pyspark.sql import functions as F

        if rel.backend != "spark":
            raise ValidationError(f"a SparkSlotBudgets charges Spark relations; this one lives in "
                                  f"{rel.backend!r}")
        if id_column is None:
            raise ValidationError("a SparkSlotBudgets needs id_column= (a column of stable, "
                                  "distinct non-negative integer person ids)")
        if id_column not in rel.columns:
            raise ValidationError(f"id_column {id_column!r} is not a column")
        if isinstance(budget, str):
            if budget not in rel.columns:
                raise ValidationError(f"budget column {budget!r} is not a column")
        else:
            bval = float(budget)
            if not np.isfinite(bval) or bval < 0:
                raise ValidationError(f"budget = {budget!r}: a finite number >= 0")
        eng: Any = rel.engine
        sdf = _parquet_frame(eng.session, source)
        names = _file_names(sdf)
        keys = F.create_map(*[x for i, n in enumerate(names) for x in (F.lit(n), F.lit(i))])
        slot = ((F.element_at(keys, F.col("_metadata.file_name")).cast("bigint")
                 * (1 << _FILE_BITS)) + F.col("_metadata.row_index"))
        with_slot = sdf.select(*[F.col(f"`{c}`") for c in sdf.columns], slot.alias(_SLOT))
        stamps = _stamps(sdf)
        with self.log.locked():
            k, meta = self.log.latest()
            if meta is not None:
                if meta.get("files") != names or meta.get("stamps") != stamps:
                    raise ValidationError(
                        f"the store {self.path} holds the budgets of other files (a "
                        "SparkSlotBudgets serves one unchanged Parquet source; use another "
                        "path)")
            else:
                b = (F.col(f"`{budget}`").cast("double") if isinstance(budget, str)
                     else F.lit(float(budget)))
                slot_id = [F.col(_SLOT).alias("slot"),
                           F.col(f"`{id_column}`").cast("bigint").alias("id")]
                if isinstance(budget, str) or not self._register_uniform(
                        k, with_slot.select(*slot_id), _scalar_budget_units(float(budget)),
                        names, stamps, id_column):
                    self._register(k, with_slot.select(*slot_id, _units(b).alias("u")), names,
                                   stamps)
        _start_workers(eng.session)
        t = eng.register_dataframe(with_slot)
        return rel.with_table(t.mutate(**{PID: t[_SLOT]}).drop(_SLOT), unique=True), self

    def _register_uniform(self, k: int, ids: Any, units: int, names: list[str],
                          stamps: list[Any], id_column: str) -> bool:
        """Register everybody with one budget (``units``) writing nothing per person: two
        aggregates over the ids check them (per file: rows, nulls, range; then every id once,
        as Spark-aggregated bitmap words) and the base ranges are the files' row ranges, whose
        budgets are all ``units`` until a fold writes them. False (nothing done) when the ids
        are too sparse for bitmap words (the caller then registers person by person)."""
        from pyspark.sql import functions as F

        per_file = ids.groupBy(F.expr(f"shiftright(slot, {_FILE_BITS})").alias("f")).agg(
            F.count(F.lit(1)).alias("n"), F.count("id").alias("nid"), F.min("id").alias("lo"),
            F.max("id").alias("hi"), F.max("slot").alias("top")).collect()
        files = [r for r in per_file if r["f"] is not None]
        if len(files) < len(per_file):
            raise ValidationError("Spark read rows whose file is not in the source's file "
                                  "list; register a plain Parquet read")
        if any(r["nid"] < r["n"] or r["lo"] < 0 for r in files):
            raise ValidationError("the id column must hold distinct non-negative integers "
                                  "(one stable identity per individual)")
        n = sum(int(r["n"]) for r in files)
        if any(int(r["top"]) - (int(r["f"]) << _FILE_BITS) + 1 != int(r["n"]) for r in files):
            return False  # not every row of a file: register row by row
        if n:
            lo, hi = min(int(r["lo"]) for r in files), max(int(r["hi"]) for r in files)
            if hi - lo > 64 * n:
                return False
            cols = [F.expr(f"bit_or(if((shiftright(v, 6) & {_WORD_SUBS - 1}) = {j}, "
                           "shiftleft(1L, cast(v & 63 as int)), 0L))").alias(f"b{j}")
                    for j in range(_WORD_SUBS)]
            words = ids.select((F.col("id") - F.lit(lo)).alias("v")).groupBy(
                F.expr("shiftright(v, 9)")).agg(*cols, F.count(F.lit(1)).alias("n"))
            ones = " + ".join(f"bit_count(b{j})" for j in range(_WORD_SUBS))
            dup = words.agg(F.expr(f"sum(n - ({ones}))")).first()[0]
            if dup:
                raise ValidationError("the id column must hold distinct non-negative integers "
                                      "(one stable identity per individual)")
        name, fd = self._new_dir("b")
        try:
            self.log.sync_dir(os.path.join(self.path, name))
            base = []
            for r in sorted(files, key=lambda r: r["f"]):
                for a in range(0, int(r["n"]), _PIECE_ROWS):
                    lo = (int(r["f"]) << _FILE_BITS) + a
                    m = min(_PIECE_ROWS, int(r["n"]) - a)
                    base.append({"lo": lo, "hi": lo + m, "dense": True, "n": m, "ids": None,
                                 "rem": None, "key": f"{name}/{lo}", "initial": units})
            meta = {"kind": "register", "files": names, "stamps": stamps, "base": base,
                    "base_dir": name, "dirs": [name], "debits": [], "next_query": 1, "upto": 0,
                    "people": n, "id_column": id_column}
            self._publish(k, meta)
        finally:
            self._release(fd)
        return True

    def _register(self, k: int, src: Any, names: list[str], stamps: list[Any]) -> None:
        name, fd = self._new_dir("b")
        try:
            out = os.path.join(self.path, name)
            rows = src.mapInArrow(_register_task(out), _PIECES).collect()
            if any(r["bad"] for r in rows):
                raise ValidationError("the id column must hold distinct non-negative integers "
                                      "(one stable identity per individual)")
            if any(r["orphans"] for r in rows):
                raise ValidationError("Spark read rows whose file is not in the source's file "
                                      "list; register a plain Parquet read")
            pieces = sorted((r.asDict() for r in rows if r["n"]), key=lambda r: r["lo"])
            if not _disjoint_ids(pieces):
                dup = src.groupBy("id").count().filter("count > 1").limit(1).collect()
                if dup:
                    raise ValidationError("the id column must hold distinct non-negative "
                                          "integers (one stable identity per individual)")
            self.log.sync_dir(out)
            base = [{"lo": p["lo"], "hi": p["hi"], "dense": bool(p["dense"]), "n": p["n"],
                     "ids": f"{name}/{p['ids']}", "rem": f"{name}/{p['rem']}"} for p in pieces]
            meta = {"kind": "register", "files": names, "stamps": stamps, "base": base,
                    "base_dir": name, "dirs": [name], "debits": [], "next_query": 1, "upto": 0,
                    "people": int(sum(p["n"] for p in pieces))}
            self._publish(k, meta)
        finally:
            self._release(fd)

    # ------------------------------------------------------------------ the Query rule
    def pay(self, rel: IbisRelation, eps: float, element_costs: ElementCosts | None = None,
            *, label: str | None = None) -> IbisRelation:
        """Charge ``rel``'s sources for an ε-query, commit, return the payers' records (and ⊥).

        Never raises because of the data or the budgets (a cost too large to store saturates:
        that source cannot pay)."""
        from pyspark.sql import functions as F

        from dprivacy.tables.budgets.spark_budgets import _costs

        units = charge_units(rel, eps, "spark", "SparkSlotBudgets")
        eng: Any = rel.engine
        frame = eng.run(rel.table)
        if element_costs is None and rel.unique:  # one record per person: slots straight
            asked = frame.select(F.col(PID).alias("slot"))
            uniform: int | None = units
        else:
            asked = _costs(rel, frame, units, element_costs)
            asked = asked.select(F.col("id").alias("slot"), "c", "n").repartitionByRange(
                "slot").sortWithinPartitions("slot")
            uniform = None
        with self.log.locked():
            k, meta = self.log.latest()
            if meta is None:
                raise ValidationError("nothing is registered in this store")
            self._check_source(meta)
            qid = int(meta.get("next_query", 1))
            name, fd = self._new_dir("q")
            try:
                out = os.path.join(self.path, name)
                ctx = _context(self.path, meta, out=out, uniform=uniform)
                if uniform is not None and all(p["dense"] for p in meta["base"]):
                    # the selection as bitmap words, aggregated by Spark: far fewer rows cross
                    # to Python than one per selected person
                    rows = _selection_words(asked, meta["base"], eng.session).mapInArrow(
                        _charge_words_task(ctx), _BLOCKS).collect()
                else:
                    rows = _collect_big_batches(eng.session, asked.mapInArrow(
                        _charge_task(ctx), _BLOCKS))
                self.log.sync_dir(out)
                blocks = [{"file": f"{name}/{r['file']}", "key": r["key"], "lo": r["lo"],
                           "hi": r["hi"], "cost": r["cost"]} for r in rows if r["file"]]
                payers = sum(int(r["payers"]) for r in rows)
                total = sum(int(r["total"]) for r in rows)
                records = sum(int(r["records"]) for r in rows)
                bottom = sum(int(r["bottom"]) for r in rows)
                debits = [*meta["debits"], {"query": qid, "blocks": blocks}]
                new = {**meta, "kind": "charge", "query": qid, "label": label, "payers": payers,
                       "total": total, "debits": debits, "next_query": qid + 1,
                       "dirs": [*meta["dirs"], name]}
                self._publish(k, new)
                self.last_query_id = qid
            finally:
                self._release(fd)
        if len(debits) >= self.fold_every:
            self._start_fold()
        return keep_payers(rel, _payers_frame(eng.session, self.path, blocks), "slot",
                           bottom + records if element_costs is None else None)

    def pin(self, rel: IbisRelation) -> None:
        """Keep the payers of ``rel`` (a relation :meth:`pay` returned) in Spark, so that it
        stays usable after later charges and folds delete this charge's files."""
        pin_payers(rel)

    def _check_source(self, meta: dict[str, Any]) -> None:
        stamps = meta.get("stamps") or []
        now = [_stamp(p) for p, _ in stamps] if stamps else []
        if now != [s for _, s in stamps]:
            raise ValidationError(f"the Parquet files registered in {self.path} changed since "
                                  "registration; nothing was charged")

    # ------------------------------------------------------------------ folds
    def _start_fold(self) -> None:
        if not self.background:
            self.fold()
            return
        if self._fold_thread is not None and self._fold_thread.is_alive():
            return

        def run() -> None:
            try:
                self.fold()
            except BaseException as e:  # kept for the curator; the next fold tries again
                self.fold_error = e

        self._fold_thread = threading.Thread(target=run, name="dprivacy-fold", daemon=True)
        self._fold_thread.start()

    def wait_for_fold(self) -> None:
        """Wait until a background fold (if any) has finished."""
        t = self._fold_thread
        if t is not None:
            t.join()

    def fold(self) -> bool:
        """Fold the committed debits into a new base (a Spark job; queries go on meanwhile).
        Returns False if there was nothing to fold or another process is folding."""
        lockfd = os.open(os.path.join(self.path, "_fold"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            with self.log.locked():
                _k, meta = self.log.latest()
                if meta is None or not meta["debits"]:
                    return False
                name, fd = self._new_dir("r")
            try:
                out = os.path.join(self.path, name)
                ctx = _context(self.path, meta, out=out, uniform=None)
                spark = self._spark()
                pieces = [(i,) for i in range(len(meta["base"]))]
                jobs = spark.createDataFrame(pieces, "piece int").repartition(
                    max(1, min(len(pieces), spark.sparkContext.defaultParallelism * 4)))
                rows = jobs.mapInArrow(_fold_task(ctx), "piece int, rem string").collect()
                self.log.sync_dir(out)
                rems = {int(r["piece"]): f"{name}/{r['rem']}" for r in rows}
                folded = {int(d["query"]) for d in meta["debits"]}
                with self.log.locked():
                    k, latest = self.log.latest()
                    assert latest is not None
                    base = [{**p, "rem": rems[i]} for i, p in enumerate(latest["base"])]
                    keep = [d for d in latest["debits"] if int(d["query"]) not in folded]
                    q_dirs = {b["file"].split("/")[0] for d in keep for b in d["blocks"]}
                    id_dirs = {_piece_key(p).split("/")[0] for p in base}
                    new = {**latest, "kind": "fold", "base": base, "debits": keep,
                           "dirs": sorted(id_dirs | q_dirs | {name}), "folded": sorted(folded),
                           "upto": max(folded)}
                    self._publish(k, new)
            finally:
                self._release(fd)
            return True
        finally:
            os.close(lockfd)

    # ------------------------------------------------------------------ curator's view
    def remaining(self, ids: Any) -> np.ndarray:
        """Remaining budgets (floats) of known ids (the curator's view; never the analyst's)."""
        return self._read(ids, "remaining")

    def initial(self, ids: Any) -> np.ndarray:
        """Initial budgets (floats) of known ids."""
        return self._read(ids, "initial")

    def _read(self, ids: Any, what: str) -> np.ndarray:
        import pyarrow.parquet as pq

        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        want = np.unique(a)
        with self.log.locked():
            _, meta = self.log.latest()
            if meta is None:
                raise UnknownRecordError("unknown record id: it was never registered")
            ctx = _context(self.path, meta, out="", uniform=None)
            got: dict[int, int] = {}
            lazy = self._slots_of(meta, want) if any(
                p.get("ids") is None for p in meta["base"]) else {}
            for i, p in enumerate(meta["base"]):  # the driver reads the base: curator's view
                if p.get("ids") is None:  # a range registered with one budget: no ids file
                    mine = {x: s for x, s in lazy.items() if p["lo"] <= s < p["hi"]}
                    if not mine:
                        continue
                    pos = np.array(list(mine.values()), dtype=np.int64) - int(p["lo"])
                    vals = (np.full(pos.size, int(p["initial"])) if what == "initial"
                            else _state(ctx, i, {}).full()[pos])
                    got.update(zip(mine, vals.tolist(), strict=True))
                    continue
                t = pq.read_table(os.path.join(self.path, p["ids"]), columns=["id", "initial"])
                pid = t.column("id").to_numpy()
                hit = np.flatnonzero(np.isin(pid, want))
                if not hit.size:
                    continue
                vals = (t.column("initial").to_numpy() if what == "initial"
                        else _state(ctx, i, {}).full())
                got.update(zip(pid[hit].tolist(), vals[hit].tolist(), strict=True))
        if any(int(x) not in got for x in a):
            raise UnknownRecordError("unknown record id: it was never registered")
        return np.array([got[int(x)] for x in a], dtype=np.int64) / _PER_EPS

    def frame(self) -> Any:
        """Everybody's budgets as a Spark DataFrame ``(initial, remaining)`` in units of 10⁻⁹ ε,
        computed by Spark tasks from the current commit (empty before the registration; the
        curator's view: aggregate it in the cluster, never serve it). The commit's files are
        read when the frame is first computed: aggregate it right away."""
        spark = self._spark()
        _, meta = self.log.latest()
        if meta is None or not meta["base"]:
            return spark.createDataFrame([], "initial long, remaining long")
        ctx = _context(self.path, meta, out="", uniform=None)
        pieces = [(i,) for i in range(len(meta["base"]))]
        jobs = spark.createDataFrame(pieces, "piece int").repartition(
            max(1, min(len(pieces), spark.sparkContext.defaultParallelism * 4)))
        return jobs.mapInArrow(_budgets_task(ctx), "initial long, remaining long")

    def _slots_of(self, meta: dict[str, Any], want: np.ndarray) -> dict[int, int]:
        """The slots of the ids ``want`` (those registered), read from the source by Spark."""
        from pyspark.sql import functions as F

        spark = self._spark()
        sdf = spark.read.parquet(*[p for p, _ in meta["stamps"]])
        names = meta["files"]
        keys = F.create_map(*[x for i, n in enumerate(names) for x in (F.lit(n), F.lit(i))])
        slot = ((F.element_at(keys, F.col("_metadata.file_name")).cast("bigint")
                 * (1 << _FILE_BITS)) + F.col("_metadata.row_index"))
        idc = F.col(f"`{meta['id_column']}`").cast("bigint")
        rows = sdf.where(idc.isin([int(x) for x in want])).select(
            idc.alias("id"), slot.alias("slot")).collect()
        return {int(r["id"]): int(r["slot"]) for r in rows if r["slot"] is not None}

    def queries(self) -> list[tuple[int, str | None, int, float]]:
        """The committed queries still logged: (number, label, payers, total ε charged)."""
        out = []
        for k in self.log.numbers():
            with contextlib.suppress(FileNotFoundError):
                m = self.log.read(k)
                if m.get("kind") == "charge":
                    out.append((int(m["query"]), m.get("label"), int(m["payers"]),
                                int(m["total"]) / _PER_EPS))
        return out

    def storage_bytes(self) -> int:
        """Bytes of the files the current commit names (base and unfolded debits)."""
        _, meta = self.log.latest()
        if meta is None:
            return 0
        files = {p["ids"] for p in meta["base"]} | {p["rem"] for p in meta["base"]}
        files |= {b["file"] for d in meta["debits"] for b in d["blocks"]}
        files.discard(None)
        return sum(os.path.getsize(os.path.join(self.path, f)) for f in files)

    def close(self) -> None:
        """Wait for a background fold, then release the lock file descriptor."""
        self.wait_for_fold()
        self.log.close()

    def __repr__(self) -> str:
        return f"SparkSlotBudgets({self.path!r})"


# ---------------------------------------------------------------------- the source
def _parquet_frame(session: Any, source: Any) -> Any:
    """The source as a Spark DataFrame over Parquet files (whose rows have ``_metadata``)."""
    if isinstance(source, (str, os.PathLike)) or (
            isinstance(source, (list, tuple)) and source
            and all(isinstance(p, (str, os.PathLike)) for p in source)):
        paths = [os.fspath(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
        return session.read.parquet(*paths)
    mod = type(source).__module__ or ""
    if mod.startswith("pyspark.sql") and type(source).__name__ == "DataFrame":
        try:
            _ = source.select("_metadata.row_index", "_metadata.file_name").schema
            files = source.inputFiles()
        except Exception:
            files = []
        if files:
            return source
    raise ValidationError("a SparkSlotBudgets needs the source as Parquet files read by Spark "
                          "(spark.read.parquet(...) or a path); for other sources use "
                          "SparkBudgetTable")


def _file_names(sdf: Any) -> list[str]:
    names = [unquote(urlparse(f).path).rsplit("/", 1)[-1] for f in sdf.inputFiles()]
    if len(set(names)) != len(names):
        raise ValidationError("the source's Parquet files must have distinct file names")
    return sorted(names)


def _stamp(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [int(st.st_size), int(st.st_mtime_ns)]


def _stamps(sdf: Any) -> list[Any]:
    """(path, [size, mtime]) of each file, sorted by name: checked before every charge."""
    out = []
    for f in sdf.inputFiles():
        u = urlparse(f)
        p = unquote(u.path) if u.scheme in ("", "file") else f
        out.append([p, _stamp(p)])
    return sorted(out, key=lambda x: x[0].rsplit("/", 1)[-1])


def _units(b: Any) -> Any:
    from pyspark.sql import functions as F

    u = F.floor(b * _PER_EPS + 1e-3).cast("double")
    return (F.when(b.isNull() | F.isnan(b) | (u < 0), F.lit(0))
            .when(u >= float(_MAX_UNITS), F.lit(_MAX_UNITS)).otherwise(u.cast("bigint")))


def _scalar_budget_units(b: float) -> int:
    """:func:`_units` of one number, in Python (the same double arithmetic)."""
    u = math.floor(b * _PER_EPS + 1e-3)
    return 0 if u < 0 else min(int(u), _MAX_UNITS)


def _disjoint_ids(pieces: list[dict[str, Any]]) -> bool:
    """Whether pieces whose ids are distinct inside each have disjoint id ranges."""
    rng = sorted((p["id_lo"], p["id_hi"]) for p in pieces)
    return all(not p["dup"] for p in pieces) and all(
        a[1] < b[0] for a, b in zip(rng, rng[1:], strict=False))


_PIECES = ("ids string, rem string, lo long, hi long, n long, dense boolean, id_lo long, "
           "id_hi long, dup boolean, bad boolean, orphans long")


# ---------------------------------------------------------------------- executor side
def _start_workers(session: Any) -> None:
    """Start the session's Python workers with this module imported (one task per core), so
    that the first charge does not wait for them."""
    par = max(1, int(session.sparkContext.defaultParallelism))
    session.range(0, par, 1, par).mapInArrow(_idle_task, "n long").collect()


def _idle_task(batches: Any) -> Any:
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pylist([{"n": n}], schema=pa.schema([("n", pa.int64())]))


def _write_parquet(path: str, table: Any) -> None:
    import pyarrow.parquet as pq

    cols = table.column_names
    delta = [c for c in cols if c in ("slot", "id")]
    pq.write_table(table, path, compression="zstd",
                   use_dictionary=[c for c in cols if c not in delta],
                   column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED"))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _register_task(out: str) -> Any:
    def run(batches: Any) -> Any:
        import pyarrow as pa

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        slot = t.column("slot")
        orphans = slot.null_count
        ids = t.column("id")
        bad = bool(ids.null_count)
        keep = np.ones(len(t), bool)
        if orphans:
            keep = ~np.asarray(slot.is_null())
        s = np.asarray(slot.fill_null(-1).to_numpy())[keep]
        i = np.asarray(ids.fill_null(-1).to_numpy())[keep]
        u = np.asarray(t.column("u").to_numpy())[keep]
        bad = bad or bool(i.size and i.min() < 0)
        if s.size > 1 and not (s[1:] > s[:-1]).all():
            order = np.argsort(s, kind="stable")
            s, i, u = s[order], i[order], u[order]
        if i.size > 1 and not (i[1:] > i[:-1]).all():  # ids not increasing: sort to check
            srt = np.sort(i)
            dup = bool((srt[1:] == srt[:-1]).any())
        else:
            dup = False
        fid = s >> _FILE_BITS
        cuts = np.flatnonzero(np.diff(fid)) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(s)], strict=True):
            tag = uuid.uuid4().hex
            ids_f, rem_f = f"ids-{tag}.parquet", f"rem-{tag}.parquet"
            _write_parquet(os.path.join(out, ids_f), pa.table(
                {"slot": s[a:b], "id": i[a:b], "initial": u[a:b]}))
            _Rem.of(u[a:b]).write(os.path.join(out, rem_f))
            lo, hi = int(s[a]), int(s[b - 1]) + 1
            yield pa.RecordBatch.from_pylist([{
                "ids": ids_f, "rem": rem_f, "lo": lo, "hi": hi, "n": b - a,
                "dense": hi - lo == b - a, "id_lo": int(i[a:b].min()), "id_hi": int(i[a:b].max()),
                "dup": dup, "bad": bad, "orphans": orphans}], schema=_schema(_PIECES))
        if not len(s):
            yield pa.RecordBatch.from_pylist([{
                "ids": "", "rem": "", "lo": 0, "hi": 0, "n": 0, "dense": True, "id_lo": 0,
                "id_hi": 0, "dup": False, "bad": bad, "orphans": orphans}],
                schema=_schema(_PIECES))

    return run


def _collect_big_batches(session: Any, frame: Any) -> list[Any]:
    """``frame.collect()`` with Arrow batches of up to 2²⁰ rows to the Python tasks (fewer,
    larger batches than the default 10⁴: the tasks only hold slots)."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = session.conf.get(key, None)
    session.conf.set(key, str(1 << 20))
    try:
        return list(frame.collect())
    finally:
        if before is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, before)


def _schema(ddl: str) -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(),
             "boolean": pa.bool_()}
    return pa.schema([(n, types[t]) for n, t in (f.strip().split() for f in ddl.split(","))])


def _context(root: str, meta: dict[str, Any], *, out: str, uniform: int | None
             ) -> dict[str, Any]:
    """What a task needs: the base ranges and the unfolded debits' blocks (paths absolute)."""
    base = [{**p, "key": _piece_key(p),
             "ids": p["ids"] and os.path.join(root, p["ids"]),
             "rem": p["rem"] and os.path.join(root, p["rem"])} for p in meta["base"]]
    los = np.array([p["lo"] for p in base], dtype=np.int64)
    blocks: list[list[dict[str, Any]]] = [[] for _ in base]
    for d in meta["debits"]:
        for b in d["blocks"]:
            i = int(np.searchsorted(los, b["lo"], side="right")) - 1
            blocks[i].append({**b, "file": os.path.join(root, b["file"]), "q": int(d["query"])})
    return {"base": base, "los": los, "blocks": blocks, "out": out, "uniform": uniform,
            "upto": _upto(meta), "through": int(meta.get("next_query", 1)) - 1}


def _piece_key(p: dict[str, Any]) -> str:
    """A base range's name for good: its registration's directory and more (what a worker's
    cache of budgets is keyed by)."""
    return str(p.get("key") or p["ids"])


def _upto(meta: dict[str, Any]) -> int:
    """The last query folded into the base: every committed query up to it is in the base, every
    later one is an unfolded debit (committed queries are numbered 1, 2, ... without gaps)."""
    if "upto" in meta:
        return int(meta["upto"])
    qs = [int(d["query"]) for d in meta["debits"]]
    return min(qs) - 1 if qs else int(meta.get("next_query", 1)) - 1


def _load_block(cache: dict[str, Any], b: dict[str, Any]) -> tuple[np.ndarray, Any]:
    """(the payers' slots, their cost: one number or one per payer) of a debit block."""
    f = b["file"]
    if f not in cache:
        with np.load(f) as z:
            cache[f] = {k: z[k] for k in z.files}
    z, key = cache[f], b["key"]
    bits = np.unpackbits(z[f"bits{key}"], count=int(b["hi"]) - int(b["lo"]))
    slots = np.flatnonzero(bits).astype(np.int64) + int(b["lo"])
    cost = int(b["cost"]) if int(b["cost"]) >= 0 else z[f"cost{key}"]
    return slots, cost


def _positions(ctx: dict[str, Any], i: int, slots: np.ndarray, cache: dict[str, Any]
               ) -> np.ndarray:
    """Row positions in base range i of ``slots`` (-1: not a registered slot)."""
    import pyarrow.parquet as pq

    p = ctx["base"][i]
    if p["dense"]:
        pos = slots - int(p["lo"])
        return np.where((pos >= 0) & (pos < int(p["n"])), pos, -1)
    key = "slots:" + p["ids"]
    if key not in cache:
        cache[key] = pq.read_table(p["ids"], columns=["slot"]).column(0).to_numpy()
    known = cache[key]
    pos = np.searchsorted(known, slots)
    pos = np.minimum(pos, len(known) - 1)
    return np.where(known[pos] == slots, pos, -1)


class _Rem:
    """The remaining budgets of one base range (units): ``values[codes]`` while they take few
    distinct values (codes of one or two bytes: a worker keeps many ranges, and a fold writes
    them small), else the budgets themselves (``values`` None, ``codes`` int64)."""

    __slots__ = ("values", "codes")

    def __init__(self, values: np.ndarray | None, codes: np.ndarray) -> None:
        self.values, self.codes = values, codes

    @classmethod
    def of(cls, budgets: np.ndarray) -> _Rem:
        """Budgets as codes when they take at most 2¹⁶ values."""
        b = np.asarray(budgets, dtype=np.int64)
        if b.size and (b == b[0]).all():
            return cls(b[:1].copy(), np.zeros(b.size, np.uint8))
        vals, inv = np.unique(b, return_inverse=True)
        if vals.size > 1 << 16:
            return cls(None, b.copy())
        return cls(vals, inv.astype(np.uint8 if vals.size <= 256 else np.uint16))

    @classmethod
    def read(cls, path: str) -> _Rem:
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        if "code" in t.column_names:  # codes, the values in the file's metadata
            vals = np.array(json.loads((t.schema.metadata or {})[b"values"]), dtype=np.int64)
            codes = t.column("code").to_numpy()
            return cls(vals, codes.astype(np.uint8 if vals.size <= 256 else np.uint16))
        return cls.of(t.column(0).to_numpy())

    def write(self, path: str) -> None:
        """Write the budgets as Parquet (codes, or the budgets themselves); values no slot holds
        any more are dropped first."""
        import pyarrow as pa

        if self.values is None:
            _write_parquet(path, pa.table({"remaining": self.codes}))
            return
        used = np.flatnonzero(np.bincount(self.codes, minlength=self.values.size))
        vals, codes = self.values, self.codes
        if used.size < vals.size:
            remap = np.zeros(vals.size, dtype=codes.dtype)
            remap[used] = np.arange(used.size)
            vals, codes = vals[used], remap[codes]
            if vals.size <= 256:
                codes = codes.astype(np.uint8)
        t = pa.table({"code": codes}).replace_schema_metadata(
            {"values": json.dumps(vals.tolist())})
        _write_parquet(path, t)

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes) + (0 if self.values is None else int(self.values.nbytes))

    def full(self) -> np.ndarray:
        """The budgets (int64, one per slot of the range)."""
        return self.codes if self.values is None else self.values[self.codes]

    def can_pay(self, a: int, z: int, cost: int) -> np.ndarray:
        """Whether the slots at positions a..z-1 hold at least ``cost``."""
        if self.values is None:
            return self.codes[a:z] >= cost
        return (self.values >= cost)[self.codes[a:z]]

    def debit_range(self, a: int, z: int, paid: np.ndarray, cost: int) -> None:
        """Debit ``cost`` from the positions a..z-1 where ``paid`` (bool) holds (each of which
        holds at least ``cost``)."""
        trans = None if self.values is None else self._moved(cost)
        if trans is None:
            self.codes[a:z] -= paid * np.int64(cost)
            return
        seg = self.codes[a:z]  # code c becomes trans[c] where paid: add the difference mod 2^8k
        delta = (trans - np.arange(trans.size)).astype(seg.dtype)
        seg += delta[seg] * paid.view(np.uint8).astype(seg.dtype, copy=False)

    def debit_points(self, pos: np.ndarray, cost: Any) -> None:
        """Debit ``cost`` (one number or one per position) at positions ``pos``."""
        if self.values is not None:
            plain = self.values[self.codes]
            self.values, self.codes = None, plain
        self.codes[pos] -= cost

    def _moved(self, cost: int) -> np.ndarray | None:
        """The code map taking every value that covers ``cost`` to the code of that value minus
        ``cost`` (values appended as needed; others map to themselves), or None (the budgets
        then held plainly) once there would be more than 2¹⁶ values."""
        vals = self.values
        assert vals is not None
        src = np.flatnonzero(vals >= cost)
        target = vals[src] - cost
        order = np.argsort(vals, kind="stable")
        at = np.minimum(np.searchsorted(vals[order], target), vals.size - 1)
        found = vals[order][at] == target
        fresh = np.unique(target[~found])
        trans = np.arange(vals.size, dtype=np.int64)
        trans[src] = np.where(found, order[at], vals.size + np.searchsorted(fresh, target))
        if fresh.size:
            if vals.size + fresh.size > 1 << 16:
                self.values, self.codes = None, vals[self.codes]
                return None
            self.values = np.concatenate([vals, fresh])
            if self.values.size > 256 and self.codes.dtype == np.uint8:
                self.codes = self.codes.astype(np.uint16)
        return trans


_STATES: dict[str, tuple[int, _Rem]] = {}  # per worker process
_STATE_BYTES = 256 << 20  # the budgets a Python worker keeps between queries


def _state(ctx: dict[str, Any], i: int, cache: dict[str, Any]) -> _Rem:
    """The remaining budgets of base range i after every committed query: its base minus every
    unfolded debit. A worker process keeps the states it computed, keyed by the range (its
    immutable ids file) and the last committed query applied, so a later query applies only
    the debits committed since, across folds too (a fold only moves debits into the base).
    Callers only read the state (it is shared with the cache)."""
    p = ctx["base"][i]
    through, upto = int(ctx["through"]), int(ctx["upto"])
    hit = _STATES.pop(p["key"], None)
    if hit is not None and upto <= hit[0] <= through:
        done, rem = hit
    elif p["rem"] is None:  # registered with one budget, never folded
        done, rem = upto, _Rem(np.array([int(p["initial"])]), np.zeros(int(p["n"]), np.uint8))
    else:
        done, rem = upto, _Rem.read(p["rem"])
    for b in ctx["blocks"][i]:
        if int(b["q"]) <= done:
            continue
        cost = int(b["cost"])
        if p["dense"] and cost >= 0:  # a uniform cost over a dense range: bits straight
            f = b["file"]
            if f not in cache:
                with np.load(f) as z:
                    cache[f] = {k: z[k] for k in z.files}
            a, z = int(b["lo"]) - int(p["lo"]), int(b["hi"]) - int(p["lo"])
            paid = np.unpackbits(cache[f][f"bits{b['key']}"], count=z - a).view(bool)
            rem.debit_range(a, z, paid, cost)
            continue
        slots, c = _load_block(cache, b)
        pos = _positions(ctx, i, slots, cache)
        rem.debit_points(pos, c)  # payers are registered slots: every position is >= 0
    _STATES[p["key"]] = (through, rem)
    while sum(r.nbytes for _, r in _STATES.values()) > _STATE_BYTES and len(_STATES) > 1:
        _STATES.pop(next(iter(_STATES)))
    return rem


_WORD_SUBS = 8  # bitmap words per aggregated row: a row covers 8 × 64 slots
_PIECE_ROWS = 1 << 23  # rows per base range registered with one budget


def _selection_words(asked: Any, base: list[dict[str, Any]], session: Any) -> Any:
    """The selected slots (column ``slot`` of ``asked``) as rows ``(w, b0..b7, n)``: base range
    i = ``w >> 32`` holds them, and bit k of ``b<j>`` says whether slot ``(g·8 + j)·64 + k`` is
    selected, g = ``(w & (2³² - 1)) + (lo_i >> 9)``; ``n`` counts the row's records (the ⊥
    records, slot -1, form the row w = -1; slots of no range, w = -2). Spark aggregates them in
    the scan's own tasks (about 1/512 of the selected rows leave a task), then sends each range's
    rows to one task (which reads that range's budgets once)."""
    from pyspark.sql import functions as F

    def key(ps: list[tuple[int, int, int]]) -> str:  # the range holding `slot`: binary search
        if len(ps) == 1:
            i, lo, n = ps[0]
            return (f"if(slot >= {lo} and slot < {lo + n}, "
                    f"{(i << 32) - (lo >> 9)}L + shiftright(slot, 9), -2L)")
        mid = len(ps) // 2
        return f"if(slot < {ps[mid][1]}, {key(ps[:mid])}, {key(ps[mid:])})"

    pieces = [(i, int(p["lo"]), int(p["n"])) for i, p in enumerate(base)]
    w = F.expr(f"if(slot < 0, -1L, {key(pieces)})" if pieces else "-2L")
    cols = [F.expr(f"bit_or(if((shiftright(slot, 6) & {_WORD_SUBS - 1}) = {j}, "
                   "shiftleft(1L, cast(slot & 63 as int)), 0L))").alias(f"b{j}")
            for j in range(_WORD_SUBS)]
    words = asked.groupBy(w.alias("w")).agg(*cols, F.count(F.lit(1)).alias("n"))
    parts = max(1, min(len(base), 2 * int(session.sparkContext.defaultParallelism)))
    return words.repartition(parts, F.expr("shiftright(w, 32)"))


def _debit_batch(out: str, fname: str, arrays: dict[str, np.ndarray],
                 out_rows: list[dict[str, Any]], *, payers: int, total: int, records: int,
                 bottom: int) -> Any:
    """A charge task's output: its debit blocks ``arrays`` written durably to ``out/fname``
    (when there are any: ``out_rows`` describes them), and one batch of ``out_rows`` followed by
    the task's summary row (payers, total cost, records, records of nobody's)."""
    import pyarrow as pa

    if out_rows:
        with open(os.path.join(out, fname), "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
    out_rows.append({"file": None, "key": 0, "lo": 0, "hi": 0, "cost": 0, "payers": payers,
                     "total": total, "records": records, "bottom": bottom})
    return pa.RecordBatch.from_pylist(out_rows, schema=_schema(_BLOCKS))


def _charge_words_task(ctx: dict[str, Any]) -> Any:
    """The charge of a uniform cost over one record per person, from selection words (see
    :func:`_selection_words`); writes the same debit blocks as :func:`_charge_task`."""
    def run(batches: Any) -> Any:

        uniform = int(ctx["uniform"])
        ws, bs, ns = [], [], []
        for b in batches:
            if not b.num_rows:
                continue
            w = b.column(0)
            keep = np.asarray(w.is_valid()) if w.null_count else slice(None)
            ws.append(np.asarray(w.fill_null(0).to_numpy())[keep])
            bs.append(np.stack([np.asarray(b.column(1 + j).to_numpy()) for j in
                                range(_WORD_SUBS)], axis=1)[keep])
            ns.append(np.asarray(b.column(1 + _WORD_SUBS).to_numpy())[keep])
        w = np.concatenate(ws) if ws else np.zeros(0, np.int64)
        bw = (np.concatenate(bs) if bs else np.zeros((0, _WORD_SUBS), np.int64)).view(np.uint64)
        n = np.concatenate(ns) if ns else np.zeros(0, np.int64)
        bottom = int(n[w == -1].sum())
        real = w >= 0
        w, bw = w[real], bw[real]
        order = np.argsort(w, kind="stable")
        w, bw = w[order], bw[order]
        piece = w >> 32
        cuts = np.flatnonzero(np.diff(piece)) + 1
        cache: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        out_rows: list[dict[str, Any]] = []
        fname = f"debit-{uuid.uuid4().hex}.npz"
        payers = 0
        for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), w.size], strict=True):
            if a == z:
                continue
            i = int(piece[a])
            p = ctx["base"][i]
            plo, phi = int(p["lo"]), int(p["lo"]) + int(p["n"])
            gw = ((w[a:z] & 0xFFFFFFFF) + (plo >> 9))[:, None] * _WORD_SUBS + np.arange(
                _WORD_SUBS)
            g, v = gw.reshape(-1), bw[a:z].reshape(-1)
            nz = v != 0
            if not nz.any():
                continue
            g, v = g[nz], v[nz]  # the selected slots' word numbers (sorted), and their bits
            g0, g1 = int(g[0]), int(g[-1]) + 1
            words = np.zeros(g1 - g0, dtype=np.uint64)
            words[g - g0] = v
            sel = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool)
            lo, hi = max(plo, g0 << 6), min(phi, g1 << 6)
            sel = sel[lo - (g0 << 6):hi - (g0 << 6)]
            ok = sel & _state(ctx, i, cache).can_pay(lo - plo, hi - plo, uniform)
            payers += int(np.count_nonzero(ok))
            key = len(out_rows)
            arrays[f"bits{key}"] = np.packbits(ok)
            out_rows.append({"file": fname, "key": key, "lo": lo, "hi": hi, "cost": uniform,
                             "payers": 0, "total": 0, "records": 0, "bottom": 0})
        yield _debit_batch(ctx["out"], fname, arrays, out_rows, payers=payers,
                           total=payers * uniform, records=payers, bottom=bottom)

    return run


def _charge_task(ctx: dict[str, Any]) -> Any:
    def run(batches: Any) -> Any:

        uniform = ctx["uniform"]
        ss, cs, ns = [], [], []
        for b in batches:
            col = b.column(0)
            if col.null_count:  # rows of files outside the registration: nobody's
                k = np.asarray(col.is_valid())
                ss.append(np.asarray(col.fill_null(0).to_numpy())[k])
                if uniform is None:
                    cs.append(np.asarray(b.column(1).to_numpy())[k])
                    ns.append(np.asarray(b.column(2).to_numpy())[k])
            else:
                ss.append(np.asarray(col.to_numpy()))
                if uniform is None:
                    cs.append(np.asarray(b.column(1).to_numpy()))
                    ns.append(np.asarray(b.column(2).to_numpy()))
        s = np.concatenate(ss) if ss else np.zeros(0, np.int64)
        if uniform is None:
            c = np.concatenate(cs) if cs else np.zeros(0, np.int64)
            n = np.concatenate(ns) if ns else np.zeros(0, np.int64)
        bot = s == -1
        bottom = int(bot.sum()) if uniform is not None else int(n[bot].sum())
        if bottom:
            s = s[~bot]
            if uniform is None:
                c, n = c[~bot], n[~bot]
        if s.size > 1 and not (s[1:] > s[:-1]).all():
            o = np.argsort(s, kind="stable")
            s = s[o]
            if uniform is None:
                c, n = c[o], n[o]
        # the slots are sorted: base range i holds s[starts[i]:starts[i + 1]]
        starts = np.searchsorted(s, ctx["los"]).tolist() + [s.size]
        cache: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        out_rows: list[dict[str, Any]] = []
        fname = f"debit-{uuid.uuid4().hex}.npz"
        payers = total = records = 0
        for i in range(len(ctx["los"])):
            a, z = starts[i], starts[i + 1]
            if a == z:
                continue
            sp = s[a:z]
            rem = _state(ctx, i, cache).full()
            lo, hi = int(sp[0]), int(sp[-1]) + 1
            p = ctx["base"][i]
            key = len(out_rows)
            if uniform is not None and p["dense"] and hi - int(p["lo"]) <= int(p["n"]):
                # one record per person, one cost: masks over the touched range, no gathers
                off = lo - int(p["lo"])
                bits = np.zeros(hi - lo, dtype=bool)
                bits[sp - lo] = True
                bits &= rem[off:off + hi - lo] >= uniform
                paid = int(np.count_nonzero(bits))
                payers += paid
                total += paid * int(uniform)
                records += paid
            else:
                cp = c[a:z] if uniform is None else np.full(sp.size, uniform, dtype=np.int64)
                np_ = n[a:z] if uniform is None else np.ones(sp.size, dtype=np.int64)
                pos = _positions(ctx, i, sp, cache)
                known = pos >= 0
                ok = known & (rem[np.where(known, pos, 0)] >= cp)
                bits = np.zeros(hi - lo, dtype=bool)
                bits[sp[ok] - lo] = True
                if uniform is None:
                    arrays[f"cost{key}"] = cp[ok]
                payers += int(ok.sum())
                total += int(cp[ok].sum())
                records += int(np_[ok].sum())
            arrays[f"bits{key}"] = np.packbits(bits)
            out_rows.append({"file": fname, "key": key, "lo": lo, "hi": hi,
                             "cost": -1 if uniform is None else int(uniform), "payers": 0,
                             "total": 0, "records": 0, "bottom": 0})
        yield _debit_batch(ctx["out"], fname, arrays, out_rows, payers=payers, total=total,
                           records=records, bottom=bottom)

    return run


def _fold_task(ctx: dict[str, Any]) -> Any:
    def run(batches: Any) -> Any:
        import pyarrow as pa

        cache: dict[str, Any] = {}
        rows = []
        for b in batches:
            for i in b.column(0).to_pylist():
                rem = _state(ctx, int(i), cache)
                f = f"rem-{uuid.uuid4().hex}.parquet"
                rem.write(os.path.join(ctx["out"], f))
                rows.append({"piece": int(i), "rem": f})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=_schema("piece int, rem string"))

    return run


def _budgets_task(ctx: dict[str, Any]) -> Any:
    def run(batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cache: dict[str, Any] = {}
        for b in batches:
            for i in b.column(0).to_pylist():
                p = ctx["base"][int(i)]
                rem = _state(ctx, int(i), cache).full()
                init = (np.full(rem.size, int(p["initial"]), np.int64) if p["ids"] is None
                        else pq.read_table(p["ids"], columns=["initial"]).column(0).to_numpy())
                yield pa.RecordBatch.from_arrays([pa.array(init, pa.int64()),
                                                  pa.array(rem, pa.int64())],
                                                 ["initial", "remaining"])

    return run


def _payers_frame(session: Any, root: str, blocks: list[dict[str, Any]]) -> Any:
    """A Spark DataFrame of the payers' slots of one query, read from its debit blocks in the
    cluster (built lazily: only a plan that needs the payers' records runs it)."""
    rows = [(os.path.join(root, b["file"]), int(b["key"]), int(b["lo"]), int(b["hi"]),
             int(b["cost"])) for b in blocks]
    if not rows:
        return session.createDataFrame([], "slot long")
    src = session.createDataFrame(rows, "file string, key int, lo long, hi long, cost long")

    def expand(batches: Any) -> Any:
        import pyarrow as pa

        cache: dict[str, Any] = {}
        for b in batches:
            for r in b.to_pylist():
                slots, _ = _load_block(cache, r)
                yield pa.RecordBatch.from_arrays([pa.array(slots, pa.int64())], ["slot"])

    return src.mapInArrow(expand, "slot long")
