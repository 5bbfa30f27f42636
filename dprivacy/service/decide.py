"""The decision at arrival: whether a query is refused or answered, and what it is charged,
from the analyst's ledger and the plan only.

Each analyst's lane holds a :class:`Decider`: the plan is run on *empty* shadow copies of the
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

import logging
from collections import OrderedDict
from typing import Any

from dprivacy.errors import DPrivacyError
from dprivacy.service.config import ServiceConfig
from dprivacy.service.execute import Builder, run_query
from dprivacy.service.plan import Plan
from dprivacy.service.releases import ReleaseInputs
from dprivacy.service.sources import Shadows, pinq_budget_kwargs, pinq_record

__all__ = ["Decider", "Decision"]

log = logging.getLogger("dprivacy.service")


class Decision:
    """A query's decision: ``error`` (the refusal to answer) or ``value`` (its default answer,
    released if the real one is not there at the deadline)."""

    def __init__(self, value: Any = None, error: DPrivacyError | None = None) -> None:
        self.value, self.error = value, error


class Decider:
    """One analyst's decisions (built and used in the analyst's lane thread: the SQLite
    connection belongs to it)."""

    def __init__(self, cfg: ServiceConfig, analyst: str, schemas: dict[str, Any],
                 releases: dict[str, ReleaseInputs]) -> None:
        from dprivacy.tables import Ledger, Queryable

        self.shadows = Shadows(cfg, schemas, releases)
        self.ledger = Ledger(cfg.state_dir / "pinq.sqlite")
        me = next(a for a in cfg.analysts if a.name == analyst)
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

    def pinned_budget(self, key: str) -> float | None:
        """The remaining own budget of the analyst's ``as_pinq`` table at plan prefix ``key``
        (None if no query has read it yet)."""
        assert self.builder.pinned is not None
        hit = self.builder.pinned.get(key)
        return None if hit is None else float(hit.remaining_budget())
