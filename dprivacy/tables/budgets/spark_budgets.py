"""ProPer's personal budgets kept in the cluster: a bucketed Parquet table charged by Spark.

:class:`SparkBudgetTable` implements :class:`dprivacy.tables.relations.protocol.PersonalBudgets`
for ProPer tables on Spark without holding budgets (or ids) on the driver. The budgets live
under a directory that the driver and the executors share (a local disk for a local session, a
network filesystem on a cluster), in numbered versions (:mod:`dprivacy.tables.budgets.version_log`)
made of two parts:

* the **base**: one row per person ``(id, initial, remaining)`` in integer units of 10⁻⁹ ε,
  a Parquet dataset partitioned into ``B`` buckets by ``b = pmod(hash(id), B)`` (Spark's own
  hash partitioning function of the id; ``B`` chosen from the number of people at the first
  registration, or given);
* the **debits**: one small Parquet dataset per query since the last fold,
  ``(id, b, debit, paid)`` for every registered person the query asked (``debit`` 0 and
  ``paid`` false for those who could not pay).

A person's remaining budget is the base's minus the sum of their unfolded debits.

**One query** (ProPer, POPL'15 Fig. 3): ε × (records of each source in the queried relation),
or Σ element costs, computed by Spark in one GROUP BY over the relation's plan; the asked people
joined, on ``(b, id)``, with their base rows and their unfolded debits (a person whose current
remaining budget covers the cost pays); ONE
statement writes the query's debits (one row per person asked, whoever can pay). Its files are
synced and the version naming them is published by an atomic, exclusive commit; only then is the
relation restricted to the payers' records (a semi-join with the debits' ``paid`` rows) and ⊥
records, on which the caller computes the aggregate. The number of eligible records (a count's
answer) and the number of payers are observed during the charge's own pass (Spark observations),
so a count needs no second scan. No query rewrites the base.

**Folding**: every ``fold_every`` queries the unfolded debits are folded into a new base (the
base LEFT JOIN the summed debits, written bucket by bucket), by default in a background thread
after the query that triggered it has committed, so no answer waits for it. The fold writes
outside the store's lock and publishes a version whose base is the folded one and whose debits
are those committed meanwhile; a fold that finds another fold published first gives up.
:meth:`SparkBudgetTable.fold` runs one now.

**Crash rule**: no answer leaves before its charge is committed, and a process killed at any
point leaves every budget either charged (the commit naming its debits exists) or not (the
previous version is current); a fold killed before its commit leaves the debits unfolded (and
counted once), and after it leaves them folded (and no longer named). Directories no kept
version names are deleted after each commit, keeping the newest ``keep_versions`` versions (an
eligible relation, e.g. the table returned by ``as_pinq``, reads its query's debits, so it stays
usable for ``keep_versions - 1`` further commits of the same store).

Registration (:meth:`SparkBudgetTable.attach`) needs a stable ``id_column``; new ids are
appended to the base in one statement (a union, no budget computed on the driver).

Examples:
    A ProPer table on Spark whose budgets live under ``warehouse/budgets``::

        from dprivacy.tables import ProPerTable
        budgets = SparkBudgetTable("warehouse/budgets")
        people = ProPerTable(spark.read.parquet("people.parquet"), budget=1.0,
                             ledger=budgets, id_column="pid")
        people.where(_.age > 17).noisy_count(0.1)
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import _MAX_UNITS, _PER_EPS, scalar_units
from dprivacy.tables.budgets.version_log import StoreLockTimeout, VersionLog
from dprivacy.tables.relations.engine.ibis_plan import PID

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["SparkBudgetTable", "StoreLockTimeout"]

_BASE = "id BIGINT, initial BIGINT, remaining BIGINT, b INT"
_DEBITS = "id BIGINT, b INT, debit BIGINT, paid BOOLEAN"
#: people per bucket aimed at when the number of buckets is chosen from the registration
_PER_BUCKET = 2_000_000
_MAX_BUCKETS = 4096
#: the commits' name for a base partitioned into buckets (older stores: one row per person, with
#: a ``paid`` column, read as one bucket and rewritten bucketed by the next fold or registration)
_LAYOUT = "bucketed-debits"


def _layout(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of a commit describing its base, carried over by a charge."""
    if meta is None:
        return {"data": None}
    return {k: meta[k] for k in ("data", "buckets", "layout") if k in meta}


class SparkBudgetTable:
    """Personal budgets of ProPer tables on Spark, held in the cluster (see the module doc).

    Parameters:
        path: the store's directory, shared by the driver and the executors (created if
            missing; durable, shared by processes).
        session: the SparkSession for the curator's reads (charges use the session of the
            relation they charge); None: the active session.
        keep_versions: versions kept after each commit (>= 2).
        timeout: seconds to wait for other processes' lock on the store.
        compression: the Parquet codec of the budget files.
        buckets: number of id buckets of the base; None: chosen at the first registration
            (about two million people per bucket). Fixed once the store holds people.
        fold_every: fold the debits into the base once this many queries are unfolded (>= 1).
        fold_in_background: fold in a background thread of this process (True), or in the
            query's own call after its commit (False; for tests and batch jobs).
    """

    def __init__(self, path: str | os.PathLike, *, session: Any = None, keep_versions: int = 3,
                 timeout: float = 60.0, compression: str = "zstd", buckets: int | None = None,
                 fold_every: int = 8, fold_in_background: bool = True) -> None:
        if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 2:
            raise ValidationError(f"keep_versions = {keep_versions!r}: an integer >= 2")
        if buckets is not None and (isinstance(buckets, bool) or not isinstance(buckets, int)
                                    or not 1 <= buckets <= _MAX_BUCKETS):
            raise ValidationError(f"buckets = {buckets!r}: None or an integer in 1..{_MAX_BUCKETS}")
        if isinstance(fold_every, bool) or not isinstance(fold_every, int) or fold_every < 1:
            raise ValidationError(f"fold_every = {fold_every!r}: an integer >= 1")
        self.log = VersionLog(path, timeout=timeout)
        self.path = self.log.root
        self.keep_versions = keep_versions
        self.compression = str(compression)
        self.buckets = buckets
        self.fold_every = fold_every
        self.fold_in_background = bool(fold_in_background)
        self._session = session
        self._folder: threading.Thread | None = None
        self.fold_error: BaseException | None = None
        self.last_query_id: int | None = None

    # ------------------------------------------------------------------ plumbing
    def _spark(self) -> Any:
        if self._session is not None:
            return self._session
        from pyspark.sql import SparkSession

        from dprivacy.tables.relations.engine.spark import local_session

        return SparkSession.getActiveSession() or local_session()

    def _nbuckets(self, meta: dict[str, Any] | None) -> int:
        if meta is not None and meta.get("data") is not None:
            return int(meta.get("buckets", 1))
        return self.buckets or 1

    @staticmethod
    def _bucket(col: Any, nb: int) -> Any:
        from pyspark.sql import functions as F

        return F.pmod(F.hash(col), F.lit(int(nb))).cast("int")

    def _frame(self, spark: Any, meta: dict[str, Any] | None) -> Any:
        """The base of a commit ``(id, initial, remaining, b)`` (empty before the first one)."""
        from pyspark.sql import functions as F

        if meta is None or meta.get("data") is None:
            return spark.createDataFrame([], _BASE)
        if meta.get("layout") != _LAYOUT:  # a store written before the buckets: one bucket
            old = spark.read.schema("id BIGINT, initial BIGINT, remaining BIGINT, paid BOOLEAN"
                                    ).parquet(self.log.data_path(meta))
            return old.select("id", "initial", "remaining",
                              self._bucket(F.col("id"), 1).alias("b"))
        return spark.read.schema(_BASE).parquet(self.log.data_path(meta))

    def _debits(self, spark: Any, meta: dict[str, Any] | None) -> Any:
        """All unfolded debits of a commit ``(id, b, debit, paid)`` (possibly empty)."""
        names = list((meta or {}).get("deltas", ()))
        if not names:
            return spark.createDataFrame([], _DEBITS)
        return spark.read.schema(_DEBITS).parquet(*[os.path.join(self.path, n) for n in names])

    def _current(self, spark: Any, meta: dict[str, Any] | None) -> Any:
        """``(id, b, initial, remaining)`` with the unfolded debits subtracted: the base LEFT
        JOIN the debits summed per person, on (b, id)."""
        from pyspark.sql import functions as F

        d = self._debits(spark, meta).groupBy("b", "id").agg(F.sum("debit").alias("d"))
        j = self._frame(spark, meta).join(d, ["b", "id"], "left")
        return j.select("id", "b", "initial",
                        (F.col("remaining") - F.coalesce(F.col("d"), F.lit(0))).alias("remaining"))

    def _write(self, k: int, frame: Any) -> str:
        """Write ``frame`` (a query's debits) as data of the candidate version k + 1 and sync
        its files; returns its directory (not yet named by any commit)."""
        out = self.log.new_dir(k + 1)
        frame.write.option("compression", self.compression).parquet(out)
        self.log.sync_dir(out)
        return out

    def _write_base(self, out: str, frame: Any, nb: int) -> None:
        """Write a base ``(id, initial, remaining, b)`` partitioned by bucket, and sync it."""
        (frame.repartition(nb, "b").sortWithinPartitions("b", "id").write
         .option("compression", self.compression).partitionBy("b").parquet(out))
        self.log.sync_dir(out)

    def _publish(self, k: int, meta: dict[str, Any]) -> None:
        """Make ``meta`` version k + 1 (the commit), then delete what no kept version names.
        Inside the log's lock."""
        if not self.log.publish(k + 1, meta):
            raise StoreLockTimeout(f"version {k + 1} of {self.path} was published by another "
                                   "writer holding no lock; nothing was charged")
        self.log.collect(self.keep_versions)

    # ------------------------------------------------------------------ registration
    def attach(self, rel: IbisRelation, budget: float | str, *, id_column: str | None
               ) -> tuple[IbisRelation, SparkBudgetTable]:
        """Register ``rel``'s individuals (ids from ``id_column``; known ids keep their stored
        budget, new ones get ``budget``, a number or a column name); return the relation
        carrying their ids, and this store."""
        import ibis

        if rel.backend != "spark":
            raise ValidationError(f"a SparkBudgetTable charges Spark relations; this one lives in "
                                  f"{rel.backend!r} (use a BudgetTable there)")
        if id_column is None:
            raise ValidationError("a SparkBudgetTable needs id_column= (a column of stable, "
                                  "distinct non-negative integer person ids)")
        if id_column not in rel.columns:
            raise ValidationError(f"id_column {id_column!r} is not a column")
        t = rel.table
        if isinstance(budget, str):
            if budget not in rel.columns:
                raise ValidationError(f"budget column {budget!r} is not a column")
            b = t[budget].try_cast("float64")
        else:
            bval = float(budget)
            if not np.isfinite(bval) or bval < 0:
                raise ValidationError(f"budget = {budget!r}: a finite number >= 0")
            b = ibis.literal(bval, "float64")
        with_ids = rel.with_table(t.mutate(**{PID: t[id_column].try_cast("int64")}), unique=True)
        tt = with_ids.table
        self.register(rel.engine.run(tt.select(id=tt[PID], budget=b)))  # type: ignore[attr-defined]
        return with_ids, self

    def register(self, ids_budgets: Any) -> None:
        """Add sources from a Spark DataFrame with columns ``id`` (integers) and ``budget``
        (floats): known ids keep their stored budget. Ids must be distinct and non-negative
        (checked in the cluster, before anything is written)."""
        from pyspark.sql import functions as F

        spark = ids_budgets.sparkSession
        b = F.col("budget").cast("double")
        u = F.floor(b * _PER_EPS + 1e-3).cast("double")
        units = (F.when(b.isNull() | F.isnan(b) | (u < 0), F.lit(0))
                 .when(u >= float(_MAX_UNITS), F.lit(_MAX_UNITS))
                 .otherwise(u.cast("bigint")))
        src = ids_budgets.select(F.col("id").cast("bigint").alias("id"), units.alias("u"))
        with self.log.locked():
            k, meta = self.log.latest()
            base = self._frame(spark, meta).select("id", F.lit(True).alias("known"))
            per_id = src.groupBy("id").agg(F.count(F.lit(1)).alias("m"), F.max("u").alias("u"))
            joined = per_id.join(base, "id", "left")
            st = joined.agg(F.max("m").alias("dup"), F.min("id").alias("lo"),
                            F.count(F.when(F.col("id").isNull(), 1)).alias("nulls"),
                            F.count(F.when(F.col("known").isNull(), 1)).alias("new"),
                            F.count(F.lit(1)).alias("all")).first()
            if st["dup"] is not None and (st["dup"] > 1 or st["nulls"] > 0 or st["lo"] < 0):
                raise ValidationError("the id column must hold distinct non-negative integers "
                                      "(one stable identity per individual)")
            if not st["new"]:
                return
            if meta is not None and meta.get("data") is not None:
                nb = self._nbuckets(meta)
            else:
                nb = self.buckets or min(_MAX_BUCKETS, max(1, -(-int(st["all"]) // _PER_BUCKET)))
            fresh = joined.filter(F.col("known").isNull()).select(
                "id", F.col("u").alias("initial"), F.col("u").alias("remaining"),
                self._bucket(F.col("id"), nb).alias("b"))
            old = self._frame(spark, meta).select("id", "initial", "remaining", "b")
            out = self.log.new_dir(k + 1)
            self._write_base(out, old.unionByName(fresh), nb)
            self._publish(k, {"kind": "register", "added": int(st["new"]),
                              "data": os.path.basename(out), "buckets": nb, "layout": _LAYOUT,
                              "deltas": list((meta or {}).get("deltas", ())),
                              "next_query": int((meta or {}).get("next_query", 1))})

    # ------------------------------------------------------------------ the Query rule
    def pay(self, rel: IbisRelation, eps: float, element_costs: ElementCosts | None = None,
            *, label: str | None = None) -> IbisRelation:
        """Charge ``rel``'s sources for an ε-query, commit, return the payers' records (and ⊥).

        Never raises because of the data or the budgets (a cost too large to store saturates:
        that source cannot pay)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if rel.backend != "spark":
            raise ValidationError(f"a SparkBudgetTable charges Spark relations, not {rel.backend!r}")
        eng: Any = rel.engine
        spark = eng.session
        units = scalar_units(float(eps))
        asked = _costs(rel, eng.run(rel.table), units, element_costs)
        with self.log.locked():
            k, meta = self.log.latest()
            nb = self._nbuckets(meta)
            asked_b = asked.withColumn("b", self._bucket(F.col("id"), nb))
            # the ⊥ records' group (id -1) stays, counted by the observation, then dropped with
            # the unknown ids
            j = asked_b.join(self._current(spark, meta), ["b", "id"], "left")
            ok = (F.col("initial").isNotNull() & F.col("c").isNotNull()
                  & (F.col("remaining") >= F.col("c")))
            j = j.withColumn("ok", ok)
            charged = Observation()
            j = j.observe(charged, F.count(F.when(F.col("ok"), 1)).alias("payers"),
                          F.sum(F.when(F.col("ok"), F.col("c"))).alias("total"),
                          F.sum(F.when(F.col("ok"), F.col("n"))).alias("records"),
                          F.sum(F.when(F.col("id") == -1, F.col("n"))).alias("bottom"))
            debits = j.filter(F.col("initial").isNotNull()).select(
                "id", "b", F.when(F.col("ok"), F.col("c")).otherwise(F.lit(0)).alias("debit"),
                F.col("ok").alias("paid"))
            qid = int((meta or {}).get("next_query", 1))
            out = self._write(k, debits)  # the stats below are this pass's observations
            got = charged.get
            deltas = [*(meta or {}).get("deltas", ()), os.path.basename(out)]
            self._publish(k, {**_layout(meta), "kind": "charge", "query": qid, "label": label,
                              "payers": int(got.get("payers") or 0),
                              "total": int(got.get("total") or 0), "next_query": qid + 1,
                              "deltas": deltas})
            self.last_query_id = qid
            if len(deltas) >= self.fold_every:
                self._fold_later(spark)
        paid = eng.register_dataframe(
            spark.read.schema(_DEBITS).parquet(out).filter(F.col("paid")).select("id"), "paid")
        t = rel.table
        elig = rel.with_table(t.filter((t[PID] == -1) | t[PID].isin(paid["id"])))
        if element_costs is None:
            elig.known_count = int(got.get("bottom") or 0) + int(got.get("records") or 0)
        return elig

    # ------------------------------------------------------------------ folding
    def _fold_later(self, spark: Any) -> None:
        """Start a fold (in the background, or now); inside the log's lock."""
        if not self.fold_in_background:
            self.fold(spark)
            return
        if self._folder is not None and self._folder.is_alive():
            return
        self._folder = threading.Thread(target=self._fold_quietly, args=(spark,),
                                        name=f"dprivacy-fold-{os.path.basename(self.path)}",
                                        daemon=True)
        self._folder.start()

    def _fold_quietly(self, spark: Any) -> None:
        try:
            self.fold(spark)
            self.fold_error = None
        except BaseException as e:  # noqa: BLE001 - kept for the curator; the next fold retries
            self.fold_error = e

    def fold(self, spark: Any = None) -> bool:
        """Fold the unfolded debits into a new base now; False if there were none or another
        fold published first. Writes outside the store's lock; commits inside it."""
        spark = spark or self._spark()
        with self.log.locked():
            k, meta = self.log.latest()
        if meta is None or not meta.get("deltas") or meta.get("data") is None:
            return False
        folded = list(meta["deltas"])
        nb = self._nbuckets(meta)
        with self.log.writing(k + 1) as out:
            cur = self._current(spark, meta)
            self._write_base(out, cur.select("id", "initial", "remaining", "b"), nb)
            with self.log.locked():
                k2, now = self.log.latest()
                if now is None or now.get("data") != meta["data"]:
                    return False  # another fold (or a registration) published first
                rest = [d for d in now.get("deltas", ()) if d not in folded]
                if len(rest) != len(now.get("deltas", ())) - len(folded):
                    return False  # not the debits it read: leave them
                self._publish(k2, {"kind": "fold", "folded": len(folded),
                                   "data": os.path.basename(out), "buckets": nb,
                                   "layout": _LAYOUT, "deltas": rest,
                                   "next_query": int(now.get("next_query", 1))})
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background fold of this object to finish."""
        if self._folder is not None:
            self._folder.join(timeout)

    # ------------------------------------------------------------------ curator's view
    def remaining(self, ids: Any) -> np.ndarray:
        """Remaining budgets (floats) of known ids (the curator's view; never the analyst's)."""
        return self._read(ids, "remaining")

    def initial(self, ids: Any) -> np.ndarray:
        """Initial budgets (floats) of known ids."""
        return self._read(ids, "initial")

    def _read(self, ids: Any, what: str) -> np.ndarray:
        from pyspark.sql import functions as F

        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        spark = self._spark()
        with self.log.locked():
            _, meta = self.log.latest()
            want = spark.createDataFrame([(int(x),) for x in np.unique(a)], "id BIGINT")
            rows = (self._current(spark, meta).join(F.broadcast(want), "id")
                    .select("id", what).collect())
        got = {int(r[0]): int(r[1]) for r in rows}
        if any(int(x) not in got for x in a):
            raise UnknownRecordError("unknown record id: it was never registered")
        return np.array([got[int(x)] for x in a], dtype=np.int64) / _PER_EPS

    def queries(self) -> list[tuple[int, str | None, int, float]]:
        """The committed queries: (number, label, payers, total ε charged), oldest first."""
        out = []
        for k in self.log.numbers():
            m = self.log.read(k)
            if m.get("kind") == "charge":
                out.append((int(m["query"]), m.get("label"), int(m["payers"]),
                            int(m["total"]) / _PER_EPS))
        return out

    def storage_bytes(self) -> int:
        """Bytes of the current version's budget files, base and unfolded debits (0 before any
        registration)."""
        _, meta = self.log.latest()
        return 0 if meta is None else self.log.bytes_of(meta)

    def close(self) -> None:
        """Wait for a background fold, then release the lock file descriptor."""
        self.wait()
        self.log.close()

    def __repr__(self) -> str:
        return f"SparkBudgetTable({self.path!r})"


def _costs(rel: IbisRelation, src: Any, units: int, element_costs: ElementCosts | None) -> Any:
    """Spark DataFrame ``(id, c, n)`` of the relation's records ``src`` in one GROUP BY: each
    source's cost in ledger units (saturated: a cost that does not fit gets the largest storable
    one) and its number of records. Without element costs the ⊥ records (id -1) form a group
    too (its cost is never charged)."""
    from pyspark.sql import functions as F

    big = F.lit(_MAX_UNITS)
    if element_costs is None:
        lim = _MAX_UNITS // max(int(units), 1)
        g = src.groupBy(PID).agg(F.count(F.lit(1)).alias("n"))
        c = F.when(F.col("n") > lim, big).otherwise(F.least(F.col("n"), F.lit(lim)) * int(units))
        return g.select(F.col(PID).alias("id"), c.alias("c"), "n")
    table = element_costs.table[[*element_costs.columns, "cost"]].copy()
    table["cost"] = np.array([float(scalar_units(float(x))) for x in table["cost"]])
    eng: Any = rel.engine
    ct = eng.run(rel.public(table).table.drop(PID))
    mine = src.filter(F.col(PID) >= 0)
    j = mine.join(F.broadcast(ct), [mine[x] == ct[x] for x in element_costs.columns])
    g = j.select(mine[PID], ct["cost"]).groupBy(PID).agg(
        F.ceil(F.sum("cost")).cast("double").alias("s"), F.count(F.lit(1)).alias("n"))
    c = F.when(F.col("s") >= float(_MAX_UNITS), big).otherwise(F.col("s").cast("bigint"))
    return g.select(F.col(PID).alias("id"), c.alias("c"), "n")
