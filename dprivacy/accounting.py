"""Release accounting: a privacy budget counted in multiples of the metric d_X.

A mechanism verified to be (alpha * d_X)-private (its ``release_cost``; alpha <= 1 for a design
solved for d_X) may be released many times, but k releases on the same data are (sum of the
alphas) * d_X-private (sequential composition, Fact 1.2 of the paper's preliminaries). An
:class:`Accountant` holds a total K (in multiples of d_X) and refuses a release that would take
the spent sum above K, *before* anything is computed: a refused release charges nothing and
releases nothing. A granted release is charged (and, for a durable accountant, committed to disk)
before the noise is drawn, so an answer never exists without its charge, even if the process
dies just after.

Amounts are kept as integers in units of 1e-9 (costs rounded up, totals rounded down, with a
1e-3-unit tolerance), so that three releases of cost 0.1 fit exactly in K = 0.3 (and three
releases of a mechanism designed for d_X / 3 fit in K = 1: see ``mechanism.release_cost``).

Two stores:

* in memory: ``Accountant(total=K)``; ``total=math.inf`` is allowed for simulations on
  synthetic data (every release is still counted in :attr:`Accountant.spent`);
* durable: ``Accountant.durable(path, total=K, name="default")`` keeps the budget as a named
  record of the SQLite :class:`~dprivacy.tables.budgets.ledger.Ledger` at ``path`` (shared safely by
  several processes). The stored total wins when the file is reopened: ``total`` must then be
  None or equal to it, so a budget can never be refreshed by reopening it.

Privacy condition: the releases charged through one accountant are together
(spent * d_X)-private, and spent <= total.

**Two notions, one accountant.** ``Accountant(total=K)`` counts pure d_X-privacy in multiples of
the metric; ``Accountant(rho=R)`` counts zCDP per unit of the metric (docs/theory.md, "Gaussian
noise and metric zCDP"): a release is charged its rho and the releases together are
(spent)-zCDP per unit of the metric (rho adds under composition). A zCDP accountant also takes
pure releases: a release that is (alpha * d_X)-private is alpha-zCDP per unit of the metric
(its Rényi divergences of every order are at most alpha * d_ij; docs/theory.md, "Pure releases in
a zCDP budget"), so it is charged rho = alpha. A pure accountant refuses zCDP releases: zCDP
gives no pure bound. Every mechanism charge names its unit (the fingerprint of the universe and
metric it was verified against): a charge without one is refused, nothing charged.

Examples
--------
>>> acc = Accountant(total=2.0)
>>> acc.charge(1.0); acc.charge(1.0); acc.remaining
0.0
>>> try:
...     acc.charge(0.5)
... except BudgetExceededError as exc:
...     print(type(exc).__name__)
BudgetExceededError
>>> acc.spent
2.0
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

from dprivacy.errors import BudgetExceededError, DPrivacyError, ValidationError

if TYPE_CHECKING:
    from dprivacy.tables.budgets.ledger import Ledger

__all__ = ["NOTIONS", "Accountant", "format_amount", "pure_to_zcdp", "to_units"]

#: The privacy notions an accountant counts: pure d_X-privacy, or zCDP per unit of the metric.
NOTIONS = ("pure", "zcdp")
#: Prefix of the ledger records that hold zCDP release budgets (apart from the pure ones).
LEDGER_PREFIX_ZCDP = "dx-releases-zcdp:"


def pure_to_zcdp(alpha: float) -> float:
    """The zCDP rho (per unit of the metric) charged for an (alpha * d_X)-private release: alpha.

    For a pair at distance d the privacy loss is at most alpha*d with certainty, so the Rényi
    divergence of every order a >= 1 is at most alpha*d <= a * alpha * d (docs/theory.md, "Pure
    releases in a zCDP budget").
    """
    return float(alpha)

#: One unit of budget (the SQLite ledger's unit, so the two stores agree exactly).
UNIT = 1e-9
_PER = 1e9
_MAX_UNITS = (2**63 - 1) // 4
#: Prefix of the ledger record names that hold release budgets.
LEDGER_PREFIX = "dx-releases:"
#: Prefix of the marker records that bind a durable budget to one metric (its fingerprint).
UNIT_PREFIX = "dx-release-unit:"


def _check_amount(x: Any, what: str, *, allow_inf: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise ValidationError(f"{what} = {x!r}: expected a number")
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValidationError(f"{what} = {x!r}: expected a number") from exc
    if math.isnan(v) or v < 0 or (math.isinf(v) and not allow_inf):
        raise ValidationError(
            f"{what} = {x!r}: a privacy budget is a finite number >= 0 (in multiples of the "
            "metric d_X)" + ("; use math.inf only for simulations" if allow_inf else "")
        )
    return v


def format_amount(x: float) -> str:
    """A budget or cost as every message shows it: rounded to 6 decimals, at most 6 significant
    digits (so a budget left at 1e-9 by a design verified to the 1e-9 tolerance reads 0, in
    Python messages and in the CLI alike).

    Examples
    --------
    >>> format_amount(1e-09), format_amount(2.999999997), format_amount(0.25), format_amount(1e400)
    ('0', '3', '0.25', 'inf')
    """
    v = round(float(x), 6)
    return f"{v + 0.0:.6g}" if v != 0 else "0"


def to_units(x: float, *, round_up: bool) -> int:
    """``x`` in integer units of 1e-9 (up for costs, down for totals; 1e-3-unit tolerance)."""
    u = x * _PER
    if u > _MAX_UNITS:
        raise ValidationError(f"budget or cost {x!r} is too large to account (max "
                              f"{_MAX_UNITS * UNIT:.3g})")
    r = round(u)
    if abs(u - r) <= 1e-3 + 1e-12 * abs(u):
        return int(r)
    return math.ceil(u) if round_up else math.floor(u)


class Accountant:
    """A release budget of ``total`` multiples of the metric d_X (in memory).

    A release of a mechanism that is (alpha * d_X)-private charges alpha
    (``mechanism.release_cost``); :meth:`charge` raises :class:`BudgetExceededError` and charges
    nothing when the spent sum would exceed ``total``. Use :meth:`durable` for a budget kept in
    an SQLite file across processes and restarts.

    Parameters
    ----------
    total : float
        K >= 0, in multiples of d_X (``math.inf``: unlimited, for simulations only).
    name : str
        Shown in messages.

    Examples
    --------
    >>> import numpy as np, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> W, M = dp.Workload([[0.0, 1.0, 2.0]]), dp.metrics.Euclidean(1.0)
    >>> mech = dp.DXLaplace(W, dp.design(W, U, M, method="closed_form"))
    >>> acc = dp.Accountant(total=2)
    >>> for seed in (1, 2):
    ...     _ = mech.release(np.array([5, 3, 2]), rng=seed, secure=False, accountant=acc)
    >>> acc.remaining < mech.release_cost
    True
    """

    def __init__(self, total: float | None = None, *, rho: float | None = None,
                 name: str = "in-memory budget") -> None:
        if (total is None) == (rho is None):
            raise ValidationError("give total= (pure d_X-privacy, in multiples of the metric) or "
                                  "rho= (zCDP per unit of the metric), exactly one")
        self.notion = "pure" if rho is None else "zcdp"
        t = _check_amount(total if rho is None else rho, "total" if rho is None else "rho",
                          allow_inf=True)
        self.name = str(name)
        self._total_units: int | None = None if math.isinf(t) else to_units(t, round_up=False)
        self._spent_units = 0
        self._releases = 0
        self._lock = threading.Lock()
        self._ledger: Ledger | None = None
        self._record: int | None = None
        self._unit: str | None = None
        self._name = str(name)

    # ------------------------------------------------------------------ builders
    @classmethod
    def durable(cls, path: str | os.PathLike | Ledger, total: float | None = None, *,
                name: str = "default", rho: float | None = None,
                notion: str | None = None) -> Accountant:
        """A budget kept in the SQLite ledger at ``path`` under ``name``.

        Created with ``total`` if the name is new; if it exists, its stored total wins and
        ``total`` must be None or equal to it (else :class:`ValidationError`). Every charge is
        one committed transaction (``BEGIN IMMEDIATE``), so processes sharing the file never
        overspend together, and a charge is on disk before the release it pays for is computed.

        Examples
        --------
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "budget.sqlite")
        >>> acc = Accountant.durable(path, total=3)
        >>> acc.charge(1.0)
        >>> Accountant.durable(path).remaining   # reopened: the stored total wins
        2.0
        """
        from dprivacy.tables.budgets.ledger import Ledger

        if total is not None and rho is not None:
            raise ValidationError("give total= (pure) or rho= (zCDP), not both")
        kind = "zcdp" if rho is not None else (notion or "pure")
        if kind not in NOTIONS or (total is not None and kind != "pure"):
            raise ValidationError(f"notion = {notion!r}: choose 'pure' (total=) or 'zcdp' (rho=)")
        if rho is not None:
            total = rho
        prefix = LEDGER_PREFIX if kind == "pure" else LEDGER_PREFIX_ZCDP
        if not isinstance(name, str) or not name:
            raise ValidationError(f"name = {name!r}: a durable budget needs a non-empty name")
        if total is not None:
            t = _check_amount(total, "total")
        where = str(getattr(path, "path", path))
        try:
            ledger = path if isinstance(path, Ledger) else Ledger(os.fspath(path))
            if total is None:
                from dprivacy.errors import UnknownRecordError
                try:
                    rid = ledger.named_record(prefix + name, None)
                except UnknownRecordError as exc:
                    raise ValidationError(
                        f"the ledger {where!r} has no release budget named {name!r}: "
                        "give total=K (in multiples of the metric) to create it") from exc
            else:
                rid = ledger.named_record(prefix + name, t)
        except sqlite3.Error as exc:
            raise ValidationError(
                f"cannot use {where!r} as a budget ledger ({exc}): give the path of an "
                "SQLite ledger file (it is created if missing) in a writable folder") from exc
        except TypeError as exc:
            raise ValidationError(f"path = {path!r}: expected a file path or a Ledger") from exc
        acc = cls.__new__(cls)
        acc.name = f"budget {name!r} in {where}"
        acc._total_units = None
        acc._spent_units = 0
        acc._releases = 0
        acc._lock = threading.Lock()
        acc._ledger, acc._record = ledger, rid
        acc._unit, acc._name = None, name if kind == "pure" else f"zcdp:{name}"
        acc.notion = kind
        return acc

    @classmethod
    def single_release(cls, cost: float, notion: str = "pure") -> Accountant:
        """A budget of exactly one release of ``cost`` (each mechanism's built-in accountant)."""
        acc = cls(0.0, name="this mechanism's built-in one-release budget")
        acc.notion = notion
        acc._total_units = to_units(_check_amount(cost, "cost"), round_up=True)
        return acc

    # ------------------------------------------------------------------ state
    @property
    def is_durable(self) -> bool:
        return self._ledger is not None

    @property
    def total(self) -> float:
        """K, in multiples of d_X (the stored one for a durable budget)."""
        if self._ledger is not None:
            return float(self._ledger_call(lambda led: led.initial([self._record])[0]))
        return math.inf if self._total_units is None else self._total_units / _PER

    @property
    def remaining(self) -> float:
        """Budget left (read from the file for a durable budget: other processes may spend)."""
        if self._ledger is not None:
            return float(self._ledger_call(lambda led: led.remaining([self._record])[0]))
        if self._total_units is None:
            return math.inf
        return (self._total_units - self._spent_units) / _PER

    @property
    def spent(self) -> float:
        """Budget spent so far (by every process, for a durable budget)."""
        if self._ledger is not None:
            return round((self.total - self.remaining) * _PER) / _PER
        return self._spent_units / _PER

    @property
    def releases(self) -> int:
        """Number of releases this object charged (in this process)."""
        return self._releases

    def can_afford(self, cost: float, *, notion: str = "pure") -> bool:
        """Whether a release of ``cost`` (in ``notion``) would be granted now (charges nothing;
        False for a zCDP cost on a pure budget, which is refused whatever is left)."""
        if notion not in NOTIONS:
            raise ValidationError(f"notion = {notion!r}: choose one of {', '.join(NOTIONS)}")
        if notion != self.notion and self.notion == "pure":
            return False
        c = to_units(_check_amount(cost, "cost"), round_up=True)
        if self._ledger is not None:
            return c <= round(self.remaining * _PER)
        return self._total_units is None or self._spent_units + c <= self._total_units

    # ------------------------------------------------------------------ charging
    def charge(self, cost: float, *, label: str | None = None, unit: str | None = None,
               unit_label: str = "its metric", notion: str = "pure") -> None:
        """Charge ``cost`` (alpha, in multiples of d_X), or raise and charge nothing.

        ``notion`` says what ``cost`` counts: "pure" (alpha, multiples of the metric) or "zcdp"
        (rho per unit of the metric). A zCDP accountant charges a pure cost alpha as
        rho = :func:`pure_to_zcdp` (alpha); a pure accountant refuses a zCDP cost.

        ``unit`` names the metric (and universe) that ``cost`` is a multiple of (mechanisms pass
        the fingerprint they were verified against). The first charge with a unit binds the
        accountant to it (a durable one, in its file); a charge in another unit is refused:
        multiples of two metrics do not add up.

        Raises
        ------
        BudgetExceededError
            The spent sum would exceed the total; nothing was charged.
        ValidationError
            ``cost`` is not a finite number >= 0, or ``unit`` is not the accountant's.
        """
        if notion not in NOTIONS:
            raise ValidationError(f"notion = {notion!r}: choose one of {', '.join(NOTIONS)}")
        amount = _check_amount(cost, "cost")
        if notion != self.notion:
            if self.notion == "pure":
                raise ValidationError(
                    f"the {self.name} counts pure d_X-privacy and this release is zCDP (Gaussian "
                    "noise): a zCDP release has no pure-epsilon cost. Use a zCDP budget, "
                    "dprivacy.Accountant(rho=R), for mixed releases; nothing was charged or "
                    "released")
            amount = pure_to_zcdp(amount)
        c = to_units(amount, round_up=True)
        if unit is not None:
            self._bind_unit(str(unit), unit_label)
        if self._ledger is not None:
            ok = self._ledger_call(lambda led: led.charge(
                [self._record], c / _PER, all_or_nothing=True, label=label).ok.all())
            if not ok:
                self._refuse(c, self.remaining)
            self._releases += 1
            return
        with self._lock:
            if self._total_units is not None and self._spent_units + c > self._total_units:
                self._refuse(c, (self._total_units - self._spent_units) / _PER)
            self._spent_units += c
            self._releases += 1

    def _bind_unit(self, unit: str, what: str) -> None:
        if self._unit == unit:
            return
        msg = (f"the {self.name} counts multiples of another metric (or universe) than {what}: "
               "multiples of two metrics do not add up; use one accountant (or one ledger name) "
               "per metric; nothing was charged or released")
        if self._ledger is not None:
            # the unit is kept in the file as the initial value of a marker record: the ledger
            # refuses a different value for an existing name (atomic, shared by processes)
            code = int(hashlib.sha256(unit.encode()).hexdigest()[:13], 16) / 1e9
            try:
                self._ledger_call(lambda led: led.named_record(
                    f"{UNIT_PREFIX}{self._name}", code))
            except ValidationError as exc:
                raise ValidationError(msg) from exc
        elif self._unit is not None:
            raise ValidationError(msg)
        self._unit = unit

    def _refuse(self, c: int, left: float) -> None:
        what = "x the metric" if self.notion == "pure" else "rho per unit of the metric"
        raise BudgetExceededError(
            f"a release costing {format_amount(c / _PER)} {what} exceeds the {self.name} "
            f"({format_amount(left)} of {format_amount(self.total)} left): nothing was charged "
            "or released. "
            "Use a larger total, a cheaper design (a smaller multiple of the metric), or stop."
        )

    def _ledger_call(self, fn: Any) -> Any:
        try:
            return fn(self._ledger)
        except sqlite3.Error as exc:
            assert self._ledger is not None
            raise DPrivacyError(
                f"the budget ledger {self._ledger.path!r} failed ({exc}); nothing was released"
            ) from exc

    def __repr__(self) -> str:
        kind = "" if self.notion == "pure" else "zCDP "
        return (f"Accountant({kind}{self.name}: spent {format_amount(self.spent)} of "
                f"{format_amount(self.total)}, "
                f"{self._releases} release(s) here)")
