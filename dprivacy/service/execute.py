"""Run a validated plan through the public table API (:class:`~dprivacy.tables.Queryable`,
:class:`~dprivacy.tables.ProPerTable`): one method call per step, then the noisy aggregation.

Expressions are rebuilt from their wire form on the public table that the table's own row-wise
checker hands them (:func:`~dprivacy.service.exprcodec.decode`), so the tables check them against
the engine's allow-list and make them total exactly as they do for an in-process analyst; every
argument check runs before the aggregation's charge. The same code runs the plan on the real
sources and on their empty *shadows* (the documented default answer and the public schema).
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pandas as pd

from dprivacy.errors import UnsupportedOperationError, ValidationError
from dprivacy.service.exprcodec import decode
from dprivacy.service.releases import ReleaseInputs, run_release

__all__ = ["Builder", "run_query", "run_grouped", "schema_of"]

_CACHE = 256


def _fx(x: Any) -> Any:
    """A column name as is; a wire expression as a function of the public table."""
    if x is None or isinstance(x, str):
        return x
    return lambda table, js=x: decode(js, table)


def _public(p: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(p["rows"], columns=p["columns"])


class Builder:
    """Builds the table object a plan's table describes.

    Parameters:
        base: source name -> the analyst's base table object for it.
        cache: derived tables by plan prefix (kept so that a re-used partition shares its
            max-agent, as the same calls in one Python session would); None: no cache.
        pinned: the analyst's ``as_pinq`` tables by plan prefix, never evicted: the people are
            charged ε once, when the first query reads the table, and every later query on the
            same prefix spends the table's own PINQ budget ε, as one in-process ``as_pinq``
            call would (at most ``max_pinned``; a new one beyond is refused before any
            charge). None: no state (the shadows).
        max_pinned: the most ``as_pinq`` tables kept (the service's ``max_as_pinq``).
    """

    def __init__(self, base: Callable[[str], Any],
                 cache: OrderedDict[str, Any] | None = None,
                 pinned: dict[str, Any] | None = None, max_pinned: int = 64) -> None:
        self.base = base
        self.cache = cache
        self.pinned = pinned
        self.max_pinned = max_pinned

    def table(self, t: dict[str, Any]) -> Any:
        """The table (or a public DataFrame for ``{"public": ...}``)."""
        if "public" in t:
            return _public(t["public"])
        cur = self.base(t["source"])
        for i, s in enumerate(t["steps"]):
            key = None
            if self.cache is not None:
                key = json.dumps([t["source"], t["steps"][: i + 1]], sort_keys=True)
                hit = self.cache.get(key)
                if hit is not None:
                    self.cache.move_to_end(key)
                    cur = hit
                    continue
            if s["op"] == "partition":
                cur = self._part(cur, t, i)
                continue
            if s["op"] == "as_pinq" and self.pinned is not None:
                cur = self._as_pinq(cur, t, i)
                continue
            cur = self.step(cur, s)
            if key is not None and self.cache is not None:
                self.cache[key] = cur
                while len(self.cache) > _CACHE:
                    self.cache.popitem(last=False)
        return cur

    def _as_pinq(self, cur: Any, t: dict[str, Any], i: int) -> Any:
        assert self.pinned is not None
        key = json.dumps([t["source"], t["steps"][: i + 1]], sort_keys=True)
        hit = self.pinned.get(key)
        if hit is not None:
            return hit
        if len(self.pinned) >= self.max_pinned:
            raise ValidationError(f"at most {self.max_pinned} as_pinq tables per analyst: query "
                                  "the ones you have")
        out = self.step(cur, t["steps"][i])
        self.pinned[key] = out
        return out

    def _part(self, cur: Any, t: dict[str, Any], i: int) -> Any:
        """One part of a partition; the parts' dict is cached under the plan prefix without
        the part, so queries on different parts share the partition's max-agent."""
        s = t["steps"][i]
        whole = {"op": "partition", "keys": s["keys"], "by": s["by"]}
        key = json.dumps([t["source"], [*t["steps"][:i], whole]], sort_keys=True)
        parts = self.cache.get(key) if self.cache is not None else None
        if parts is None:
            parts = cur.partition(s["keys"], _fx(s["by"]))
            if self.cache is not None:
                self.cache[key] = parts
        return parts[s["part"]]

    def step(self, t: Any, s: dict[str, Any]) -> Any:
        """Apply one step (the table method of the same name)."""
        op = s["op"]
        if op == "where":
            return t.where(_fx(s["pred"]))
        if op == "select":
            return t.select(**{str(k): _fx(v) for k, v in s["exprs"].items()})
        if op == "select_many":
            return t.select_many(s["k"], _fx(s["f"]), s.get("columns"))
        if op == "group_by":
            key = s["key"] if isinstance(s["key"], (str, list)) else _fx(s["key"])
            return t.group_by(key, **{str(k): tuple(v) for k, v in s["aggs"].items()})
        if op == "distinct":
            return t.distinct()
        if op in ("take", "skip"):
            return getattr(t, op)(s["n"])
        if op in ("concat", "union", "intersect", "except_"):
            return getattr(t, op)(self.table(s["other"]))
        if op == "join":
            b = s["bound"]
            return t.join(self.table(s["other"]), tuple(b) if isinstance(b, list) else b,
                          s["on"], s.get("right_on"))
        if op in ("product", "join_public", "exclude"):
            if not hasattr(t, op):
                raise UnsupportedOperationError(f"{op} is a ProPer operation; this table is PINQ")
            if op == "product":
                return t.product(_public(s["public"]))
            if op == "join_public":
                return t.join_public(_public(s["public"]), s["on"], s.get("right_on"))
            return t.exclude(_public(s["public"]), s.get("on"))
        if op == "as_pinq":
            if not hasattr(t, "as_pinq"):
                raise UnsupportedOperationError("as_pinq is a ProPer operation; this table is PINQ")
            return t.as_pinq(s["eps"])
        raise ValidationError(f"unknown step {op!r}")  # parse_plan refuses these earlier


def _range(q: dict[str, Any]) -> dict[str, Any]:
    return {k: q[k] for k in ("lo", "hi") if q.get(k) is not None}


def _options(method: Any, q: dict[str, Any]) -> dict[str, Any]:
    """The query's ``options``: keyword-only arguments of the table's ``method`` (e.g. the
    median's ``candidates``), checked by name; the method checks their values."""
    opts = dict(q.get("options") or {})
    params = inspect.signature(method).parameters
    unknown = [k for k in opts if k not in params
               or params[k].kind is not inspect.Parameter.KEYWORD_ONLY]
    if unknown:
        raise ValidationError(f"{q['op']}: unknown options {unknown}")
    return opts


def run_query(t: Any, q: dict[str, Any], release: ReleaseInputs | None = None) -> Any:
    """Run the noisy aggregation ``q`` on the table object ``t``; returns a JSON-able answer.
    ``release``: the owner's universe and metric of the plan's source (for ``release``)."""
    if q["op"] == "release":
        return run_release(t, q, release)
    if q["op"] == "gaussian_count":
        return t.gaussian_count(q["rho"])
    if q["op"] == "gaussian_sum":
        return t.gaussian_sum(q["rho"], _fx(q.get("f")), **_range(q))
    op, eps = q["op"], q["eps"]
    if op == "noisy_count":
        return t.noisy_count(eps)
    if op in ("noisy_sum", "noisy_average"):
        return getattr(t, op)(eps, _fx(q.get("f")), **_range(q))
    if op == "noisy_order_statistic":
        return t.noisy_order_statistic(eps, q["frac"], _fx(q.get("f")), **_range(q),
                                       **_options(t.noisy_order_statistic, q))
    if op == "noisy_median":
        return t.noisy_median(eps, _fx(q.get("f")), **_range(q), **_options(t.noisy_median, q))
    if op == "grouped":
        return run_grouped(t, q)
    if op == "exponential_mechanism":
        cands, scores = q["candidates"], q["scores"]

        def score(table: Any, i: int) -> Any:
            return decode(scores[i], table)

        i = t.exponential_mechanism(eps, list(range(len(cands))), score)
        return cands[int(i)]
    raise ValidationError(f"unknown query {op!r}")


def run_grouped(t: Any, q: dict[str, Any]) -> list[list[float]]:
    """A grouped aggregation over the public ``keys``: one list of values per key (in the
    order of ``aggs``), ε in total (:mod:`dprivacy.tables.grouped`)."""
    from dprivacy.tables.grouped import Count, Mean, Sum

    aggs: dict[str, Any] = {}
    for name, a in q["aggs"].items():
        if a["how"] == "count":
            aggs[str(name)] = Count()
        else:
            cls = Sum if a["how"] == "sum" else Mean
            aggs[str(name)] = cls(_fx(a.get("f")), a["lo"], a["hi"])
    out = t.group_by(keys=q["keys"], column=_fx(q["by"])).agg(q["eps"], **aggs)
    return [[float(v) for v in row] for row in out.to_numpy()]


def schema_of(t: Any) -> list[list[str]]:
    """``[[column, ibis type], ...]`` of a table object (public: the plan and the sources'
    schemas determine it)."""
    rel = getattr(t, "_rel", None)
    sch = getattr(rel, "schema", None)
    if sch is None:
        return [[str(c), "unknown"] for c in t.columns]
    return [[str(k), str(v)] for k, v in sch.items()]
