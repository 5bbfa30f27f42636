"""The engine relation as its helpers see it: the hidden id column and the :class:`IbisPlan`
protocol.

:mod:`.aggregates` and :mod:`.setops` are functions on an engine's table plus its id column;
they read a relation through this protocol (implemented by
:class:`~dprivacy.tables.relations.engine.relation.IbisRelation`), so they never import the
relation that calls them.
"""

from __future__ import annotations

from typing import Any, Protocol, Self

import ibis.expr.types as ir
import pandas as pd

from dprivacy.tables.relations.engine.backends import Engine

__all__ = ["PID", "IbisPlan"]

#: The hidden int64 column holding each record's privacy id (-1 = ⊥, a record of no one).
PID = "__dp_pid"


class IbisPlan(Protocol):
    """A lazy Ibis plan with a hidden id column :data:`PID` on one :class:`Engine`."""

    engine: Engine
    table: ir.Table
    unique: bool

    @property
    def columns(self) -> list[str]: ...

    @property
    def schema(self) -> Any: ...

    def expr(self, f: Any, what: str) -> ir.Value: ...

    def public(self, df: pd.DataFrame) -> Self: ...

    def with_table(self, table: ir.Table, *, unique: bool | None = None) -> Self: ...
