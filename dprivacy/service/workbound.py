"""The static work bound of a plan, and the deadline that follows from it.

Before anything runs or is charged, the service bounds how many rows every step of a plan can
produce on *any* dataset within the owner's caps, from public facts only:

* a source has at most its declared ``max_rows`` (checked when the service opens it: a source
  above its cap is refused, never truncated);
* an inline public table has its own number of rows;
* ``where``, ``select``, ``partition``, ``distinct``, ``skip``, ``exclude``, ``except_``,
  ``intersect`` and ``as_pinq`` never add rows; ``group_by`` gives at most one row per row (one
  for a global aggregate); ``take(n)`` at most ``n``;
* ``select_many(k)`` multiplies by ``k``; ``product`` and ``join_public`` by the public table's
  rows (every record may match every public row); ``concat`` and ``union`` add the two sides;
  ``join(other, bound)`` keeps at most ``bound`` records per key on each side, so it gives at
  most ``min(L·b_other, R·b_self, L·R)`` rows.

The plan's **work** is the sum of these bounds over every intermediate table (each source scan
included), plus the aggregation's reading of the queried table (once for a count, a sum or a
mean; twice for an order statistic, plus the candidates; once per candidate for the exponential
mechanism; a grouped aggregation twice, plus its keys; a release twice, plus the universe's
elements and the workload's queries), plus one more pass for a ProPer charge.
Fan-out compounds, and the cap applies to the plan as a whole: a plan whose work exceeds the
owner's ``max_work_rows`` is refused with one line before any charge, whatever the data.

**Execution cannot exceed the bound.** Each step's output is at most its bound on every dataset
whose sources are within their caps, because the bound is the step's own definition applied to
the cap (a filter cannot add rows; a product with m public rows gives exactly m per row; the
engine's ``select_many`` keeps the first ``k`` elements; the bounded join keeps ``bound``
records per key), and each source is checked against its cap when the service opens it and is
read through a ``LIMIT`` of its cap afterwards (see :mod:`dprivacy.service.sources`).

**The deadline.** The engine's cost of a plan on one CPU is
``C = base_seconds · (1 + steps) + work · row_seconds``: the owner's calibrated fixed cost of a
query and of each step (building and compiling it, registering a public table), and cost per
row of work; ``steps`` counts the steps of every table of the plan. Every step costs its
``base_seconds``, so the largest admissible plan costs
``B = base_seconds · (1 + MAX_TABLES · max_plan_steps) + max_work_rows · row_seconds``
(:func:`capacity_seconds`): the one capacity check is on rows, and the cost in seconds of any
admitted plan is at most ``B``. A query of analyst ``a`` runs alone on the analyst's own worker
process, which is guaranteed a fraction ``f_a`` of one CPU (:mod:`dprivacy.service.shares`),
so it is answered ``max(query_seconds, (C + 2 · P) / f_a + S / f_min)`` seconds after it
arrived (:mod:`dprivacy.service.lanes`), where ``P = body bytes · PARSE_SECONDS_PER_BYTE`` bounds
the parsing of the request's body (its size is capped and public), done once by the analyst's
decider and once by the worker, and ``S`` is the **budget store's allowance** of a plan that
charges personal budgets (``f_min``: the smallest fraction of a CPU any analyst's worker is
guaranteed). The workers of all analysts share each ProPer source's budget store (one file,
one lock): a charge may wait for the commits of every other analyst's worker (each holds the
lock only for its own commit, never for engine work), then catches up with the records they
appended, and reloads the store once if one of them folded its records into a new snapshot.
None of that depends on the data or on what the other analysts asked, only on how many
analysts there are and how many people the store can hold (the source's ``max_rows``):
``S = store_seconds · Σ max_rows · (analysts + RELOAD_COMMITS)`` over the plan's ProPer
sources, with ``store_seconds`` the calibrated cost per person of one commit and of another
worker's catch-up with it, and a reload counted as ``RELOAD_COMMITS`` commits.

**Engines.** A plan reads sources of one engine. Sources with ``engine = "spark"`` have Spark's
own costs and capacity (``[spark]`` ``base_seconds``, ``step_seconds``, ``row_seconds``,
``max_work_rows``; Spark compiles a plan's steps into one job, so a step costs
``step_seconds`` there instead of ``base_seconds``): their plans are bounded, admitted and
given deadlines with those (a worker's Spark jobs run on the analyst's own Spark driver).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.service.config import ServiceConfig
from dprivacy.service.plan import MAX_TABLES
from dprivacy.service.shares import cpu_fraction

__all__ = ["WorkBound", "plan_bound", "capacity_seconds", "deadline_seconds", "cpu_fractions",
           "table_rows",
           "store_allowance", "PARSE_SECONDS_PER_BYTE", "RELOAD_COMMITS"]

#: A reload of a ProPer budget store (after another worker compacted it) counted in commits
#: (measured: about 8 at 10^7 people).
RELOAD_COMMITS = 12

#: The time allowed to parse and check one byte of a request's body (JSON and the plan's
#: checks run at 20-50 MB/s on one core; 10 MB/s leaves the margin of a loaded machine).
PARSE_SECONDS_PER_BYTE = 1e-7


@dataclass(frozen=True)
class WorkBound:
    """The static bound of a plan: ``rows`` of the queried table, the total ``work`` in rows and
    the number of ``steps`` (see the module doc); ``largest`` names the step with the most
    rows."""

    rows: int
    work: int
    steps: int
    largest: str
    engine: str = "duckdb"

    def seconds(self, cfg: ServiceConfig) -> float:
        """The engine's cost ``C`` of the plan in seconds (see the module doc)."""
        base, step, row, _cap = cfg.costs(self.engine)
        return base + step * self.steps + self.work * row


class _Walk:
    def __init__(self, cfg: ServiceConfig) -> None:
        self.cfg = cfg
        self.work = 0
        self.steps = 0
        self.top = (0, "")
        self.sources: set[str] = set()
        self.ops: set[str] = set()

    def note(self, rows: int, where: str) -> int:
        self.work += rows
        if rows > self.top[0]:
            self.top = (rows, where)
        return rows

    def table(self, t: dict[str, Any], what: str) -> int:
        if "public" in t:
            return self.note(len(t["public"]["rows"]), f"{what} (public)")
        src = self.cfg.source(t["source"])
        if src is None:
            raise LookupError(t["source"])
        self.sources.add(src.name)
        rows = self.note(src.max_rows, f"{what} (source {src.name!r})")
        for i, s in enumerate(t["steps"]):
            self.steps += 1
            self.ops.add(s["op"])
            rows = self.note(self.step(rows, s, f"{what}.steps[{i}]"),
                             f"{what}.steps[{i}] ({s['op']})")
        return rows

    def step(self, rows: int, s: dict[str, Any], what: str) -> int:
        op = s["op"]
        if op == "select_many":
            return rows * max(1, int(s["k"]))
        if op in ("product", "join_public"):
            return rows * len(s["public"]["rows"])
        if op == "group_by":
            return max(rows, 1)
        if op == "take":
            return min(rows, max(0, int(s["n"])))
        if op in ("concat", "union", "intersect", "except_", "join"):
            other = self.table(s["other"], f"{what}.other")
            if op in ("concat", "union"):
                return rows + other
            if op == "join":
                b = s["bound"]
                b_self, b_other = (b[0], b[1]) if isinstance(b, list) else (b, b)
                return min(rows * max(1, int(b_other)), other * max(1, int(b_self)),
                           rows * other)
            return rows  # intersect, except_: at most the left side
        # where, select, partition, distinct, skip, exclude, as_pinq: no new rows
        return rows


def table_rows(t: dict[str, Any], cfg: ServiceConfig) -> int:
    """The worst-case rows of the plan table ``t`` (a validated ``{"source", "steps"}``)."""
    return _Walk(cfg).table(t, "table")


def _query_reads(q: dict[str, Any], rows: int) -> int:
    op = q["op"]
    if op in ("noisy_order_statistic", "noisy_median"):
        cands = (q.get("options") or {}).get("candidates")
        return 2 * rows + (len(cands) if isinstance(cands, list) else 1025)
    if op == "exponential_mechanism":
        return rows * max(1, len(q["candidates"]))
    if op == "grouped":  # one GROUP BY, then one answer per public key
        return 2 * rows + len(q["keys"])
    if op == "release":  # the histogram over the universe (F's width), then F's rows
        f = q.get("F") or []
        width = len(f[0]) if f and isinstance(f[0], list) else 1
        return 2 * rows + width + len(f)
    return rows


def plan_bound(table: dict[str, Any], query: dict[str, Any] | None,
               cfg: ServiceConfig) -> WorkBound:
    """The static bound of a validated plan (its table, and its query or None).

    Raises:
        ValidationError: the work exceeds the owner's ``max_work_rows`` (one line, from the plan
            and the configuration only; nothing has been charged or run).
    """
    w = _Walk(cfg)
    rows = w.table(table, "table")
    if query is not None:
        w.note(_query_reads(query, rows), f"query ({query['op']})")
    src = cfg.source(table["source"]) if "source" in table else None
    if src is not None and src.kind == "proper" or any(s["op"] == "as_pinq"
                                                        for s in table.get("steps", [])):
        w.work += rows  # the personal budgets' charge: one more pass over the queried rows
    engine = cfg.engine_of(w.sources)
    if engine == "spark" and "as_pinq" in w.ops:
        raise ValidationError("as_pinq is not served on Spark sources (its table would read a "
                              "version of the personal budgets that later charges remove); "
                              "query the ProPer table itself")
    b = WorkBound(rows, w.work, w.steps, w.top[1], engine)
    cap = cfg.costs(engine)[3]
    if b.work > cap:
        raise ValidationError(
            f"the plan can process up to {b.work:.3g} rows in {b.steps} steps on data within "
            f"the sources' caps (most at {b.largest}: {w.top[0]:.3g} rows), above this "
            f"service's capacity of {cap:.3g} rows per query (max_work_rows)")
    return b


def capacity_seconds(cfg: ServiceConfig, engine: str | None = None) -> float:
    """The engine's cost of the largest plan the service admits (``B`` in the module doc: every
    step counted, up to the most steps a plan may have); for ``engine`` None, the largest over
    the engines of the configured sources."""
    if engine is None:
        return max(capacity_seconds(cfg, e) for e in cfg.engines() | {"duckdb"})
    base, step, row, cap = cfg.costs(engine)
    return base + step * MAX_TABLES * cfg.max_plan_steps + cap * row


def store_allowance(cfg: ServiceConfig, sources: set[str]) -> float:
    """``S``: the most CPU seconds a query over ``sources`` can spend on the ProPer budget
    stores because of the other analysts' workers (module doc; 0 without a ProPer source on
    DuckDB). From the configuration only."""
    people = sum(s.max_rows for s in cfg.sources
                 if s.name in sources and s.kind == "proper" and s.engine != "spark")
    return cfg.store_seconds * people * (len(cfg.analysts) + RELOAD_COMMITS)


def deadline_seconds(cfg: ServiceConfig, analyst: str, bound: WorkBound, sources: set[str],
                     *, release: bool = False, body_bytes: int = 0,
                     fractions: Mapping[str, float] | None = None) -> float:
    """Seconds from a query's arrival to its answer: ``max(query_seconds, (C + 2 · P) / f_a
    + S / f_min)`` with ``P = body_bytes · PARSE_SECONDS_PER_BYTE`` and ``S`` the budget
    store's allowance (see the module doc; ``query_seconds`` is the largest of the plan's
    sources'). ``fractions``: every analyst's ``f`` (:func:`cpu_fractions`), if the caller
    keeps them (the service computes them once, not on its event loop at each query)."""
    f = fractions if fractions is not None else cpu_fractions(cfg)
    floor = cfg.deadline_seconds(sources, release=release)
    parse = 2 * body_bytes * PARSE_SECONDS_PER_BYTE
    store = store_allowance(cfg, sources)
    if store:
        store /= min(f.values())
    return max(floor, (bound.seconds(cfg) + parse) / f[analyst] + store)


def cpu_fractions(cfg: ServiceConfig) -> dict[str, float]:
    """Every analyst's guaranteed CPU fraction ``f`` (:func:`~dprivacy.service.shares.cpu_fraction`)."""
    return {a.name: cpu_fraction(cfg, a.name) for a in cfg.analysts}
