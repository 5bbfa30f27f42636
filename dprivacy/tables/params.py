"""Privacy parameters and other analyst arguments, converted ONCE to exact built-in values.

An analyst may pass any object as ε: a ``float`` subclass whose ``__float__`` or ``__mul__`` lies
could be charged as one value and used as another (e.g. charged as 0.001, used as 1000). So every
number that reaches an agent, a ledger or a noise scale is first turned into a built-in ``float``
(or ``int``) here, and only that value is used afterwards:

* ``bool`` and anything that is not a real number are refused;
* a ``float`` subclass is read through ``float.__float__`` (its stored value, not its override);
  an ``int`` subclass through ``int.__index__``; a numpy scalar through numpy; any other
  :class:`numbers.Real` through ``float()``, called once;
* NaN, ±inf and values outside the allowed range are refused.

All checks raise :class:`~dprivacy.errors.ValidationError` with a message that names the argument
and the rule, never anything about the protected records, and they run before any charge.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError

__all__ = ["real", "eps_arg", "count_arg", "prob_arg", "range_arg", "frac_arg"]


def _to_float(x: Any, name: str) -> float:
    if isinstance(x, (bool, np.bool_)):
        raise ValidationError(f"{name} = {x!r}: expected a number, not a bool")
    if type(x) is float:
        return x
    if isinstance(x, float):  # a subclass: its stored value, whatever its methods say
        return float.__float__(x)
    if isinstance(x, np.generic) and isinstance(x, (np.integer, np.floating)):
        return float(x)
    if isinstance(x, int):
        try:
            return float(int.__index__(x))
        except OverflowError as exc:
            raise ValidationError(f"{name} = {x!r}: too large for a float") from exc
    if isinstance(x, numbers.Real):
        try:
            v = float(x)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValidationError(f"{name}: cannot be read as a float ({exc})") from exc
        if type(v) is not float:
            v = float.__float__(v)
        return v
    raise ValidationError(f"{name} is a {type(x).__name__}: expected a real number")


def real(x: Any, name: str) -> float:
    """``x`` as a finite built-in float (see the module doc)."""
    v = _to_float(x, name)
    if not math.isfinite(v):
        raise ValidationError(f"{name} = {v}: expected a finite number")
    return v


def eps_arg(eps: Any, name: str = "eps") -> float:
    """A query's ε: a finite built-in float > 0."""
    v = real(eps, name)
    if not v > 0:
        raise ValidationError(f"{name} = {v}: the accuracy of a query must be > 0")
    return v


def count_arg(n: Any, name: str, minimum: int = 0) -> int:
    """An integer argument (a size, a bound) >= ``minimum``, as a built-in int."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ValidationError(f"{name} = {n!r}: expected an integer >= {minimum}")
    v = int(n) if isinstance(n, np.integer) else int.__index__(n)
    if v < minimum:
        raise ValidationError(f"{name} = {v}: expected an integer >= {minimum}")
    return v


def prob_arg(p: Any, name: str) -> float:
    """A sampling probability in (0, 1]."""
    v = real(p, name)
    if not 0 < v <= 1:
        raise ValidationError(f"{name} = {v}: a sampling probability lies in (0, 1]")
    return v


def frac_arg(q: Any, name: str = "frac") -> float:
    """A quantile in [0, 1]."""
    v = real(q, name)
    if not 0 <= v <= 1:
        raise ValidationError(f"{name} = {v}: need 0 <= {name} <= 1")
    return v


def range_arg(lo: Any, hi: Any) -> tuple[float, float]:
    """A clamping range: finite built-in floats lo < hi with a finite width hi − lo."""
    a, b = real(lo, "lo"), real(hi, "hi")
    if not a < b:
        raise ValidationError(f"clamping range (lo, hi) = ({a}, {b}): need finite lo < hi")
    if not math.isfinite(b - a):
        raise ValidationError(
            f"clamping range (lo, hi) = ({a}, {b}): hi - lo overflows; use a narrower range"
        )
    return a, b
