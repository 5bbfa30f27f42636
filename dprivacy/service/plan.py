"""The data-free JSON plan an analyst sends, and its validation before anything is charged or run.

A plan names a protected source, the transformations to apply to it (the methods of
:class:`~dprivacy.tables.Queryable` / :class:`~dprivacy.tables.ProPerTable`) and one noisy
aggregation::

    {"v": 1,
     "table": {"source": "people",
               "steps": [{"op": "where", "pred": EXPR},
                         {"op": "select", "exprs": {"band": EXPR}}]},
     "query": {"op": "noisy_sum", "eps": 0.5, "f": "band", "lo": 0, "hi": 10}}

``EXPR`` is a row-wise expression in the wire form of :mod:`dprivacy.service.exprcodec`; where a
method takes a column, a string names it. Steps (arguments as in the table methods):
``where(pred)``, ``select(exprs)``, ``select_many(k, f, columns)``, ``group_by(key, aggs)``,
``distinct``, ``take(n)``, ``skip(n)``, ``partition(keys, by, part)`` (the part ``part`` of
``partition(keys, by)``), ``concat|union|intersect|except_(other)``,
``join(other, bound, on, right_on)``, ``product(public)``, ``join_public(public, on,
right_on)``, ``exclude(public, on)``, ``as_pinq(eps)``; ``other`` is another table
(``{"source", "steps"}``) or ``{"public": PUBLIC}``; ``PUBLIC`` is ``{"columns": [...],
"rows": [[...], ...]}``, a small public table given inline. Queries: ``noisy_count(eps)``,
``noisy_sum|noisy_average(eps, f, lo, hi)``, ``noisy_order_statistic(eps, frac, f, lo, hi)``,
``noisy_median(eps, f, lo, hi, options)`` and ``exponential_mechanism(eps, candidates,
scores)`` (one score expression per candidate), ``release(config, F)`` (a d_X release on the
owner's universe and metric: :mod:`dprivacy.service.releases`) and ``grouped(eps, by, keys,
aggs)``: one answer per public key of ``keys`` for ε in total (``by`` the key column or
expression; ``aggs`` maps names to ``{"how": "count"}`` or ``{"how": "sum"|"mean", "f", "lo",
"hi"}``; :mod:`dprivacy.tables.grouped`), answered as one list of values per key, in the
order of ``aggs``. On a PINQ source in zCDP mode (``notion = "zcdp"``): ``gaussian_count(rho)``
and ``gaussian_sum(rho, f, lo, hi)``, charged rho (every ε query there is charged ε²/2).

Before the JSON is even parsed, the body's size and its nesting depth are capped; then every
key, type, name and expression is checked here (:func:`parse_plan`), and the tables' own checks
run before the charge. Nothing in a plan is executable code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dprivacy.errors import UnsupportedOperationError, ValidationError
from dprivacy.service.config import ServiceConfig
from dprivacy.service.exprcodec import check_cost
from dprivacy.service.releases import check_release_query

__all__ = ["Plan", "parse_plan", "parse_table_request", "json_depth", "PLAN_VERSION",
           "QUERY_OPS", "STEP_OPS"]

PLAN_VERSION = 1
MAX_DEPTH = 64
MAX_TABLES = 8

_STR = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(rb"[\[\]{}]")
_SCALAR = (str, int, float, bool, type(None))

STEP_OPS: dict[str, set[str]] = {
    "where": {"pred"}, "select": {"exprs"}, "select_many": {"k", "f", "columns"},
    "group_by": {"key", "aggs"}, "distinct": set(), "take": {"n"}, "skip": {"n"},
    "partition": {"keys", "by", "part"}, "concat": {"other"}, "union": {"other"},
    "intersect": {"other"}, "except_": {"other"}, "join": {"other", "bound", "on", "right_on"},
    "product": {"public"}, "join_public": {"public", "on", "right_on"},
    "exclude": {"public", "on"}, "as_pinq": {"eps"},
}
QUERY_OPS: dict[str, set[str]] = {
    "noisy_count": {"eps"}, "noisy_sum": {"eps", "f", "lo", "hi"},
    "noisy_average": {"eps", "f", "lo", "hi"},
    "noisy_order_statistic": {"eps", "frac", "f", "lo", "hi", "options"},
    "noisy_median": {"eps", "f", "lo", "hi", "options"},
    "exponential_mechanism": {"eps", "candidates", "scores"},
    "release": {"config", "F"},
    "grouped": {"eps", "by", "keys", "aggs"},
    "gaussian_count": {"rho"}, "gaussian_sum": {"rho", "f", "lo", "hi"},
}
MAX_AGGS = 16
_OPTIONAL = {"columns", "right_on", "f", "lo", "hi", "options", "on"}


@dataclass(frozen=True)
class Plan:
    """A validated plan: the table, the query (None for schema or budget requests), and the
    names of the protected sources it reads."""

    table: dict[str, Any]
    query: dict[str, Any] | None
    sources: frozenset[str]

    @property
    def source(self) -> str:
        """The protected source the queried table starts from."""
        return str(self.table["source"])


def json_depth(raw: bytes) -> int:
    """The nesting depth of the JSON text ``raw`` (strings skipped), without parsing it."""
    depth = top = 0
    for b in _BRACKETS.findall(_STR.sub(b"", raw)):
        depth += 1 if b in (b"[", b"{") else -1
        top = max(top, depth)
    return top


def _load(raw: bytes, cfg: ServiceConfig) -> dict[str, Any]:
    if len(raw) > cfg.max_body_bytes:
        raise ValidationError(f"the request is larger than {cfg.max_body_bytes} bytes")
    if json_depth(raw) > MAX_DEPTH:
        raise ValidationError(f"the plan is nested deeper than {MAX_DEPTH} levels")

    def bad_constant(name: str) -> Any:
        raise ValidationError(f"{name} is not JSON (use {{\"float\": \"nan\"}} in a literal)")

    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=bad_constant)
    except ValidationError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValidationError("the request body is not valid UTF-8 JSON") from None
    if not isinstance(doc, dict):
        raise ValidationError("the request body must be a JSON object")
    if doc.get("v") != PLAN_VERSION:
        raise ValidationError(f"unknown plan version {doc.get('v')!r}: this service speaks "
                              f"version {PLAN_VERSION}")
    return doc


class _Checker:
    def __init__(self, cfg: ServiceConfig) -> None:
        self.cfg = cfg
        self.sources: set[str] = set()
        self.tables = 0

    # -------------------------------------------------------------- leaves
    def expr(self, x: Any, what: str, *, column_ok: bool = True) -> None:
        if column_ok and isinstance(x, str):
            return
        try:
            check_cost(x, max_growth=self.cfg.max_growth, max_tree=self.cfg.max_expr_nodes)
        except ValidationError as exc:
            raise ValidationError(f"{what}: {exc}") from None

    def number(self, x: Any, what: str) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValidationError(f"{what} must be a number")

    def integer(self, x: Any, what: str) -> None:
        if isinstance(x, bool) or not isinstance(x, int):
            raise ValidationError(f"{what} must be an integer")

    def names(self, x: Any, what: str, *, single_ok: bool = True) -> None:
        if single_ok and isinstance(x, str):
            return
        if not isinstance(x, list) or not x or not all(isinstance(c, str) for c in x):
            raise ValidationError(f"{what} must be a column name or a non-empty list of them")

    def scalars(self, x: Any, what: str, limit: int) -> None:
        if not isinstance(x, list) or not all(isinstance(v, _SCALAR) for v in x):
            raise ValidationError(f"{what} must be a list of JSON scalars")
        if len(x) > limit:
            raise ValidationError(f"{what} has more than {limit} items")

    def public(self, x: Any, what: str) -> None:
        if not isinstance(x, dict) or set(x) != {"columns", "rows"}:
            raise ValidationError(f"{what} must be {{\"columns\": [...], \"rows\": [[...]]}}")
        self.names(x["columns"], f"{what}.columns", single_ok=False)
        rows = x["rows"]
        if not isinstance(rows, list) or len(rows) > self.cfg.max_public_rows:
            raise ValidationError(f"{what}.rows must be a list of at most "
                                  f"{self.cfg.max_public_rows} rows")
        for r in rows:
            if not isinstance(r, list) or len(r) != len(x["columns"]) or \
                    not all(isinstance(v, _SCALAR) for v in r):
                raise ValidationError(f"{what}.rows: every row is a list of JSON scalars, one "
                                      "per column")

    # -------------------------------------------------------------- structure
    def table(self, t: Any, what: str = "table") -> None:
        self.tables += 1
        if self.tables > MAX_TABLES:
            raise ValidationError(f"the plan uses more than {MAX_TABLES} tables")
        if not isinstance(t, dict):
            raise ValidationError(f"{what} must be an object")
        if set(t) == {"public"}:
            self.public(t["public"], f"{what}.public")
            return
        if set(t) != {"source", "steps"} or not isinstance(t["source"], str) \
                or not isinstance(t["steps"], list):
            raise ValidationError(f"{what} must be {{\"source\": name, \"steps\": [...]}} or "
                                  "{\"public\": ...}")
        if self.cfg.source(t["source"]) is None:
            raise LookupError(t["source"])
        self.sources.add(t["source"])
        if len(t["steps"]) > self.cfg.max_plan_steps:
            raise ValidationError(f"{what} has more than {self.cfg.max_plan_steps} steps")
        for i, s in enumerate(t["steps"]):
            self.step(s, f"{what}.steps[{i}]")

    def keys(self, d: Any, ops: dict[str, set[str]], what: str) -> str:
        if not isinstance(d, dict) or not isinstance(d.get("op"), str) or d["op"] not in ops:
            raise ValidationError(f"{what}: \"op\" must be one of {sorted(ops)}")
        want = ops[d["op"]]
        got = set(d) - {"op"}
        if not got <= want or not (want - _OPTIONAL) <= got:
            raise ValidationError(f"{what} ({d['op']}): expected the keys {sorted(want)} "
                                  f"(optional: {sorted(want & _OPTIONAL)})")
        return str(d["op"])

    def step(self, s: Any, what: str) -> None:
        op = self.keys(s, STEP_OPS, what)
        if op == "where":
            self.expr(s["pred"], f"{what}.pred")
        elif op == "select":
            ex = s["exprs"]
            if not isinstance(ex, dict) or not ex:
                raise ValidationError(f"{what}.exprs must be a non-empty object name -> expression")
            for k, v in ex.items():
                self.expr(v, f"{what}.exprs[{k!r}]")
        elif op == "select_many":
            self.integer(s["k"], f"{what}.k")
            self.expr(s["f"], f"{what}.f", column_ok=False)
            if s.get("columns") is not None:
                self.names(s["columns"], f"{what}.columns", single_ok=False)
        elif op == "group_by":
            key = s["key"]
            if isinstance(key, (str, list)):
                self.names(key, f"{what}.key")
            else:
                self.expr(key, f"{what}.key")
            aggs = s["aggs"]
            if not isinstance(aggs, dict) or not all(
                    isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
                    for v in aggs.values()):
                raise ValidationError(f"{what}.aggs must map names to [column, how]")
        elif op in ("take", "skip"):
            self.integer(s["n"], f"{what}.n")
        elif op == "partition":
            self.scalars(s["keys"], f"{what}.keys", self.cfg.max_candidates)
            self.expr(s["by"], f"{what}.by")
            if not isinstance(s["part"], _SCALAR) or s["part"] not in s["keys"]:
                raise ValidationError(f"{what}.part must be one of the keys")
        elif op in ("concat", "union", "intersect", "except_", "join"):
            self.table(s["other"], f"{what}.other")
            if op == "join":
                b = s["bound"]
                for x in (b if isinstance(b, list) and len(b) == 2 else [b]):
                    self.integer(x, f"{what}.bound")
                self.names(s["on"], f"{what}.on")
                if s.get("right_on") is not None:
                    self.names(s["right_on"], f"{what}.right_on")
        elif op in ("product", "join_public", "exclude"):
            self.public(s["public"], f"{what}.public")
            if op == "join_public":
                self.names(s["on"], f"{what}.on")
            if s.get("on") is not None:
                self.names(s["on"], f"{what}.on")
            if s.get("right_on") is not None:
                self.names(s["right_on"], f"{what}.right_on")
        elif op == "as_pinq":
            self.number(s["eps"], f"{what}.eps")

    def query(self, q: Any) -> None:
        op = self.keys(q, QUERY_OPS, "query")
        if op == "release":
            check_release_query(q, self.cfg.max_body_bytes)
            return
        if op == "grouped":
            self.grouped(q)
            return
        amount = "rho" if op.startswith("gaussian_") else "eps"
        self.number(q[amount], f"query.{amount}")
        for k in ("lo", "hi", "frac"):
            if q.get(k) is not None:
                self.number(q[k], f"query.{k}")
        if q.get("f") is not None:
            self.expr(q["f"], "query.f")
        if q.get("options") is not None:
            opts = q["options"]
            if not isinstance(opts, dict):
                raise ValidationError("query.options must be an object")
            for k, v in opts.items():
                if isinstance(v, list):
                    self.scalars(v, f"query.options[{k!r}]", self.cfg.max_candidates)
                elif not isinstance(v, _SCALAR):
                    raise ValidationError(f"query.options[{k!r}] must be a scalar or a list")
        if op == "exponential_mechanism":
            self.scalars(q["candidates"], "query.candidates", self.cfg.max_candidates)
            sc = q["scores"]
            if not isinstance(sc, list) or len(sc) != len(q["candidates"]) or not sc:
                raise ValidationError("query.scores must hold one expression per candidate")
            for i, e in enumerate(sc):
                self.expr(e, f"query.scores[{i}]", column_ok=False)


    def grouped(self, q: dict[str, Any]) -> None:
        self.number(q["eps"], "query.eps")
        self.scalars(q["keys"], "query.keys", self.cfg.max_candidates)
        self.expr(q["by"], "query.by")
        aggs = q["aggs"]
        if not isinstance(aggs, dict) or not aggs or len(aggs) > MAX_AGGS:
            raise ValidationError(f"query.aggs must name 1 to {MAX_AGGS} aggregations")
        for name, a in aggs.items():
            what = f"query.aggs[{name!r}]"
            if not isinstance(a, dict) or a.get("how") not in ("count", "sum", "mean"):
                raise ValidationError(f"{what} must be {{\"how\": \"count\"|\"sum\"|\"mean\", "
                                      "...}")
            want = {"how"} if a["how"] == "count" else {"how", "f", "lo", "hi"}
            if not set(a) <= want or not (want - {"f"}) <= set(a):
                raise ValidationError(f"{what} ({a['how']}): expected the keys {sorted(want)} "
                                      "(optional: ['f'])")
            for k in ("lo", "hi"):
                if k in a:
                    self.number(a[k], f"{what}.{k}")
            if a.get("f") is not None:
                self.expr(a["f"], f"{what}.f")


def parse_plan(raw: bytes, cfg: ServiceConfig) -> Plan:
    """Check a query request ``{"v", "table", "query"}`` (see the module doc).

    Raises:
        ValidationError: anything malformed (before any charge, independent of the data).
        LookupError: the plan names a source that does not exist (the service answers 404).
    """
    doc = _load(raw, cfg)
    if set(doc) != {"v", "table", "query"}:
        raise ValidationError("a query request is {\"v\", \"table\", \"query\"}")
    c = _Checker(cfg)
    c.table(doc["table"])
    if "source" not in doc["table"]:
        raise ValidationError("the queried table must start from a protected source")
    c.query(doc["query"])
    if doc["query"]["op"] == "release":
        src = cfg.source(doc["table"]["source"])
        if src is None or src.release is None:
            raise UnsupportedOperationError(
                f"source {doc['table']['source']!r} has no release universe and metric (the "
                "data owner configures them in [source.release])")
        if len(doc["query"]["F"]) > src.release.max_queries:
            raise ValidationError(f"query.F has more than {src.release.max_queries} queries")
    return Plan(doc["table"], doc["query"], frozenset(c.sources))


def parse_table_request(raw: bytes, cfg: ServiceConfig) -> Plan:
    """Check a schema or budget request ``{"v", "table"}`` (see :func:`parse_plan`)."""
    doc = _load(raw, cfg)
    if set(doc) != {"v", "table"}:
        raise ValidationError("a schema or budget request is {\"v\", \"table\"}")
    c = _Checker(cfg)
    c.table(doc["table"])
    if "source" not in doc["table"]:
        raise ValidationError("the table must start from a protected source")
    return Plan(doc["table"], None, frozenset(c.sources))
