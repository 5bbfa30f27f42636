"""What a release costs and who pays for it (shared by every mechanism's ``release``).

A mechanism verified with maximum ratio r = max over constrained pairs of (privacy loss /
eps_ij) is (r * d_X)-private; its release cost is alpha = r / (1 + PRIVACY_RTOL), i.e. r with the
same floating-point tolerance that the privacy check grants (r <= 1 + PRIVACY_RTOL passes), so a
design solved exactly for d_X costs 1 (to 1e-9) and k releases fit in a budget of k.

Without an explicit accountant each mechanism pays from its own built-in one-release budget
(:meth:`Accountant.single_release`): the first release is granted, a second one is refused with
:class:`BudgetExceededError`. To compose releases, pass one :class:`Accountant` to all of them.
"""

from __future__ import annotations

from typing import Any

from dprivacy.accounting import Accountant
from dprivacy.design import PRIVACY_RTOL
from dprivacy.errors import BudgetExceededError, ValidationError


def release_cost(max_ratio: float) -> float:
    """alpha = max_ratio / (1 + PRIVACY_RTOL), at least 0 (see the module doc)."""
    r = float(max_ratio)
    return 0.0 if not r > 0 else r / (1 + PRIVACY_RTOL)


def setup_accounting(mech: Any, universe: Any = None, metric: Any = None) -> None:
    """Set ``mech.release_cost`` from ``mech.max_ratio_``, its built-in accountant, and
    ``mech.release_unit``: the fingerprint of the (universe, metric) it was verified against,
    whose multiples its cost counts (None when it was verified against a design's constraints)."""
    mech.release_cost = release_cost(mech.max_ratio_)
    mech.release_unit = None if metric is None or universe is None else metric.fingerprint(universe)
    mech._metric_repr = None if metric is None else repr(metric)
    mech._own_accountant = Accountant.single_release(mech.release_cost)


def charge_release(mech: Any, accountant: Accountant | None) -> None:
    """Charge ``mech.release_cost`` to ``accountant`` (or the mechanism's own one-release budget)
    before anything is computed; raise :class:`BudgetExceededError` (nothing charged) if refused.
    """
    label = f"{mech.kind} release (m={mech.workload.m}, N={mech.workload.N})"
    if accountant is None:
        try:
            mech._own_accountant.charge(mech.release_cost, label=label)
        except BudgetExceededError as exc:
            raise BudgetExceededError(
                f"this {type(mech).__name__} has already released once: without accountant= a "
                f"mechanism allows one release (it costs alpha = {mech.release_cost:.9g} x the "
                "metric). To compose k releases, pass the same accountant="
                "dprivacy.Accountant(total=K) to each (K in multiples of the metric; k releases "
                "cost k * alpha); nothing was charged or released"
            ) from exc
        return
    if not isinstance(accountant, Accountant):
        raise ValidationError(f"accountant is a {type(accountant).__name__}: expected a "
                              "dprivacy.Accountant (in memory or Accountant.durable(path, ...))")
    accountant.charge(mech.release_cost, label=label, unit=mech.release_unit,
                      unit_label=f"{getattr(mech, '_metric_repr', None) or 'its metric'}")
