"""Row-wise analyst expressions: an allow-list checker and a totality rewrite for Ibis expressions.

An analyst's transformation on an engine-backed table is an Ibis value expression (``_.age > 17``,
``lambda t: t.age // 10``). Before anything runs, it is resolved against a *public, unbound* table
that has only the schema (so the analyst's code never sees a row, a count or a connection), and
every node of its graph is checked against an allow-list of **row-wise scalar operations**: the
value of an output record may depend only on the one input record it comes from (PINQ §4: a
Where/Select is 1-stable only if each output row is a function of one input row). Refused, with
an :class:`~dprivacy.errors.UnsupportedOperationError` whose message depends only on the
expression:

* reductions (``_.age.max()``), window and analytic functions (``.over(...)``,
  ``ibis.row_number()``), subqueries and any reference to another table (joins by the back door);
* nondeterministic operations (``ibis.random()``, ``ibis.uuid()``, ``ibis.now()``), user-defined
  functions (Python or builtin UDFs), query parameters, ``unnest`` (use ``select_many``);
* every operation not on the allow-list (the list is explicit, so an operation added by a future
  Ibis release is refused until someone reviews it).

**Totality.** A row-wise expression must not fail on data: an exception raised by one record
would reveal that the record is present (an overflow leak). :func:`make_total`
rewrites the checked expression so that no record can make it raise: casts become ``TRY_CAST``
(NULL when a value does not convert), integer and decimal ``+ - * // % abs neg`` are computed in
float64 and cast back with ``TRY_CAST`` (out of range -> NULL), and a zero divisor of ``/ // %``
gives NULL. Operations that can fail in other ways (string repetition and padding, shifts, date
arithmetic, integer ranges, regular expressions) are simply not on the list. Engines add their
own layer (the compiled SQL's casts are ``TRY_CAST`` too).

Examples:
    >>> import ibis
    >>> from ibis import _
    >>> t = public_table(ibis.schema({"age": "int64", "name": "string"}))
    >>> v = resolve_rowwise(_.age > 17, t, what="where")
    >>> resolve_rowwise(_.age > _.age.max(), t, what="where")
    Traceback (most recent call last):
    ...
    dprivacy.tables.relations.engine.rowwise.NotRowwiseError: where: the expression uses Max, an aggregate ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ibis
import ibis.expr.datatypes as dt
import ibis.expr.operations as ops
import ibis.expr.rules as rlz
import ibis.expr.types as ir
from ibis.backends.sql.compilers.base import SQLGlotCompiler
from ibis.backends.sql.compilers.duckdb import DuckDBCompiler
from ibis.common.deferred import Deferred

from dprivacy.errors import DPrivacyError, UnsupportedOperationError, ValidationError

__all__ = [
    "NotRowwiseError", "ALLOWED", "public_table", "resolve_rowwise", "check_rowwise",
    "make_total", "rebind",
]

_PUBLIC_NAME = "records"


class NotRowwiseError(ValidationError, UnsupportedOperationError):
    """An analyst expression is not row-wise (or not provably total); nothing was charged.

    It is both a :class:`~dprivacy.errors.ValidationError` (bad analyst input) and an
    :class:`~dprivacy.errors.UnsupportedOperationError` (an operation tables refuse)."""


def _ops(*names: str) -> frozenset[type]:
    return frozenset(getattr(ops, n) for n in names)


#: The allow-list: exact operation classes (``type(node) in ALLOWED``; subclasses are NOT allowed,
#: so a UDF class derived from an allowed one is still refused).
ALLOWED: frozenset[type] = _ops(
    # structure and constants
    "Alias", "Literal", "Argument", "E", "Pi",
    # generic
    "Cast", "TryCast", "Coalesce", "Greatest", "Least", "IsNull", "NotNull", "NullIf",
    "SearchedCase", "SimpleCase", "IfElse",
    # logical / comparisons
    "And", "Or", "Not", "Xor", "Equals", "NotEquals", "Greater", "GreaterEqual", "Less",
    "LessEqual", "Between", "InValues", "IdenticalTo",
    # numeric (made total by make_total where they could raise)
    "Abs", "Add", "Subtract", "Multiply", "Divide", "FloorDivide", "Modulus", "Negate", "Sign",
    "Ceil", "Floor", "Round", "Clip", "Sqrt", "Exp", "Ln", "Log", "Log2", "Log10", "Power",
    "Acos", "Asin", "Atan", "Atan2", "Cos", "Cot", "Sin", "Tan", "Degrees", "Radians", "IsNan",
    "IsInf", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Bucket",
    # strings (no regular expressions, repetition or padding: those can fail on data)
    "Lowercase", "Uppercase", "Capitalize", "Strip", "LStrip", "RStrip", "StringLength",
    "Substring", "StartsWith", "EndsWith", "StringContains", "StringConcat", "StringSplit",
    "StringReplace", "Reverse", "StringFind", "StringSQLLike", "StringSQLILike", "ArrayStringJoin",
    "StrRight", "StringAscii",
    # dates and times: field extraction only (no arithmetic, which can overflow)
    "ExtractYear", "ExtractMonth", "ExtractDay", "ExtractHour", "ExtractMinute", "ExtractSecond",
    "ExtractQuarter", "ExtractDayOfYear", "ExtractWeekOfYear", "DayOfWeekIndex", "Date",
    # arrays and structs held by the record itself
    "Array", "ArrayLength", "ArrayIndex", "ArraySlice", "ArrayContains", "ArrayConcat",
    "ArraySort", "ArrayDistinct", "ArrayMap", "ArrayFilter", "ArrayMin", "ArrayMax",
    "ArrayRemove", "ArrayFlatten", "StructColumn", "StructField",
)

# Refused classes with a specific reason (checked by isinstance, most specific first).
_REASONS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((ops.ScalarUDF, ops.AggUDF, ops.ElementWiseVectorizedUDF, ops.ReductionVectorizedUDF,
      ops.AnalyticVectorizedUDF), "a user-defined function (its code cannot be inspected)"),
    ((ops.WindowFunction, ops.Analytic, ops.WindowAggregate),
     "a window or analytic function (its value depends on other records)"),
    ((ops.Reduction,), "an aggregate (its value depends on every record)"),
    ((ops.Subquery,), "a subquery (its value depends on other records or tables)"),
    ((ops.RandomScalar, ops.RandomUUID, ops.TimestampNow, ops.DateNow, ops.Impure),
     "a nondeterministic function (re-running a plan must give the same records)"),
    ((ops.ScalarParameter,), "a query parameter"),
    ((ops.Unnest,), "unnest (use select_many(k, f) with an array expression)"),
    ((ops.RowID,), "a row id (the order of records is not part of a table)"),
    ((ops.Relation,), "a table expression (only the record's own columns may be used)"),
)


def public_table(schema: Any) -> ir.Table:
    """An unbound Ibis table with ``schema`` and no data: what analyst expressions are resolved on.

    Parameters:
        schema: an Ibis schema (or anything ``ibis.schema`` accepts) of the public columns.

    Returns:
        The unbound table ``records``.

    Examples:
        >>> public_table({"age": "int64"}).columns
        ('age',)
    """
    return ibis.table(ibis.schema(schema), name=_PUBLIC_NAME)


def _describe(f: Any) -> str:
    return f"{type(f).__module__}.{type(f).__qualname__}"


def resolve_rowwise(f: Any, table: ir.Table, *, what: str) -> ir.Value:
    """Resolve the analyst's ``f`` on the public ``table``, check it is row-wise, make it total.

    Parameters:
        f: an Ibis deferred expression (``_.age > 17``), a function of the table returning an
            Ibis value expression (``lambda t: t.age > 17``; it receives the unbound public table,
            never data; a returned Python list of expressions becomes an array, a dict a
            struct, as ``select_many`` needs), a column name, an Ibis value expression built
            on ``table``, or a Python scalar (a constant column).
        table: the public table from :func:`public_table`.
        what: the operation's name, for error messages (``"where"``, ``"select(band=...)"``).

    Returns:
        The checked, total value expression, still bound to ``table`` (see :func:`rebind`).

    Raises:
        ValidationError: ``f`` is not an expression, or does not resolve on the schema.
        NotRowwiseError: ``f`` uses an operation that is not row-wise (see the module doc).
    """
    try:
        if isinstance(f, Deferred):
            v = f.resolve(table)
        elif isinstance(f, ir.Value):
            v = f
        elif isinstance(f, str):
            v = table[f]
        elif isinstance(f, ir.Table):
            raise ValidationError(f"{what}: got a table; expected a value expression (a column)")
        elif callable(f):
            v = f(table)
            if isinstance(v, Deferred):
                v = v.resolve(table)
            elif isinstance(v, (list, tuple, dict)):  # a list of outputs (select_many), a record
                v = _literal_structure(v, table)
        elif isinstance(f, (bool, int, float)) or f is None:
            v = ibis.literal(f)
        else:
            raise ValidationError(
                f"{what}: got a {_describe(f)}; expected an Ibis expression such as `_.age > 17` "
                "(from ibis import _), a function of the table such as `lambda t: t.age > 17`, or a "
                "column name"
            )
    except DPrivacyError:
        raise
    except Exception as exc:  # ibis's own messages depend only on the schema (no data is bound)
        raise ValidationError(f"{what}: the expression does not apply to the table's columns "
                              f"{list(table.columns)}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(v, ir.Value):
        raise ValidationError(
            f"{what}: the function returned a {_describe(v)}; expected an Ibis value expression "
            "(tables on engines take Ibis expressions, e.g. `lambda t: t.age > 17`, not Python "
            "callables of a record)"
        )
    check_rowwise(v, table, what=what)
    return make_total(v)


def _literal_structure(v: Any, table: ir.Table) -> Any:
    """A Python list (of values, lists or dicts of expressions) as an Ibis array / struct."""
    if isinstance(v, Deferred):
        return v.resolve(table)
    if isinstance(v, dict):
        return ibis.struct({k: _literal_structure(x, table) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return ibis.array([_literal_structure(x, table) for x in v])
    return v


def check_rowwise(v: ir.Value, table: ir.Table, *, what: str) -> None:
    """Raise :class:`NotRowwiseError` unless every node of ``v`` is allowed and every column it
    reads is a column of ``table`` itself. The message names the first offending operation."""
    root = v.op()
    own = table.op()
    seen: set[int] = set()
    stack: list[ops.Node] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is ops.Field:
            if node.rel != own:
                raise NotRowwiseError(f"{what}: the expression reads column {node.name!r} of "
                                      "another table; only the record's own columns may be used")
            continue  # do not walk into the table itself
        if type(node) not in ALLOWED:
            raise NotRowwiseError(f"{what}: the expression uses {type(node).__name__}, "
                                  f"{_reason(node)}; transformations must be row-wise")
        for child in node.__children__:
            stack.append(child)
    if isinstance(v, ir.Scalar) and not _only_literals(root):
        raise NotRowwiseError(f"{what}: the expression is a scalar; transformations must be "
                              "row-wise")


def _only_literals(node: ops.Node) -> bool:
    return not any(type(n) is ops.Field for n in node.find(ops.Field))


def _reason(node: ops.Node) -> str:
    for classes, reason in _REASONS:
        if isinstance(node, classes):
            return reason
    return "which is not on the allow-list of row-wise operations"


_INT_ARITH = (ops.Add, ops.Subtract, ops.Multiply, ops.FloorDivide, ops.Modulus)
_F64 = dt.float64


def _exact_numeric(t: dt.DataType) -> bool:
    return t.is_integer() or t.is_decimal()


def _f64(x: ops.Value) -> ops.Value:
    return x if x.dtype == _F64 else ops.Cast(x, _F64)


def _nonzero(x: ops.Value) -> ops.Value:
    return ops.NullIf(_f64(x), ops.Literal(0.0, _F64))


# integer position/length arguments that compilers shift by one (1-based SQL): clamped so that
# the shift cannot overflow (no array or string is longer than 2^31 anyway)
_POSITIONS = {ops.ArrayIndex: ("index",), ops.ArraySlice: ("start", "stop"),
              ops.Substring: ("start", "length"), ops.StrRight: ("nchars",),
              ops.StringFind: ("start", "end")}
_BOUND = 2**31


def _clamp_position(x: Any) -> Any:
    if not isinstance(x, ops.Value) or not x.dtype.is_integer():
        return x
    return ops.Clip(ops.Cast(x, dt.int64), ops.Literal(-_BOUND, dt.int64),
                    ops.Literal(_BOUND, dt.int64))


def _total_node(node: ops.Node, kw: dict[str, Any] | None = None) -> ops.Node:
    """One rewrite step of :func:`make_total` (``kw``: the node's rewritten children, if any)."""
    new = node.__recreate__(kw) if kw else node
    kind = type(new)
    if kind in _POSITIONS:
        args = dict(zip(new.__argnames__, new.__args__, strict=True))
        for name in _POSITIONS[kind]:
            args[name] = _clamp_position(args[name])
        return kind(**args)
    if kind is ops.Cast:
        return ops.TryCast(new.arg, new.to)
    if kind in _INT_ARITH and _exact_numeric(new.dtype):
        if kind is ops.FloorDivide:
            flt: ops.Value = ops.Floor(ops.Divide(_f64(new.left), _nonzero(new.right)))
        elif kind is ops.Modulus:
            flt = ops.Modulus(_f64(new.left), _nonzero(new.right))
        else:
            flt = kind(_f64(new.left), _f64(new.right))
        return ops.TryCast(flt, new.dtype)
    if kind in (ops.Divide, ops.FloorDivide, ops.Modulus):
        return kind(new.left, _nonzero(new.right))
    if kind in (ops.Negate, ops.Abs) and _exact_numeric(new.dtype):
        return ops.TryCast(kind(_f64(new.arg)), new.dtype)
    return new


class DPTry(ops.Value):
    """Library-inserted guard (never accepted from analysts): the value of ``arg``, or NULL
    where evaluating it raises. DuckDB compiles it to ``TRY(arg)``; engines whose SQL cannot
    raise on data (Spark in non-ANSI mode) compile it to ``arg`` itself."""

    arg: ops.Value

    dtype = rlz.dtype_like("arg")
    shape = rlz.shape_like("arg")


def _visit_try_identity(self: Any, op: DPTry, *, arg: Any) -> Any:
    return arg


def _visit_try_duckdb(self: Any, op: DPTry, *, arg: Any) -> Any:
    return self.f.anon["try"](arg)


# Registered on Ibis's SQL compilers (dispatch is by ``visit_<OpClassName>``).
SQLGlotCompiler.visit_DPTry = _visit_try_identity
DuckDBCompiler.visit_DPTry = _visit_try_duckdb

# Operations whose compiled SQL cannot raise on any data: an expression made only of these (and
# columns) needs no TRY guard, which keeps filters such as `_.x > 0.5` at full engine speed.
_SAFE: frozenset[type] = _ops(
    "Alias", "Literal", "Equals", "NotEquals", "Greater", "GreaterEqual", "Less", "LessEqual",
    "And", "Or", "Not", "Xor", "IsNull", "NotNull", "Between", "InValues", "IdenticalTo",
    "IfElse", "SearchedCase", "SimpleCase", "Coalesce", "IsNan", "IsInf", "NullIf",
    "Lowercase", "Uppercase", "StringLength", "StartsWith", "EndsWith", "StringContains",
    "StringSQLLike", "StringSQLILike", "E", "Pi",
)


def needs_guard(node: ops.Node) -> bool:
    """Whether ``node`` holds an operation whose compiled SQL could raise on some data."""
    for n in node.find(ops.Value):
        if type(n) is ops.Field or type(n) in _SAFE:
            continue
        if type(n) in (ops.Add, ops.Subtract, ops.Multiply, ops.Divide) and n.dtype.is_floating() \
                and all(a.dtype.is_floating() or type(a) is ops.Literal for a in (n.left, n.right)):
            continue  # float arithmetic gives ±inf/NaN, never an error
        return True
    return False


def make_total(v: ir.Value) -> ir.Value:
    """Rewrite a checked row-wise expression so that no record can make it raise (module doc).

    The result has the same type and name as ``v``; values that used to raise are NULL.
    """
    root = v.op()
    out = root.replace(_total_node)
    if needs_guard(out):
        out = DPTry(out)
    expr = out.to_expr()
    return expr.name(v.get_name()) if _has_name(v) else expr


def _has_name(v: ir.Value) -> bool:
    try:
        v.get_name()
    except Exception:
        return False
    return True


def rebind(v: ir.Value, public: ir.Table, real: ir.Table) -> ir.Value:
    """The checked expression ``v`` with the public table replaced by the engine's ``real`` one
    (which has every public column, plus hidden ones the analyst could not name)."""
    return v.op().replace({public.op(): real.op()}).to_expr()


def is_boolean(v: ir.Value) -> bool:
    """Whether ``v`` is a boolean expression (a predicate)."""
    return bool(v.type().is_boolean())


Rowwise = Callable[..., Any] | Deferred | ir.Value | str
