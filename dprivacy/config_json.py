"""JSON values of mechanism configs: lossless floats on the way out, strict parsing on the way in.

Finite floats are written as JSON numbers (Python writes the shortest repr that round-trips
exactly), non-finite ones as ``{"__float__": "inf"}``; reading refuses the non-standard constants
``NaN``/``Infinity``, numbers that overflow a float and integers beyond 2^53 with a
:class:`~dprivacy.errors.ConfigError` (never a raw ``ValueError`` or ``OverflowError``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dprivacy.errors import ConfigError

__all__ = ["MAX_INT", "from_json", "to_json"]

#: Integers in a config file beyond this magnitude are refused (no config field needs more).
MAX_INT = 1 << 53


def to_json(v: Any) -> Any:
    """A JSON-safe, lossless copy: numpy -> Python, tuples -> lists, non-finite floats tagged."""
    if isinstance(v, Mapping):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [to_json(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else {"__float__": repr(f)}
    if v is None or isinstance(v, str):
        return v
    return str(v)


def from_json(v: Any) -> Any:
    """Inverse of :func:`to_json` (tagged floats back to float)."""
    if isinstance(v, dict):
        if set(v) == {"__float__"} and v["__float__"] in ("inf", "-inf", "nan"):
            return float(v["__float__"])
        return {k: from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json(x) for x in v]
    return v


def _float_array(v: Any, what: str) -> np.ndarray:
    vals = from_json(v)
    if not isinstance(vals, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) for t in vals):
        raise ConfigError(f"config field {what!r} must be a list of numbers")
    return np.array(vals, dtype=float)


def _refuse_constant(name: str) -> Any:
    raise ConfigError(f"the JSON constant {name} is not allowed in a mechanism config (non-finite "
                      'floats are written as {"__float__": "inf"})')


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ConfigError(f"the number {text[:40]} overflows a float (non-finite floats are written "
                          'as {"__float__": "inf"})')
    return v


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 17 or abs(int(text)) > MAX_INT:
        raise ConfigError(f"the integer {text[:40]}{'...' if len(text) > 40 else ''} is too large "
                          f"for a mechanism config (at most 2^53)")
    return int(text)


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 80 else s[:77] + "..."
