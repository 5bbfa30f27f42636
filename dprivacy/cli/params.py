"""Metric names and typed ``--param key=value`` parsing for the command line.

Each metric lists its parameters with a kind, a one-line meaning and an example. Privacy budgets
have no defaults: a metric built without them is refused with a message saying what to pass.
Values are read as JSON where that makes sense, and checked here, so that a bad value (``abc``, a
quoted number, ``1e400``, ``5e-324``, ``gender:1``) is reported as one line naming the parameter.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dprivacy import metrics as _metrics
from dprivacy.cli.exits import UsageError
from dprivacy.metrics.base import Metric

#: Largest budget accepted on the command line: beyond it eps x distance may overflow to inf,
#: which would read as "no constraint".
MAX_BUDGET = 1e100
#: Smallest: the smallest positive normal double (below it products underflow to 0).
MIN_BUDGET = sys.float_info.min


@dataclass(frozen=True)
class Param:
    """One metric parameter: its kind, whether it must be given, its meaning and an example."""

    name: str
    kind: str  # "budget", "positive", "choice", "bool", "weights", "budgets", "elementwise"
    help: str
    example: str
    required: bool = True
    choices: tuple[str, ...] = ()
    default: Any = None


@dataclass(frozen=True)
class MetricSpec:
    """A metric as the command line knows it."""

    name: str
    cls: type[Metric]
    summary: str
    params: tuple[Param, ...]
    coords: str = ""  # "points", "latlon" or "" (attribute universes)

    def example(self) -> str:
        return " ".join(f"--param {p.example}" for p in self.params if p.required)


_EPS = "privacy budget"
SPECS: dict[str, MetricSpec] = {s.name: s for s in (
    MetricSpec("euclidean", _metrics.Euclidean, "eps_ij = eps_per_unit x Euclidean distance",
               (Param("eps_per_unit", "budget", f"{_EPS} per unit of distance",
                      "eps_per_unit=0.5"),), coords="points"),
    MetricSpec("geodesic", _metrics.Geodesic,
               "eps_ij = eps_per_km x great-circle distance in km (latitude, longitude columns)",
               (Param("eps_per_km", "budget", f"{_EPS} per km", "eps_per_km=0.1"),
                Param("model", "choice", "Earth model (default sphere)", "model=wgs84",
                      required=False, choices=("sphere", "wgs84"), default="sphere")),
               coords="latlon"),
    MetricSpec("blowfish", _metrics.BlowfishThreshold,
               "budget eps between points closer than theta (Blowfish distance threshold)",
               (Param("theta", "positive", "distance threshold (coordinate units)", "theta=2"),
                Param("eps", "budget", f"{_EPS} of a pair within theta", "eps=1"),
                Param("rule", "choice", "A: graph + closure, B: closed form (default A)",
                      "rule=B", required=False, choices=("A", "B"), default="A"),
                Param("smooth", "bool", "d^2 (eps x distance / theta) instead of d^1 "
                      "(default false)", "smooth=true", required=False, default=False)),
               coords="points"),
    MetricSpec("discrete", _metrics.Discrete, "eps_ij = eps for every pair (plain eps-DP)",
               (Param("eps", "budget", _EPS, "eps=1"),)),
    MetricSpec("attribute", _metrics.AttributeWeighted,
               "sum of the budgets of the key attributes two elements differ in",
               (Param("weights", "weights", "a budget per key column (inf: unprotected)",
                      "weights=gender:1,age:0.5"),)),
    MetricSpec("value", _metrics.ValueWeighted,
               "per-value budgets combined per attribute (eq. (3))",
               (Param("budgets", "budgets", "JSON {column: {value: budget}}",
                      """'budgets={"gender":{"M":1,"F":0.5}}'"""),
                Param("rule", "choice", "min (eq. (3), two values per attribute), max or hub "
                      "(default min)", "rule=hub", required=False, choices=("min", "max", "hub"),
                      default="min"))),
    MetricSpec("elementwise", _metrics.ElementWise, "eps_ij = (eps_i + eps_j) / 2",
               (Param("eps", "elementwise", "a numeric column of the universe CSV, a JSON list "
                      "of N budgets or a JSON {label: budget}", "eps=budget"),)),
)}
METRICS = tuple(SPECS)


def metrics_help() -> str:
    """The ``design --help`` text listing every metric's parameters with an example."""
    lines = ["metrics and their --param values (privacy budgets have no default):"]
    for s in SPECS.values():
        lines.append(f"  {s.name}: {s.summary}")
        for p in s.params:
            opt = "" if p.required else ", optional"
            extra = f" one of {'|'.join(p.choices)};" if p.choices else ""
            lines.append(f"      {p.name} ({p.kind}{opt}):{extra} {p.help}")
        lines.append(f"      e.g. --metric {s.name} {s.example()}")
    return "\n".join(lines)


def spec_of(name: str) -> MetricSpec:
    s = SPECS.get(str(name).strip().lower())
    if s is None:
        byclass = {sp.cls.__name__.lower(): sp for sp in SPECS.values()}
        s = byclass.get(str(name).strip().lower())
    if s is None:
        raise UsageError(f"--metric {name!r} is not a metric; choose one of {', '.join(METRICS)}")
    return s


def split_params(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; malformed or repeated keys refused."""
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = str(item).partition("=")
        k = k.strip()
        if not sep or not k:
            raise UsageError(f"--param {item!r}: write key=value, e.g. --param eps_per_unit=0.5")
        if k in out:
            raise UsageError(f"--param {k} is given twice: give each parameter once")
        out[k] = v.strip()
    return out


def _unquote(text: str) -> str:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1].strip()
    return t


def _number(text: str, where: str, *, allow_inf: bool = False) -> float:
    t = _unquote(text)
    if t == "":
        raise UsageError(f"{where} has no value: write a number, e.g. 0.5")
    try:
        v = float(t)
    except ValueError:
        raise UsageError(f"{where}: {t!r} is not a number; write e.g. 0.5") from None
    if math.isnan(v):
        raise UsageError(f"{where}: NaN is not a budget; write a positive number")
    if math.isinf(v):
        if allow_inf and v > 0 and t.lower().lstrip("+") in ("inf", "infinity"):
            return v
        raise UsageError(f"{where} = {t}: overflows to infinity; write a positive number at most "
                         f"{MAX_BUDGET:g}" + (" (or inf for an unprotected attribute)"
                                               if allow_inf else ""))
    return v


def budget(text: str, where: str, *, allow_inf: bool = False) -> float:
    """A privacy budget: a positive normal number at most :data:`MAX_BUDGET` (or ``inf``)."""
    v = _number(text, where, allow_inf=allow_inf)
    if math.isinf(v):
        return v
    if v <= 0:
        raise UsageError(f"{where} = {v:g}: a budget must be positive (0 would release nothing)")
    if v < MIN_BUDGET:
        raise UsageError(f"{where} = {v:g} is subnormal (below {MIN_BUDGET:.3g}) and would "
                         "underflow to 0; write a larger budget")
    if v > MAX_BUDGET:
        raise UsageError(f"{where} = {v:g} is above {MAX_BUDGET:g}: products with distances "
                         "would overflow; write a smaller budget")
    return v


def _positive(text: str, where: str) -> float:
    return budget(text, where)


def _choice(text: str, where: str, choices: tuple[str, ...]) -> str:
    t = _unquote(text)
    if t not in choices:
        raise UsageError(f"{where}: {t!r} is not one of {', '.join(choices)}")
    return t


def _bool(text: str, where: str) -> bool:
    t = _unquote(text).lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise UsageError(f"{where}: {t!r} is not true or false")


def _json(text: str, where: str, example: str) -> Any:
    try:
        return json.loads(text, parse_constant=lambda c: float(c) if c != "NaN" else math.nan)
    except (ValueError, RecursionError):
        raise UsageError(f"{where} is not valid JSON; e.g. --param {example}") from None


def _weights(text: str, where: str) -> dict[str, float]:
    t = _unquote(text)
    if t.startswith("{"):
        obj = _json(t, where, 'weights=\'{"gender": 1, "age": 0.5}\'')
        if not isinstance(obj, dict):
            raise UsageError(f"{where} must map columns to budgets, e.g. weights=gender:1,age:0.5")
        items = [(str(k), str(v)) for k, v in obj.items()]
    else:
        items = []
        for part in t.split(","):
            k, sep, v = part.partition(":")
            if not sep or not k.strip():
                raise UsageError(f"{where}: {part.strip()!r} is not column:budget; write e.g. "
                                 "weights=gender:1,age:0.5")
            items.append((k.strip(), v.strip()))
    if not items:
        raise UsageError(f"{where} names no column; write e.g. weights=gender:1,age:0.5")
    out: dict[str, float] = {}
    for k, v in items:
        if k in out:
            raise UsageError(f"{where} gives column {k!r} twice")
        out[k] = budget(v, f"{where} ({k})", allow_inf=True)
    return out


def _budgets(text: str, where: str) -> dict[str, dict[str, float]]:
    ex = """budgets='{"gender":{"M":1,"F":0.5}}'"""
    obj = _json(_unquote(text) if not text.strip().startswith("{") else text, where, ex)
    if not isinstance(obj, dict) or not obj or not all(
            isinstance(v, dict) and v for v in obj.values()):
        raise UsageError(f"{where} must be a JSON object {{column: {{value: budget}}}}, e.g. {ex}")
    return {str(a): {str(val): budget(str(e), f"{where} ({a}={val})", allow_inf=True)
                     for val, e in per.items()} for a, per in obj.items()}


def _elementwise(text: str, where: str, column: Callable[[str], list[float] | None]) -> Any:
    t = text.strip()
    if t.startswith(("[", "{")):
        obj = _json(t, where, "eps=[1,0.5,2]")
        if isinstance(obj, list):
            return [budget(str(v), f"{where}[{k}]") for k, v in enumerate(obj)]
        if isinstance(obj, dict):
            return {str(k): budget(str(v), f"{where} ({k})") for k, v in obj.items()}
        raise UsageError(f"{where} must be a column name, a JSON list or a JSON object")
    name = _unquote(t)
    vals = column(name)
    if vals is None:
        raise UsageError(f"{where}: the universe has no column {name!r}; name a numeric column "
                         "of the universe CSV or give a JSON list of budgets")
    return [budget(repr(v), f"{where} (column {name!r}, element {k})") for k, v in enumerate(vals)]


def make_metric(name: str, params: Sequence[str] | Mapping[str, str],
                column: Callable[[str], list[float] | None] = lambda c: None) -> Metric:
    """A metric from its command-line name and ``key=value`` strings, every value checked.

    ``column(name)`` returns a numeric column of the universe (for ``elementwise eps=COLUMN``).
    """
    spec = spec_of(name)
    raw = dict(params) if isinstance(params, Mapping) else split_params(params)
    known = {p.name: p for p in spec.params}
    unknown = [k for k in raw if k not in known]
    if unknown:
        raise UsageError(f"--metric {spec.name} takes no parameter {unknown[0]!r}; its parameters "
                         f"are {', '.join(known)} (e.g. {spec.example()})")
    kw: dict[str, Any] = {}
    for p in spec.params:
        where = f"--param {p.name}"
        if p.name not in raw:
            if p.required:
                raise UsageError(f"--metric {spec.name} needs {where}=... ({p.help}; there is no "
                                 f"default), e.g. {spec.example()}")
            continue
        v = raw[p.name]
        if p.kind == "budget":
            kw[p.name] = budget(v, where)
        elif p.kind == "positive":
            kw[p.name] = _positive(v, where)
        elif p.kind == "choice":
            kw[p.name] = _choice(v, where, p.choices)
        elif p.kind == "bool":
            kw[p.name] = _bool(v, where)
        elif p.kind == "weights":
            kw[p.name] = _weights(v, where)
        elif p.kind == "budgets":
            kw[p.name] = _budgets(v, where)
        else:
            kw[p.name] = _elementwise(v, where, column)
    try:
        return spec.cls(**kw)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--metric {spec.name}: {exc}") from exc
