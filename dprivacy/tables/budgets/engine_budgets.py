"""ProPer on an engine: register a relation's individuals in a :class:`BudgetTable` and give the
relation their ids (stable identities from a column, or fresh dense ids drawn from the table).
"""

from __future__ import annotations

import os
from typing import Any

import ibis
import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.tables.budgets.budget_table import BudgetTable
from dprivacy.tables.relations.engine.relation import PID, IbisRelation

__all__ = ["proper_budgets"]


def proper_budgets(rel: IbisRelation, budget: float | str, *,
                   ledger: BudgetTable | str | os.PathLike | None = None,
                   id_column: str | None = None,
                   source: Any = None) -> tuple[IbisRelation, BudgetTable]:
    """Register ``rel``'s individuals in a budget table; return the relation carrying their ids.

    Parameters:
        rel: a relation from :func:`relation_from`.
        budget: every individual's initial budget (a number), or the name of a column holding
            it. Ids already in a durable ``ledger`` keep their stored budget.
        ledger: a :class:`BudgetTable`, the path of its DuckDB file, or None (in memory).
        id_column: the column of stable identities (distinct non-negative integers). Without
            it, fresh ids are drawn from the ledger (and a new run gets new budgets).
        source: the pandas frame or Arrow table ``rel`` was made from, if any: its rows are
            then aligned with the budgets (where-chains are charged from one byte per row,
            see :mod:`~dprivacy.tables.budgets.row_alignment`).

    Returns:
        (the relation with ids, the budget table).
    """
    if isinstance(ledger, BudgetTable):
        budgets = ledger
    elif ledger is None or isinstance(ledger, (str, os.PathLike)):
        budgets = BudgetTable(ledger)
    else:
        raise ValidationError(f"ledger is a {type(ledger).__name__}: the engine backends keep "
                              "budgets in a BudgetTable (or give the path of its DuckDB file)")
    t = rel.table
    if isinstance(budget, str):
        if budget not in rel.columns:
            raise ValidationError(f"budget column {budget!r} is not a column")
        b = t[budget]
    else:
        try:
            bval = float(budget)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"budget = {budget!r}: a number or a column name") from exc
        if not np.isfinite(bval) or bval < 0:
            raise ValidationError(f"budget = {budget!r}: a finite number >= 0")
        b = ibis.literal(bval, "float64")
    if id_column is not None:
        if id_column not in rel.columns:
            raise ValidationError(f"id_column {id_column!r} is not a column")
        with_ids = rel.with_table(t.mutate(**{PID: t[id_column].try_cast("int64")}), unique=True)
        fresh = False
    else:
        with_ids, source = _fresh_ids(rel, budgets)
        fresh = True
    tt = with_ids.table
    at = rel.engine.arrow(tt.select(id=tt[PID], budget=b))
    budgets.register(at, fresh=fresh)
    if source is not None and at.column("id").null_count == 0:
        ids = np.asarray(at.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
        budgets.align(with_ids, source, id_column, ids)
    return with_ids, budgets


def _fresh_ids(rel: IbisRelation, budgets: BudgetTable) -> tuple[IbisRelation, Any]:
    """``rel`` materialised once with fresh, dense ids (stable over re-runs of the plan), and
    the Arrow table that holds it."""
    eng = rel.engine
    n = rel.count()
    start = budgets.new_ids(n)
    cols = [c for c in rel.table.columns if c != PID]
    numbered = rel.table.select(*cols).mutate(
        **{PID: ibis.row_number().over() + ibis.literal(start, "int64")})
    at = eng.arrow(numbered)
    return IbisRelation(eng, eng.register_frame(at, "ids"), unique=True), at
