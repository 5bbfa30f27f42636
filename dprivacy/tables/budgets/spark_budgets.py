"""ProPer's personal budgets kept in the cluster: a versioned Parquet table charged by Spark.

:class:`SparkBudgetTable` implements :class:`dprivacy.tables.relations.protocol.PersonalBudgets`
for ProPer tables on Spark without holding budgets (or ids) on the driver. The budgets are one
row per person ``(id, initial, remaining, paid)`` in integer units of 10⁻⁹ ε, stored as a
Parquet dataset under a directory that the driver and the executors share (a local disk for a
local session, a network filesystem on a cluster), in numbered versions
(:mod:`dprivacy.tables.budgets.version_log`).

**One query** (ProPer, POPL'15 Fig. 3): ε × (records of each source in the queried relation),
or Σ element costs, computed by Spark in one GROUP BY over the relation's plan; then ONE
set-based statement, the current version LEFT JOIN those costs, writes the next version: a
person whose remaining budget covers the cost is debited and marked ``paid``, everybody else is
copied unchanged. The version's files are synced and the version is published by an atomic,
exclusive commit; only then is the relation restricted to the payers' records (a semi-join
with the new version's ``paid`` rows) and ⊥ records, on which the caller computes the
aggregate. The number of eligible records (a count's answer) and the number of payers are
observed during the charge's own pass (Spark observations), so a count needs no second scan.
The statements, and the rows written, are the same whoever can pay: every person's row is
rewritten by every query.

**Crash rule**: no answer leaves before its charge is committed, and a process killed at any
point leaves every budget either charged (the commit exists) or not (the previous version is
current). Old versions are deleted after each commit, keeping the newest ``keep_versions``
(an eligible relation, e.g. the table returned by ``as_pinq``, reads its version's ``paid``
rows, so it stays usable for ``keep_versions - 1`` further charges of the same store).

Registration (:meth:`SparkBudgetTable.attach`) needs a stable ``id_column``; new ids are
appended to the table in one statement (a union, no rewrite of the other rows' budgets
computed on the driver).

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
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy.errors import UnknownRecordError, ValidationError
from dprivacy.tables.budgets.ledger import (
    _MAX_UNITS,
    _PER_EPS,
    charge_units,
    keep_payers,
    pin_payers,
    scalar_units,
)
from dprivacy.tables.budgets.version_log import StoreLockTimeout, VersionLog
from dprivacy.tables.relations.engine.ibis_plan import PID

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["SparkBudgetTable", "StoreLockTimeout"]

_SCHEMA = "id BIGINT, initial BIGINT, remaining BIGINT, paid BOOLEAN"


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
    """

    def __init__(self, path: str | os.PathLike, *, session: Any = None, keep_versions: int = 3,
                 timeout: float = 60.0, compression: str = "zstd") -> None:
        if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 2:
            raise ValidationError(f"keep_versions = {keep_versions!r}: an integer >= 2")
        self.log = VersionLog(path, timeout=timeout)
        self.path = self.log.root
        self.keep_versions = keep_versions
        self.compression = str(compression)
        self._session = session
        self.last_query_id: int | None = None

    # ------------------------------------------------------------------ plumbing
    def _spark(self) -> Any:
        if self._session is not None:
            return self._session
        from pyspark.sql import SparkSession

        from dprivacy.tables.relations.engine.spark import local_session

        return SparkSession.getActiveSession() or local_session()

    def _frame(self, spark: Any, meta: dict[str, Any] | None) -> Any:
        """The budgets of a commit (an empty table before the first one)."""
        if meta is None:
            return spark.createDataFrame([], _SCHEMA)
        return spark.read.schema(_SCHEMA).parquet(self.log.data_path(meta))

    def _write(self, k: int, frame: Any) -> str:
        """Write ``frame`` as the candidate version k + 1 and sync its files; returns its
        directory (not yet current)."""
        out = self.log.new_dir(k + 1)
        frame.write.option("compression", self.compression).parquet(out)
        self.log.sync_dir(out)
        return out

    def _publish(self, k: int, out: str, info: dict[str, Any]) -> None:
        """Make ``out`` version k + 1 (the commit), then delete versions beyond
        ``keep_versions``. Inside the log's lock."""
        if not self.log.publish(k + 1, {**info, "data": os.path.basename(out)}):
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
                            F.count(F.when(F.col("known").isNull(), 1)).alias("new")).first()
            if st["dup"] is not None and (st["dup"] > 1 or st["nulls"] > 0 or st["lo"] < 0):
                raise ValidationError("the id column must hold distinct non-negative integers "
                                      "(one stable identity per individual)")
            if not st["new"]:
                return
            fresh = joined.filter(F.col("known").isNull()).select(
                "id", F.col("u").alias("initial"), F.col("u").alias("remaining"),
                F.lit(False).alias("paid"))
            old = self._frame(spark, meta).select("id", "initial", "remaining",
                                                  F.lit(False).alias("paid"))
            out = self._write(k, old.unionByName(fresh))
            self._publish(k, out, {"kind": "register", "added": int(st["new"]),
                                   "next_query": int((meta or {}).get("next_query", 1))})

    # ------------------------------------------------------------------ the Query rule
    def pay(self, rel: IbisRelation, eps: float, element_costs: ElementCosts | None = None,
            *, label: str | None = None) -> IbisRelation:
        """Charge ``rel``'s sources for an ε-query, commit, return the payers' records (and ⊥).

        Never raises because of the data or the budgets (a cost too large to store saturates:
        that source cannot pay)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        units = charge_units(rel, eps, "spark", "SparkBudgetTable")
        eng: Any = rel.engine
        spark = eng.session
        asked = _costs(rel, eng.run(rel.table), units, element_costs)
        with self.log.locked():
            k, meta = self.log.latest()
            # a FULL join keeps the group of the ⊥ records (id -1), counted by the observation
            # and then dropped with the unknown ids; a person not asked has c NULL
            j = self._frame(spark, meta).join(asked, "id", "full")
            ok = (F.col("initial").isNotNull() & F.col("c").isNotNull()
                  & (F.col("remaining") >= F.col("c")))
            j = j.withColumn("ok", ok)
            charged = Observation()
            j = j.observe(charged, F.count(F.when(F.col("ok"), 1)).alias("payers"),
                          F.sum(F.when(F.col("ok"), F.col("c"))).alias("total"),
                          F.sum(F.when(F.col("ok"), F.col("n"))).alias("records"),
                          F.sum(F.when(F.col("id") == -1, F.col("n"))).alias("bottom"))
            new = j.filter(F.col("initial").isNotNull()).select(
                "id", "initial", F.when(F.col("ok"), F.col("remaining") - F.col("c"))
                .otherwise(F.col("remaining")).alias("remaining"), F.col("ok").alias("paid"))
            qid = int((meta or {}).get("next_query", 1))
            out = self._write(k, new)  # the stats below are this pass's observations
            got = charged.get
            self._publish(k, out, {"kind": "charge", "query": qid, "label": label,
                                   "payers": int(got.get("payers") or 0),
                                   "total": int(got.get("total") or 0), "next_query": qid + 1})
            self.last_query_id = qid
        known = int(got.get("bottom") or 0) + int(got.get("records") or 0)
        return keep_payers(rel, spark.read.schema(_SCHEMA).parquet(out).filter(F.col("paid"))
                           .select("id"), "id", known if element_costs is None else None)

    def pin(self, rel: IbisRelation) -> None:
        """Keep the payers of ``rel`` (a relation :meth:`pay` returned) in Spark, so that it
        stays usable after later charges delete this charge's version."""
        pin_payers(rel)

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
            rows = (self._frame(spark, meta).join(F.broadcast(want), "id")
                    .select("id", what).collect())
        got = {int(r[0]): int(r[1]) for r in rows}
        if any(int(x) not in got for x in a):
            raise UnknownRecordError("unknown record id: it was never registered")
        return np.array([got[int(x)] for x in a], dtype=np.int64) / _PER_EPS

    def frame(self) -> Any:
        """The current budgets as a Spark DataFrame ``(id, initial, remaining)`` in units of
        10⁻⁹ ε, empty before the first registration (the curator's view: aggregate it in the
        cluster; never serve it)."""
        spark = self._spark()
        _, meta = self.log.latest()
        return self._frame(spark, meta).select("id", "initial", "remaining")

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
        """Bytes of the current version's budget files (0 before any registration)."""
        _, meta = self.log.latest()
        return 0 if meta is None else self.log.bytes_of(meta)

    def close(self) -> None:
        """Release the lock file descriptor."""
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
