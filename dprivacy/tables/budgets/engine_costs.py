"""Per-source ProPer costs computed in the engine that holds the records (one GROUP BY, no
per-record Python), handed to the budget table as an Arrow table ``(id, c)`` in ledger units.

Costs saturate: a source whose cost would not fit in the ledger's integer range gets the
largest storable cost, which no budget covers (so it simply cannot pay; nothing overflows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ibis
import numpy as np
import pyarrow as pa

from dprivacy.tables.budgets.ledger import _MAX_UNITS, scalar_units
from dprivacy.tables.relations.engine.ibis_plan import PID

if TYPE_CHECKING:
    from dprivacy.tables.relations.engine.relation import IbisRelation
    from dprivacy.tables.relations.protocol import ElementCosts

__all__ = ["unique_ids", "per_source"]


def unique_ids(rel: IbisRelation) -> pa.Table:
    """The ids >= 0 of a relation whose ids are structurally unique (each costs ε once)."""
    t = rel.table
    return rel.engine.arrow(t.filter(t[PID] >= 0).select(id=t[PID]))


def per_source(rel: IbisRelation, units: int, element_costs: ElementCosts | None) -> pa.Table:
    """``(id, c)``: c = units × records of the source, or Σ element-cost units of its records."""
    t = rel.table
    mine = t.filter(t[PID] >= 0)
    big = ibis.literal(_MAX_UNITS, "int64")
    if element_costs is None:
        lim = _MAX_UNITS // max(int(units), 1)
        g = mine.group_by(PID).aggregate(n=lambda x: x.count())
        c = ibis.cases((g.n > lim, big), else_=ibis.least(g.n, lim) * int(units))
        return rel.engine.arrow(g.select(id=g[PID], c=c))
    table = element_costs.table[[*element_costs.columns, "cost"]].copy()
    table["cost"] = np.array([float(scalar_units(float(x))) for x in table["cost"]])
    ct = rel.public(table).table.drop(PID)
    j = mine.join(ct, list(element_costs.columns))
    g = j.group_by(PID).aggregate(s=lambda x: x.cost.sum())
    s = g.s.ceil().cast("float64")
    c = ibis.cases((s >= float(_MAX_UNITS), big), else_=s.cast("int64"))
    return rel.engine.arrow(g.select(id=g[PID], c=c))
