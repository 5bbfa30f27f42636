"""PINQ budget agents: stability as a multiplication on the way up the chain.

Shape of PINQ's C# agents (PINQ.cs, McSherry's PINQ source): ``Budget`` holds the global budget,
``Unary(target, scale)`` forwards ``scale·ε`` (this is how a c-stable transformation costs c·ε,
PST'16 Thm 1), ``Binary(a, b)`` charges both parents of a binary transformation, and
``Partition`` shares one running maximum between the parts of a partition so that parallel
queries cost the max, not the sum (PST'16 Thm 3). ``Sigma(target, σ)`` generalises ``Unary`` to
the probabilistic stabilities σ(ε) of PST'16 (Def. 5, §4.1): it forwards ``σ(total + ε) − σ(total)``,
since every query downstream of one random sample is one mechanism whose total privacy is the
sum of the queries' ε (σ is convex with σ(0) = 0, so charging σ of each increment separately
would undercharge).

Privacy condition: a query of accuracy ε on a table reached through agents a_1..a_k is answered
only if the root ``Budget`` accepts the composed charge; otherwise nothing anywhere is charged.

Charging is transactional: :func:`charge` walks the agents, records an undo entry for every
state change in a journal and rolls all of them back if any root budget refuses, so
``BudgetExceededError`` leaves every agent exactly as it was. Durable roots
(:class:`dprivacy.tables.budgets.durable.LedgerBudgetAgent`) only note a :class:`DeferredCharge` during
the walk; once every in-memory agent has accepted, :func:`charge` debits all of them in one
all-or-nothing ledger transaction, and undoes the walk if the ledger refuses.

Threads: :func:`charge` and :func:`cost` hold one process-wide lock for the whole walk (check,
debit, commit or undo), so two threads racing to spend a budget are served one after the other
and never overspend it together. The lock is re-entrant and held only while budgets change,
never while an answer is computed.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.tables.params import eps_arg, real

__all__ = [
    "Agent",
    "BudgetAgent",
    "UnaryAgent",
    "SigmaAgent",
    "BinaryAgent",
    "PartitionAgent",
    "PartitionPartAgent",
    "PublicAgent",
    "DeferredCharge",
    "DurableRoot",
    "charge",
    "cost",
]

Journal = list[Callable[[], None]]

_LOCK = threading.RLock()
"""Serialises every walk of the agent tree (see the module doc)."""


class Agent(ABC):
    """A node of the agent tree. ``apply`` charges ``eps`` (recording undo closures in ``journal``)
    and returns False if some root budget refuses; the caller then undoes the journal."""

    @abstractmethod
    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool: ...


class PublicAgent(Agent):
    """Agent of a public (unprotected) table: every charge is accepted and costs nothing."""

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        return True


class BudgetAgent(Agent):
    """The root: a global budget B. Accepts ε iff ε ≤ remaining (FW-PINQ Query rule, Fig. 1)."""

    #: what the budget counts: "pure" (ε) or "zcdp" (rho; a PINQ table in zCDP mode)
    notion: str = "pure"

    def __init__(self, budget: float) -> None:
        b = real(budget, "budget")
        if b < 0:
            raise ValidationError(f"budget = {budget!r}: a privacy budget is a finite number >= 0")
        self._remaining = b
        self.spent_in_dry_run = 0.0

    @property
    def remaining(self) -> float:
        """The budget left (public: budgets and scales are data-independent, FW-PINQ §7)."""
        return self._remaining

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        if dry:
            self.spent_in_dry_run += eps
            journal.append(lambda: setattr(self, "spent_in_dry_run", self.spent_in_dry_run - eps))
            return True
        # relative slack of 1e-12 absorbs float round-off in sums such as 0.1 + 0.2 vs 0.3
        if eps > self._remaining * (1 + 1e-12) + 1e-15:
            return False
        old = self._remaining
        self._remaining = max(0.0, old - eps)
        journal.append(lambda: setattr(self, "_remaining", old))
        return True


class UnaryAgent(Agent):
    """Forwards ``scale · ε`` to its target: the agent of a ``scale``-stable transformation."""

    def __init__(self, target: Agent, scale: float) -> None:
        if not (scale >= 0 and math.isfinite(scale)):
            raise ValidationError(f"stability = {scale!r}: must be a finite number >= 0")
        self.target = target
        self.scale = float(scale)

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        return self.target.apply(self.scale * eps, journal, dry)


class SigmaAgent(Agent):
    """Forwards ``σ(total + ε) − σ(total)``: a σ-probabilistically stable sampler (PST'16 Def. 5).

    ``total`` is the sum of ε charged through this agent so far; all those queries read the same
    sample, so together they are a ``total``-DP mechanism and cost σ(total) (PST'16 Prop. 2).
    """

    def __init__(self, target: Agent, sigma: Callable[[float], float]) -> None:
        self.target = target
        self.sigma = sigma
        self.total = 0.0

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        old = self.total
        inc = self.sigma(old + eps) - self.sigma(old)
        if not self.target.apply(inc, journal, dry):
            return False
        self.total = old + eps
        journal.append(lambda: setattr(self, "total", old))
        return True


class BinaryAgent(Agent):
    """Both parents of a binary transformation must accept (PINQAgentBinary); rolled back together."""

    def __init__(self, a: Agent, b: Agent) -> None:
        self.a = a
        self.b = b

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        return self.a.apply(eps, journal, dry) and self.b.apply(eps, journal, dry)


class PartitionAgent:
    """Shared state of a partition (PINQAgentPartition): per-part running totals and one maximum.

    Only increases of the maximum are forwarded to ``target`` (parallel composition, PST'16 Thm 3).
    """

    def __init__(self, target: Agent) -> None:
        self.target = target
        self.totals: dict[Hashable, float] = {}
        self.maximum = 0.0

    def part(self, key: Hashable) -> PartitionPartAgent:
        """The agent of the part with key ``key``."""
        self.totals.setdefault(key, 0.0)
        return PartitionPartAgent(self, key)


class PartitionPartAgent(Agent):
    """The agent of one part of a :class:`PartitionAgent`."""

    def __init__(self, parent: PartitionAgent, key: Hashable) -> None:
        self.parent = parent
        self.key = key

    def apply(self, eps: float, journal: Journal, dry: bool = False) -> bool:
        p = self.parent
        old_total, old_max = p.totals[self.key], p.maximum
        new_total = old_total + eps
        if new_total > old_max:
            if not p.target.apply(new_total - old_max, journal, dry):
                return False
            p.maximum = new_total
        p.totals[self.key] = new_total

        def undo() -> None:
            p.totals[self.key] = old_total
            p.maximum = old_max

        journal.append(undo)
        return True


class DurableRoot(Protocol):
    """What :func:`charge` needs of a durable root: its ledger, record id and source name."""

    ledger: Any
    record_id: int
    source: str
    last_query_id: int | None


class DeferredCharge:
    """Journal entry of a durable root: ``amount`` to debit from its ledger after the walk.

    Calling it (the undo) does nothing: nothing in memory changed.
    """

    __slots__ = ("root", "amount")

    def __init__(self, root: DurableRoot, amount: float) -> None:
        self.root = root
        self.amount = amount

    def __call__(self) -> None:
        return None


def _commit_deferred(entries: list[DeferredCharge]) -> bool:
    """Debit the durable roots' summed amounts in one all-or-nothing ledger transaction."""
    totals: dict[int, float] = {}
    roots: dict[int, DurableRoot] = {}
    for e in entries:
        totals[id(e.root)] = totals.get(id(e.root), 0.0) + e.amount
        roots[id(e.root)] = e.root
    ledger = entries[0].root.ledger
    if any(r.ledger is not ledger for r in roots.values()):
        raise ValidationError(
            "this query reads PINQ sources kept in different Ledger objects, which cannot be "
            "charged in one transaction; open every source on the same Ledger; nothing was charged"
        )
    rec: dict[int, float] = {}
    for k, r in roots.items():  # two Queryables of one source share one record: add up
        rec[r.record_id] = rec.get(r.record_id, 0.0) + totals[k]
    label = "+".join(sorted({f"pinq:{r.source}" for r in roots.values()}))
    ch = ledger.charge(list(rec), list(rec.values()), label=label, all_or_nothing=True)
    if not bool(ch.ok.all()):
        return False
    for r in roots.values():
        r.last_query_id = ch.query_id
    return True


def charge(agent: Agent, eps: float) -> None:
    """Charge ``eps`` through ``agent`` atomically, or raise without changing any state.

    Durable roots are charged last, in one committed ledger transaction, so an answer computed
    after :func:`charge` returns has always been paid for (charge-then-release).

    Raises:
        BudgetExceededError: some root budget cannot pay; every agent is left unchanged.
    """
    eps = eps_arg(eps)
    with _LOCK:
        _charge_locked(agent, eps)


def _charge_locked(agent: Agent, eps: float) -> None:
    journal: Journal = []
    ok = agent.apply(eps, journal)
    if ok:
        deferred = [e for e in journal if isinstance(e, DeferredCharge)]
        try:
            ok = _commit_deferred(deferred) if deferred else True
        except BaseException:
            for undo in reversed(journal):
                undo()
            raise
    if not ok:
        for undo in reversed(journal):
            undo()
        raise BudgetExceededError(
            f"a query with eps = {eps} costs more than the remaining budget; nothing was charged "
            "(check Queryable.cost(eps) and remaining_budget() first)"
        )


def cost(agent: Agent, eps: float, roots: list[BudgetAgent]) -> float:
    """What a query of accuracy ``eps`` would take from the budgets ``roots`` (nothing is charged).

    Done by a dry run that accepts everything and is then undone, so partition maxima and σ
    totals are taken into account exactly.
    """
    eps = eps_arg(eps)
    with _LOCK:
        journal: Journal = []
        before = [r.spent_in_dry_run for r in roots]
        agent.apply(eps, journal, dry=True)
        spent = sum(r.spent_in_dry_run - b for r, b in zip(roots, before, strict=True))
        for undo in reversed(journal):
            undo()
        return spent
