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

import math
from typing import Any

from dprivacy.accounting import Accountant
from dprivacy.design import PRIVACY_RTOL
from dprivacy.errors import BudgetExceededError, ValidationError


def release_cost(max_ratio: float) -> float:
    """alpha = max_ratio / (1 + PRIVACY_RTOL), at least 0 (see the module doc)."""
    r = float(max_ratio)
    return 0.0 if not r > 0 else r / (1 + PRIVACY_RTOL)


def setup_accounting(mech: Any, universe: Any = None, metric: Any = None, *,
                     unit: str | None = None, scale: float = 1.0) -> None:
    """Set ``mech.release_cost`` from ``mech.max_ratio_`` (times ``scale``: a Gaussian
    mechanism's rho), its built-in accountant, ``mech.release_notion`` (the class attribute, else
    "pure") and ``mech.release_unit``: the fingerprint of the (universe, metric) it was verified
    against, whose multiples its cost counts -- else ``unit`` (the fingerprint its design
    recorded), else that of the design's own (universe, metric), else None (then an explicit
    accountant refuses its charges)."""
    mech.release_cost = float(scale) * release_cost(mech.max_ratio_)
    mech.release_notion = getattr(mech, "release_notion", "pure")
    if metric is not None and universe is not None:
        mech.release_unit = metric.fingerprint(universe)
    else:
        design_unit = getattr(getattr(mech, "design", None), "unit", None)
        mech.release_unit = unit if unit is not None else design_unit
    mech._metric_repr = None if metric is None else repr(metric)
    mech._own_accountant = Accountant.single_release(mech.release_cost, mech.release_notion)


def charge_release(mech: Any, accountant: Accountant | None) -> None:
    """Charge ``mech.release_cost`` to ``accountant`` (or the mechanism's own one-release budget)
    before anything is computed; raise :class:`BudgetExceededError` (nothing charged) if refused.
    """
    label = f"{mech.kind} release (m={mech.workload.m}, N={mech.workload.N})"
    if accountant is None:
        try:
            mech._own_accountant.charge(mech.release_cost, label=label,
                                        notion=mech.release_notion)
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
    if mech.release_unit is None and not (not accountant.is_durable
                                          and math.isinf(accountant.total)):
        raise ValidationError(
            f"this {type(mech).__name__} was built without its universe and metric (and from a "
            "design that does not record them): its cost has no unit an accountant can add up. "
            "Build it with universe= and metric= (or from dprivacy.design(...)); nothing was "
            "charged or released")
    accountant.charge(mech.release_cost, label=label, unit=mech.release_unit,
                      unit_label=f"{getattr(mech, '_metric_repr', None) or 'its metric'}",
                      notion=mech.release_notion)
