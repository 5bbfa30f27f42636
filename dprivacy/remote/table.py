"""RemoteTable: the PINQ / ProPer table API, built as a data-free plan and run by the service.

Each transformation returns a new :class:`RemoteTable` whose plan has one more step; the service
checks it at once (and returns the derived table's public schema, on which later expressions are
resolved), so a bad argument fails where it is written, as with an in-process table. Each noisy
aggregation sends the whole plan and returns the service's answer, released at the query's
deadline. Budgets are charged by the service, before it computes anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.remote.errors import ServiceError
from dprivacy.service.exprcodec import encode
from dprivacy.service.plan import PLAN_VERSION

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RemoteTable", "RemoteGrouped"]


class _Requester(Protocol):
    """What a remote table needs of its :class:`~dprivacy.remote.Session` (which creates the
    tables, so this module does not import it): one authenticated request."""

    def request(self, method: str, path: str, body: Any = None) -> Any: ...


def _py(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    if v is not None and not isinstance(v, (str, int, float, bool)):
        raise ValidationError(f"a public table value of type {type(v).__name__} cannot be sent; "
                              "use numbers, strings, booleans or None")
    return v


def _public(df: Any) -> dict[str, Any]:
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ValidationError(f"expected a public pandas DataFrame, got {type(df).__name__}")
    return {"columns": [str(c) for c in df.columns],
            "rows": [[_py(v) for v in row] for row in df.itertuples(index=False, name=None)]}


def _options(options: dict[str, Any]) -> dict[str, Any]:
    def one(v: Any) -> Any:
        if isinstance(v, (list, tuple)) or getattr(v, "ndim", 0) > 0:
            return [_py(x) for x in v]
        return _py(v)

    return {k: one(v) for k, v in options.items()}


class RemoteTable:
    """A protected table held by the service (see the module doc).

    Parameters:
        session: the :class:`~dprivacy.remote.Session`.
        plan: the table part of the plan (``{"source", "steps"}``).
        kind: ``"pinq"`` or ``"proper"`` (the source's).
        schema: ``[[column, ibis type], ...]`` of this table.
    """

    def __init__(self, session: _Requester, plan: dict[str, Any], kind: str,
                 schema: list[list[str]]) -> None:
        self._session = session
        self._plan = plan
        self.kind = kind
        self._schema = schema

    # ------------------------------------------------------------------ plumbing
    @property
    def columns(self) -> list[str]:
        """Column names (public)."""
        return [c for c, _ in self._schema]

    @property
    def schema(self) -> dict[str, str]:
        """Column name -> Ibis type (public)."""
        return {c: t for c, t in self._schema}

    @property
    def plan(self) -> dict[str, Any]:
        """The data-free plan of this table (what the service receives)."""
        return self._plan

    def _unbound(self) -> Any:
        import ibis

        return ibis.table(ibis.schema({c: t for c, t in self._schema}), name="records")

    def _expr(self, f: Any, what: str, *, column_ok: bool = True) -> Any:
        """A column name, or the wire form of the row-wise expression ``f``."""
        import ibis
        import ibis.expr.types as ir
        from ibis.common.deferred import Deferred

        if f is None:
            return None
        if isinstance(f, str) and column_ok:
            if f not in self.columns:
                raise ValidationError(f"{what}: {f!r} is not a column; columns are {self.columns}")
            return f
        t = self._unbound()
        try:
            if isinstance(f, str):
                v = t[f]
            elif isinstance(f, Deferred):
                v = f.resolve(t)
            elif isinstance(f, ir.Value):
                v = f
            elif callable(f):
                v = f(t)
                if isinstance(v, Deferred):
                    v = v.resolve(t)
                elif isinstance(v, (list, tuple)):
                    v = ibis.array([x.resolve(t) if isinstance(x, Deferred) else x for x in v])
                elif isinstance(v, dict):
                    v = ibis.struct({k: x.resolve(t) if isinstance(x, Deferred) else x
                                     for k, x in v.items()})
            elif isinstance(f, (bool, int, float)):
                v = ibis.literal(f)
            else:
                raise ValidationError(f"{what}: got a {type(f).__name__}; expected an Ibis "
                                      "expression such as `ibis._.age > 40` or a column name")
        except ValidationError:
            raise
        except Exception as exc:
            raise ValidationError(f"{what}: the expression does not apply to the columns "
                                  f"{self.columns}: {type(exc).__name__}: {exc}") from None
        if not isinstance(v, ir.Value):
            raise ValidationError(f"{what}: expected an Ibis value expression, got "
                                  f"{type(v).__name__}")
        return encode(v)

    def _step(self, step: dict[str, Any]) -> RemoteTable:
        plan = {"source": self._plan["source"], "steps": [*self._plan["steps"], step]}
        got = self._session.request("POST", "/v1/schema", {"v": PLAN_VERSION, "table": plan})
        return RemoteTable(self._session, plan, self.kind, got["schema"])

    def _other(self, other: Any) -> dict[str, Any]:
        if isinstance(other, RemoteTable):
            if other._session is not self._session:
                raise ValidationError("both tables must come from the same session")
            return other._plan
        return {"public": _public(other)}

    def _ask(self, query: dict[str, Any]) -> Any:
        body = {"v": PLAN_VERSION, "table": self._plan, "query": query}
        return self._session.request("POST", "/v1/query", body)["value"]

    # ------------------------------------------------------------------ transformations
    def where(self, f: Any) -> RemoteTable:
        """Records for which the row-wise predicate holds (``ibis._.age > 40``)."""
        return self._step({"op": "where", "pred": self._expr(f, "where")})

    def select(self, f: Any = None, /, **named: Any) -> RemoteTable:
        """One output record per record: ``select(f)`` (column ``value``) or ``select(a=f, ...)``."""
        if f is not None and named:
            raise ValidationError("select: give either one expression or named ones, not both")
        exprs = {"value": f} if f is not None else named
        if not exprs:
            raise ValidationError("select: give at least one output column")
        return self._step({"op": "select", "exprs": {k: self._expr(v, f"select({k}=...)")
                                                     for k, v in exprs.items()}})

    def select_many(self, k: int, f: Any, columns: Sequence[str] | None = None) -> RemoteTable:
        """Flat-map: at most ``k`` outputs per record from the array expression ``f``."""
        return self._step({"op": "select_many", "k": k,
                           "f": self._expr(f, "select_many", column_ok=False),
                           "columns": None if columns is None else list(columns)})

    def group_by(self, key: Any = None, *, keys: Iterable[Hashable] | None = None,
                 column: Any = None, **aggs: tuple[str, str]) -> Any:
        """One record per group (PINQ; stability 2): key column(s) or a key expression.

        With ``keys=`` (a public key set): a :class:`RemoteGrouped`, whose ``agg(eps,
        n=Count(), ...)`` gives one noisy answer per listed key for ε in total, in one request
        (see :mod:`dprivacy.tables.grouped`)."""
        if keys is not None or column is not None:
            if aggs:
                raise ValidationError("group_by(keys=...): name the aggregations in .agg()")
            if key is not None and column is not None:
                raise ValidationError("group_by: give the key column once (key or column=)")
            return RemoteGrouped(self, keys, column if column is not None else key)
        if key is None:
            raise ValidationError("group_by: give the key column(s) or a key function")
        k = list(key) if isinstance(key, (list, tuple)) else (
            key if isinstance(key, str) else self._expr(key, "group_by"))
        return self._step({"op": "group_by", "key": k,
                           "aggs": {n: list(v) for n, v in aggs.items()}})

    def distinct(self) -> RemoteTable:
        """Distinct records."""
        return self._step({"op": "distinct"})

    def take(self, n: int) -> RemoteTable:
        """The first ``n`` records (stability 2)."""
        return self._step({"op": "take", "n": n})

    def skip(self, n: int) -> RemoteTable:
        """All but the first ``n`` records (stability 2)."""
        return self._step({"op": "skip", "n": n})

    def partition(self, keys: Iterable[Hashable], f: Any) -> dict[Hashable, RemoteTable]:
        """The parts of ``f`` (a column or a key expression) for the explicit public ``keys``."""
        klist = [_py(k) for k in keys]
        by = self._expr(f, "partition")
        return {k: self._step({"op": "partition", "keys": klist, "by": by, "part": k})
                for k in klist}

    def concat(self, other: Any) -> RemoteTable:
        """Multiset union with another table of the session or a public DataFrame."""
        return self._step({"op": "concat", "other": self._other(other)})

    def union(self, other: Any) -> RemoteTable:
        """Set union (PINQ)."""
        return self._step({"op": "union", "other": self._other(other)})

    def intersect(self, other: Any) -> RemoteTable:
        """Distinct records present in both (PINQ)."""
        return self._step({"op": "intersect", "other": self._other(other)})

    def except_(self, other: Any) -> RemoteTable:
        """Distinct records of self absent from other (PINQ)."""
        return self._step({"op": "except_", "other": self._other(other)})

    def join(self, other: Any, bound: int | tuple[int, int], on: str | list[str],
             right_on: str | list[str] | None = None) -> RemoteTable:
        """Bounded equi-join (PINQ)."""
        return self._step({"op": "join", "other": self._other(other),
                           "bound": list(bound) if isinstance(bound, tuple) else bound,
                           "on": on, "right_on": right_on})

    def product(self, public: pd.DataFrame) -> RemoteTable:
        """Product with a public table (ProPer)."""
        return self._step({"op": "product", "public": _public(public)})

    def join_public(self, public: pd.DataFrame, on: str | list[str],
                    right_on: str | list[str] | None = None) -> RemoteTable:
        """Equi-join with a public table (ProPer)."""
        return self._step({"op": "join_public", "public": _public(public), "on": on,
                           "right_on": right_on})

    def exclude(self, public: pd.DataFrame, on: list[str] | None = None) -> RemoteTable:
        """Remove the records listed in a public table (ProPer)."""
        return self._step({"op": "exclude", "public": _public(public), "on": on})

    def as_pinq(self, eps: float) -> RemoteTable:
        """ProPer -> PINQ at ε (POPL'15 §6.2), as in process: the first query on the result
        charges each involved person ε and makes a PINQ table of global budget ε (its
        :meth:`remaining_budget`), which every later query on the same plan spends, while the
        service runs (a restarted service charges the people ε again: conservative)."""
        return self._step({"op": "as_pinq", "eps": eps})

    # ------------------------------------------------------------------ aggregations
    @staticmethod
    def _number(value: Any) -> float:
        """A numeric answer; a clear error where the service answered none (its default answer
        itself failed on the data owner's side, which the owner's log explains)."""
        if value is None:
            raise ServiceError("the service answered no value: the default answer of this query "
                               "failed on the data owner's side")
        return float(value)

    def noisy_count(self, eps: float) -> float:
        """|T| + Lap(1/ε)."""
        return self._number(self._ask({"op": "noisy_count", "eps": eps}))

    def noisy_sum(self, eps: float, f: Any = None, lo: float = -1.0, hi: float = 1.0) -> float:
        """Σ clamp(f(x), lo, hi) + Lap(max(|lo|, |hi|)/ε)."""
        return self._number(self._ask({"op": "noisy_sum", "eps": eps, "f": self._expr(f, "f"),
                                "lo": lo, "hi": hi}))

    def gaussian_count(self, rho: float) -> float:
        """|T| + discrete Gaussian noise of sigma = 1/sqrt(2 rho) (a PINQ source in zCDP mode)."""
        return self._number(self._ask({"op": "gaussian_count", "rho": rho}))

    def gaussian_sum(self, rho: float, f: Any = None, lo: float = -1.0, hi: float = 1.0) -> float:
        """Σ clamp(f(x), lo, hi) + N(0, sigma²), sigma = max(|lo|, |hi|)/sqrt(2 rho) (zCDP mode)."""
        return self._number(self._ask({"op": "gaussian_sum", "rho": rho, "f": self._expr(f, "f"),
                                "lo": lo, "hi": hi}))

    def noisy_average(self, eps: float, f: Any = None, lo: float = -1.0,
                      hi: float = 1.0) -> float:
        """Noisy average of clamp(f(x), lo, hi)."""
        return self._number(self._ask({"op": "noisy_average", "eps": eps, "f": self._expr(f, "f"),
                                "lo": lo, "hi": hi}))

    def noisy_order_statistic(self, eps: float, frac: float, f: Any = None,
                              lo: float | None = None, hi: float | None = None,
                              **options: Any) -> float:
        """The ``frac``-quantile of clamp(f(x), lo, hi), as the table computes it (``options``
        are its keyword arguments, e.g. ``candidates``: a public list or a grid size)."""
        return self._number(self._ask({"op": "noisy_order_statistic", "eps": eps, "frac": frac,
                                "f": self._expr(f, "f"), "lo": lo, "hi": hi,
                                "options": _options(options)}))

    def noisy_median(self, eps: float, f: Any = None, lo: float | None = None,
                     hi: float | None = None, **options: Any) -> float:
        """The table's noisy median (``options``, e.g. ``candidates``, are passed to it)."""
        return self._number(self._ask({"op": "noisy_median", "eps": eps, "f": self._expr(f, "f"),
                                "lo": lo, "hi": hi, "options": _options(options)}))

    def exponential_mechanism(self, eps: float, candidates: Sequence[Any],
                              score: Callable[[Any, Any], Any]) -> Any:
        """A candidate r with probability ∝ exp(ε·Σ_x clamp(score(x, r), 0, 1)); ``score(t, c)``
        returns a row-wise expression on the table ``t`` for the public candidate ``c``."""
        if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
            raise ValidationError("candidates must be a list (or tuple) of public candidates")
        cands = [_py(c) for c in candidates]
        scores = [self._expr(lambda t, c=c: score(t, c), f"score(candidate {i})",
                             column_ok=False) for i, c in enumerate(cands)]
        return self._ask({"op": "exponential_mechanism", "eps": eps, "candidates": cands,
                          "scores": scores})

    def count_by(self, keys: Iterable[Hashable], column: Any, eps: float
                 ) -> dict[Hashable, float]:
        """A noisy count per key of a PUBLIC list of keys, ε in total, in one request:
        ``{key: |T_key| + Lap(1/ε)}`` (as :meth:`dprivacy.tables.Queryable.count_by`)."""
        return RemoteGrouped(self, keys, column).count(eps)

    # ------------------------------------------------------------------ budget
    def remaining_budget(self) -> float | list[float]:
        """The remaining PINQ budget of this analyst on the table's source(s), or of an
        ``as_pinq`` table. ProPer budgets are personal and never revealed (the service
        refuses)."""
        return self._session.request("POST", "/v1/budget",
                                     {"v": PLAN_VERSION, "table": self._plan})["remaining"]

    def release_inputs(self) -> tuple[Any, Any]:
        """The data owner's (universe, metric) for :meth:`release` on this table's source, as
        :class:`~dprivacy.Universe` and metric objects to design with."""
        from dprivacy.service.releases import rebuild

        src = self._plan["source"]
        return rebuild(self._session.request("GET", f"/v1/sources/{src}/release"))

    def release(self, workload: Any, design: Any, universe: Any = None, *,
                metric: Any = None) -> np.ndarray:
        """d_X Laplace release (w⊙F)x + Lap(1/β) of the table's histogram x over the owner's
        universe, as :meth:`dprivacy.tables.Queryable.release` (PINQ: charges s·max_i c_i;
        ProPer: each record's c_i, records that cannot pay silently left out).

        ``design``: a :class:`~dprivacy.Design` or :class:`~dprivacy.StrategyDesign` (made for
        the universe and metric of :meth:`release_inputs`) or a
        :class:`~dprivacy.MechanismConfig` of kind ``"laplace"`` or ``"strategy"`` (a strategy
        also releases the number of records with noise, charged as in
        :mod:`dprivacy.tables.dx`).
        ``universe`` and ``metric``, if given, must be the owner's (the service verifies the
        design against its own, whatever is given here). The service receives only F and the
        config's JSON text, re-verifies them and charges before it counts anything."""
        from dprivacy.config import MechanismConfig
        from dprivacy.errors import ConfigMismatchError
        from dprivacy.workload import Workload

        W = workload if isinstance(workload, Workload) else Workload(workload)  # noqa: N806
        U, M = self.release_inputs()  # noqa: N806
        for mine, what in ((universe, "universe"), (metric, "metric")):
            if mine is None:
                continue
            fp = mine.fingerprint() if what == "universe" else mine.fingerprint(U)
            want = U.fingerprint() if what == "universe" else M.fingerprint(U)
            if fp != want:
                raise ConfigMismatchError(f"the {what} given is not the data owner's: design "
                                          "for the inputs of release_inputs()")
        if isinstance(design, MechanismConfig):
            text = design.to_json()
        else:
            text = MechanismConfig.from_design(W, U, M, design).to_json()
        F = W.F.toarray() if hasattr(W.F, "toarray") else np.asarray(W.F)  # noqa: N806
        value = self._ask({"op": "release", "config": text,
                           "F": np.asarray(F, dtype=float).tolist()})
        return np.array([np.nan if v is None else v for v in value], dtype=float)

    def __repr__(self) -> str:
        return f"RemoteTable({self._plan['source']!r}, kind={self.kind!r}, " \
               f"steps={len(self._plan['steps'])})"


class RemoteGrouped:
    """A remote table grouped by a public key set (``group_by(keys=..., column=...)``): each
    :meth:`agg` is one request, answered at one deadline (see :mod:`dprivacy.tables.grouped`)."""

    def __init__(self, table: RemoteTable, keys: Iterable[Hashable] | None, column: Any) -> None:
        if keys is None or isinstance(keys, (str, bytes)):
            raise ValidationError("keys must be a list of public keys")
        if column is None:
            raise ValidationError("group_by(keys=...): give the key column (column=) or a "
                                  "row-wise key expression")
        self._table = table
        self._keys = [_py(k) for k in keys]
        self._by = table._expr(column, "group key")
        self._name = column if isinstance(column, str) else "key"

    @property
    def keys(self) -> list[Hashable]:
        """The public keys, in the order given."""
        return list(self._keys)

    def _wire(self, name: str, a: Any) -> dict[str, Any]:
        from dprivacy.tables.grouped import Count, Mean, Sum

        if isinstance(a, Count):
            return {"how": "count"}
        if isinstance(a, (Sum, Mean)):
            return {"how": a.how, "f": self._table._expr(a.f, f"agg({name}=...)"),
                    "lo": _py(a.lo), "hi": _py(a.hi)}
        raise ValidationError(f"agg({name}=...): expected Count(), Sum(f, lo, hi) or "
                              f"Mean(f, lo, hi), got {type(a).__name__}")

    def agg(self, eps: float, **aggs: Any) -> pd.DataFrame:
        """One row per public key, one column per named aggregation (``Count()``,
        ``Sum(f, lo, hi)``, ``Mean(f, lo, hi)`` of :mod:`dprivacy.tables.grouped`), for ε in
        total; one request."""
        import pandas as pd

        if not aggs:
            raise ValidationError("agg: name at least one aggregation, e.g. n=Count()")
        wire = {str(n): self._wire(str(n), a) for n, a in aggs.items()}
        rows = self._table._ask({"op": "grouped", "eps": eps, "by": self._by,
                                 "keys": self._keys, "aggs": wire})
        if not isinstance(rows, list) or len(rows) != len(self._keys):
            raise ServiceError("the service answered no value: the default answer of this "
                               "query failed on the data owner's side")
        data = np.array([[np.nan if v is None else v for v in r] for r in rows], dtype=float)
        index = pd.Index(self._keys, dtype=object, tupleize_cols=False, name=self._name)
        return pd.DataFrame(data.reshape(len(self._keys), len(wire)), columns=list(wire),
                            index=index)

    def count(self, eps: float) -> dict[Hashable, float]:
        """``{key: n_key + Lap(1/ε)}`` for every public key, ε in total; one request."""
        from dprivacy.tables.grouped import Count

        out = self.agg(eps, count=Count())["count"]
        return {k: float(v) for k, v in zip(self._keys, out.to_numpy(), strict=True)}

    def __repr__(self) -> str:
        return f"RemoteGrouped(keys={len(self._keys)}, by={self._name!r})"
