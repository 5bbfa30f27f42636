"""A durable PINQ root budget: the global budget of a source kept in an SQLite :class:`Ledger`.

PINQ's ``PINQAgentBudget`` (PINQ.cs) lives in memory, so a restarted process
would start again with the full budget. :class:`LedgerBudgetAgent` keeps the remaining budget of
a named source as one record of a :class:`~dprivacy.tables.budgets.ledger.Ledger` (meta name
``pinq:<source>``; created with the initial budget only if absent, in one transaction).

Charge-then-release: during :func:`~dprivacy.tables.budgets.agents.charge` the agent only notes the
amount; after every in-memory agent of the query has accepted, all durable amounts are debited
in one ``BEGIN IMMEDIATE`` transaction that commits before the aggregation computes anything
(:meth:`Ledger.charge` with ``all_or_nothing=True``). A crash after the commit loses budget; an
answer never exists without its committed charge; a refused query changes and logs nothing.
Concurrent processes serialise on SQLite's write lock, so together they never overspend.

Privacy condition: the answers released about a source, by every process and every run that
uses the ledger file, have total ε (with PINQ's scaling factors) at most its initial budget B.

What is not durable: partition maxima and sampling totals (σ) are per-process agent state, so a
new process pays again in full for a partition it re-creates (conservative: never undercharges).
"""

from __future__ import annotations

import os

from dprivacy.errors import ValidationError
from dprivacy.tables.budgets.agents import BudgetAgent, DeferredCharge, Journal
from dprivacy.tables.budgets.ledger import Ledger

__all__ = ["LedgerBudgetAgent", "open_ledger"]


def open_ledger(ledger: Ledger | str | os.PathLike) -> Ledger:
    """A :class:`Ledger`, or one opened on the path ``ledger``."""
    if isinstance(ledger, Ledger):
        return ledger
    if isinstance(ledger, (str, os.PathLike)):
        return Ledger(ledger)
    raise ValidationError(
        f"ledger is a {type(ledger).__name__}: expected a dprivacy.tables.Ledger (SQLite) or a "
        "path; PINQ's durable budget needs the SQLite ledger"
    )


class LedgerBudgetAgent(BudgetAgent):
    """The root budget of PINQ source ``source`` kept in ``ledger`` (see the module doc).

    Parameters:
        ledger: the SQLite ledger (or its path).
        source: the source's name; its budget is the ledger record named ``pinq:<source>``.
        budget: the initial budget B >= 0, used only if the source is not yet in the ledger.
            If it is, the stored budget wins and ``budget`` must be None or equal to the stored
            initial B (else :class:`ValidationError`): a re-opened source continues with what is
            left, and can never be given a fresh budget by re-opening it.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike, source: str,
                 budget: float | None) -> None:
        if not isinstance(source, str) or not source:
            raise ValidationError(f"source = {source!r}: expected a non-empty string")
        self.ledger = open_ledger(ledger)
        self.source = source
        self.record_id = self.ledger.named_record(f"pinq:{source}", budget)
        self.spent_in_dry_run = 0.0
        self.last_query_id: int | None = None

    @property
    def remaining(self) -> float:
        """The budget left now, read from the ledger (other processes may have spent some)."""
        return float(self.ledger.remaining([self.record_id])[0])

    @property
    def initial(self) -> float:
        """The initial budget B stored in the ledger."""
        return float(self.ledger.initial([self.record_id])[0])

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        if dry:
            return super().apply(eps, journal, dry=True)
        journal.append(DeferredCharge(self, eps))  # debited by charge() after the walk
        return True

    def __repr__(self) -> str:
        return f"LedgerBudgetAgent({self.ledger.path!r}, source={self.source!r})"
