"""The decision at arrival: whether a query is refused or answered, and what it is charged,
from the analyst's ledger and the plan only.

Each analyst's lane holds a :class:`Decider`, in a process of its own
(:mod:`dprivacy.service.deciders`): it parses and checks the analyst's requests, bounds their
work, decides them and answers the analyst's schema and budget requests, so that none of this
work shares an interpreter with the service's event loop, which releases every analyst's
answers. The decider: the plan is run on *empty* shadow copies of the
sources (:class:`~dprivacy.service.sources.Shadows`), but with the analyst's PINQ tables bound
to their durable budgets in the SQLite ledger. The tables' own code therefore makes every
check, every refusal and every PINQ charge exactly as on the real sources (a PINQ charge
``s·ε`` depends on the plan's transformations, never on the rows; the same plan prefixes share
a partition's max-agent and an ``as_pinq`` table's own budget, as in one Python session), and
it commits the charge before the real answer can be released. The noisy answer it computes on
the empty tables is the query's *default answer* (pure noise, from nobody's data).

The real query runs meanwhile in the analyst's worker process
(:mod:`dprivacy.service.workers`), whose PINQ tables are prepaid. Whatever the worker does,
the status of the response (answered, or refused with the decider's error) and the PINQ
charge are the decider's: an overrun can only replace a real answer by the default one, never
turn a refusal into an answer or the other way round. ProPer charges the people's personal
budgets in the worker (who pays depends on the data by nature, and a ProPer query is never
refused for a budget: the records that cannot pay are left out).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from dprivacy.errors import BudgetExceededError, DPrivacyError, UnsupportedOperationError
from dprivacy.service.config import ServiceConfig
from dprivacy.service.execute import Builder, run_query, schema_of
from dprivacy.service.plan import Plan, parse_plan, parse_table_request
from dprivacy.service.releases import ReleaseInputs
from dprivacy.service.sources import (
    Shadows,
    pinq_budget_kwargs,
    pinq_record,
    refuse_personal,
)
from dprivacy.service.workbound import plan_bound

__all__ = ["Decider", "Decision", "Refused", "refused", "no_source", "status_of"]

#: A refusal as the service answers it: ``("refused", HTTP status, error class, message)``.
Refused = tuple[str, int, str, str]
_PENDING = 16  # plans bounded but not yet decided (their admission is being checked)


def status_of(exc: DPrivacyError) -> int:
    """The HTTP status of a refusal: 409 over budget, 422 an unsupported operation, else 400."""
    if isinstance(exc, BudgetExceededError):
        return 409
    if isinstance(exc, UnsupportedOperationError) and not isinstance(exc, ValueError):
        return 422
    return 400


def refused(exc: DPrivacyError, status: int | None = None) -> Refused:
    """The refusal answering ``exc`` (its status from :func:`status_of` unless given)."""
    return ("refused", status_of(exc) if status is None else status, type(exc).__name__,
            str(exc))


def no_source(name: str) -> Refused:
    """The one answer for a source that does not exist or that the analyst may not use."""
    return ("refused", 404, "LookupError", f"no source {name[:64]!r}")

log = logging.getLogger("dprivacy.service")


class Decision:
    """A query's decision: ``error`` (the refusal to answer) or ``value`` (its default answer,
    released if the real one is not there at the deadline)."""

    def __init__(self, value: Any = None, error: DPrivacyError | None = None) -> None:
        self.value, self.error = value, error


class Decider:
    """One analyst's decisions and public answers (built and used in the analyst's decider
    process: the SQLite connection belongs to it). The methods named in :data:`OPS` are what
    the service asks it; each returns a plain tuple."""

    def __init__(self, cfg: ServiceConfig, analyst: str, schemas: dict[str, Any],
                 releases: dict[str, ReleaseInputs]) -> None:
        from dprivacy.tables import Ledger, Queryable

        self.cfg, self.analyst = cfg, analyst
        self.shadows = Shadows(cfg, schemas, releases)
        self.ledger = Ledger(cfg.state_dir / "pinq.sqlite")
        self.me = me = next(a for a in cfg.analysts if a.name == analyst)
        self.pending: OrderedDict[int, Plan] = OrderedDict()
        self._token = 0
        self.pinq = {s.name: Queryable(self.shadows.empty[s.name],
                                       **pinq_budget_kwargs(s.notion, s.budget),
                                       ledger=self.ledger, source=pinq_record(s.name, analyst),
                                       backend="duckdb")
                     for s in cfg.sources if s.kind == "pinq" and me.may_use(s.name)}
        self.builder = Builder(self.table, OrderedDict(), {}, cfg.max_as_pinq)

    def table(self, source: str) -> Any:
        """The analyst's base table of ``source``: empty, with the real PINQ budget."""
        hit = self.pinq.get(source)
        return hit if hit is not None else self.shadows.table(source)

    def decide(self, plan: Plan) -> Decision:
        """Run ``plan`` on the empty tables: a refusal, or the charged default answer."""
        try:
            t = self.builder.table(plan.table)
            assert plan.query is not None
            return Decision(value=run_query(t, plan.query,
                                            self.shadows.releases.get(plan.source)))
        except DPrivacyError as exc:
            return Decision(error=exc)
        except Exception as exc:  # noqa: BLE001 - on empty tables: depends on the plan only
            log.warning("the default answer failed (%s): answered None", type(exc).__name__)
            return Decision(value=None)

    # ---------------------------------------------------------------- the service's requests
    def _parse(self, raw: bytes, parse: Callable[[bytes, ServiceConfig], Plan]
               ) -> Plan | Refused:
        try:
            plan = parse(raw, self.cfg)
        except LookupError as exc:
            return no_source(str(exc.args[0]))
        except DPrivacyError as exc:
            return refused(exc, 400)
        for n in sorted(plan.sources):
            if not self.me.may_use(n):
                return no_source(n)
        return plan

    def bound(self, raw: bytes) -> tuple[Any, ...]:
        """A query request's checks and static work bound: ``("ok", token, bound, sources,
        release)`` (``token`` names the plan for :meth:`decide_token`) or a refusal."""
        plan = self._parse(raw, parse_plan)
        if isinstance(plan, tuple):
            return plan
        assert plan.query is not None
        try:
            b = plan_bound(plan.table, plan.query, self.cfg)
        except DPrivacyError as exc:
            return refused(exc)
        self._token += 1
        self.pending[self._token] = plan
        while len(self.pending) > _PENDING:  # refused at admission: never decided
            self.pending.popitem(last=False)
        return ("ok", self._token, b, tuple(sorted(plan.sources)), plan.query["op"] == "release")

    def decide_token(self, token: int) -> tuple[Any, ...]:
        """Decide the admitted plan ``token``: ``("value", default answer)`` or a refusal."""
        plan = self.pending.pop(token)
        d = self.decide(plan)
        return ("value", d.value) if d.error is None else refused(d.error)

    def schema(self, raw: bytes | None, source: str | None = None) -> tuple[Any, ...]:
        """``("ok", schema)`` of a ``{"v", "table"}`` request, or of ``source`` itself (the
        service checked that the analyst may use it); or a refusal."""
        if source is not None:
            plan: Plan | Refused = Plan({"source": source, "steps": []}, None,
                                        frozenset({source}))
        else:
            assert raw is not None
            plan = self._parse(raw, parse_table_request)
        if isinstance(plan, tuple):
            return plan
        try:  # computed on the empty shadows: depends on the plan only
            return ("ok", schema_of(Builder(self.shadows.table).table(plan.table)))
        except DPrivacyError as exc:
            return refused(exc)
        except Exception as exc:  # noqa: BLE001
            return ("refused", 400, "ValidationError",
                    f"the plan cannot be built: {type(exc).__name__}")

    def budget(self, raw: bytes, busy: float) -> tuple[Any, ...]:
        """``("ok", remaining)`` of a ``{"v", "table"}`` request; ``("busy", seconds)`` if the
        analyst's lane was taken when it arrived (``busy`` > 0: the budget moves when a query is
        decided, not before its deadline); or a refusal."""
        plan = self._parse(raw, parse_table_request)
        if isinstance(plan, tuple):
            return plan
        if busy > 0:
            return ("busy", busy)
        try:
            return ("ok", self._remaining(plan))
        except DPrivacyError as exc:
            return refused(exc)

    def _remaining(self, plan: Plan) -> Any:
        steps = plan.table["steps"]
        k = max((i for i, s in enumerate(steps) if s["op"] == "as_pinq"), default=None)
        if k is not None:
            return self._as_pinq_budget(plan, k)
        names: list[str] = []

        def walk(t: dict[str, Any]) -> None:
            if "source" in t:
                if t["source"] not in names:
                    names.append(t["source"])
                for s in t["steps"]:
                    if isinstance(s.get("other"), dict):
                        walk(s["other"])

        walk(plan.table)
        vals = []
        for n in names:
            src = self.cfg.source(n)
            assert src is not None
            if src.kind != "pinq":
                raise refuse_personal()
            rid = self.ledger.named_record(
                f"pinq:{pinq_record(n, self.analyst, src.notion)}", None)
            vals.append(float(self.ledger.remaining([rid])[0]))
        return vals[0] if len(vals) == 1 else vals

    def _as_pinq_budget(self, plan: Plan, k: int) -> float:
        """The remaining budget of an ``as_pinq`` table: its own PINQ budget ε (what the
        analyst's queries on it spent; never the people's budgets)."""
        from dprivacy.tables.params import eps_arg

        steps = plan.table["steps"]
        src = self.cfg.source(plan.source)
        if src is None or src.kind != "proper":
            raise UnsupportedOperationError("as_pinq is a ProPer operation; this table is PINQ")
        if any(isinstance(s.get("other"), dict) and "source" in s["other"] for s in steps[k:]):
            raise UnsupportedOperationError("the remaining budget of a table that mixes an "
                                            "as_pinq table with another source is not available")
        key = json.dumps([plan.source, steps[: k + 1]], sort_keys=True)
        left = self.pinned_budget(key)
        if left is None:  # not queried yet: nobody was charged, the whole ε is left
            return eps_arg(steps[k]["eps"])
        return left

    def warm_up(self) -> None:
        """A count and a grouped count on every empty shadow source (charging nobody): the
        first query of a process loads and compiles code paths that later ones reuse."""
        for s in self.cfg.sources:
            try:
                t = Builder(self.shadows.table).table({"source": s.name, "steps": []})
                run_query(t, {"op": "noisy_count", "eps": 1.0})
                col = next(iter(t.columns))
                run_query(t, {"op": "grouped", "eps": 1.0, "by": col, "keys": [0, 1],
                              "aggs": {"n": {"how": "count"}}})
            except Exception:  # noqa: BLE001 - a warm-up only
                pass

    def pinned_budget(self, key: str) -> float | None:
        """The remaining own budget of the analyst's ``as_pinq`` table at plan prefix ``key``
        (None if no query has read it yet)."""
        assert self.builder.pinned is not None
        hit = self.builder.pinned.get(key)
        return None if hit is None else float(hit.remaining_budget())
