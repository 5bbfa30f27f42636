"""Row-wise expressions on the wire: an Ibis operation graph as data-free JSON.

The client resolves the analyst's expression (``ibis._.age > 40``, ``lambda t: t.age // 10``,
a column name) on an *unbound* table that has only the public schema, and sends the resulting
operation graph as a list of nodes, each referring to earlier nodes by position (the last node
is the value)::

    {"expr": [{"op": "Field", "name": "age"},
              {"op": "Literal", "value": 40, "dtype": "int8"},
              {"op": "Greater", "args": {"left": {"ref": 0}, "right": {"ref": 1}}}]}

A node is ``Field`` (a column of the record, by name), ``Literal`` (a JSON value and an Ibis type
string), ``Argument`` (the parameter of an array ``map`` / ``filter`` body) or one of the Ibis
operation classes named in :data:`WIRE_OPS`, with its Ibis argument names. An argument is a
``{"ref": i}``, a ``{"dtype": "float64"}``, a ``{"tuple": [...]}``, a ``{"float": "nan" | "inf"
| "-inf"}`` or a JSON scalar. Nothing else can be expressed: no Python code, no table, no
attribute lookup. The server rebuilds the graph from these classes only, on its own public
table, and the table then checks it again against the engine's row-wise allow-list and makes it
total (see :mod:`dprivacy.tables.relations.engine`).

**Bounded per-row cost.** :func:`check_cost` bounds, without any data, how much longer than the
record's own longest string or array a value can get: ``len(out) <= g * L + c``. Concatenation
adds the bounds, ``replace`` with literal arguments multiplies by ``max(1, len(new) / len(old))``,
``split`` / ``join`` / array ``map`` multiply too; a ``replace`` whose pattern or replacement is
a column, or an array ``map`` whose body reads a column, has no bound in L and is refused. The
service refuses a growth factor ``g`` above its cap, and the size of the expanded expression tree
is capped as well, so a nested ``replace`` cannot make one record cost seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.tables.relations.engine.rowwise import ALLOWED

__all__ = ["WIRE_OPS", "encode", "decode", "check_cost", "Cost"]

#: The operations an expression on the wire may use (Ibis operation class names): exactly the
#: engines' row-wise allow-list, one list for both; the server checks the rebuilt graph against
#: that allow-list again before anything runs.
WIRE_OPS: frozenset[str] = frozenset(op.__name__ for op in ALLOWED)

_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_SCALARS = (str, int, float, bool, type(None))


# ---------------------------------------------------------------------------------- encode
def encode(value: Any) -> dict[str, Any]:
    """The wire form of a resolved Ibis value expression (client side).

    Parameters:
        value: an Ibis value expression built on an unbound table (only its columns are read).

    Returns:
        ``{"expr": [node, ...]}`` (see the module doc).

    Raises:
        ValidationError: the expression holds something that has no wire form (an operation not
            in :data:`WIRE_OPS`, a literal that is not a JSON value, another table).
    """
    import ibis.expr.operations as ops
    import ibis.expr.types as ir

    if not isinstance(value, ir.Value):
        raise ValidationError(f"expected an Ibis value expression, got a {type(value).__name__}")
    index: dict[int, int] = {}
    nodes: list[dict[str, Any]] = []
    keep: list[Any] = []  # nodes stay alive while their id() is an index key
    stack: list[tuple[Any, bool]] = [(value.op(), False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in index:
            continue
        kids = [] if isinstance(node, (ops.Field, ops.Literal)) else [
            c for c in node.__children__ if not isinstance(c, ops.Relation)]
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in index)
            continue
        index[id(node)] = len(nodes)
        keep.append(node)
        nodes.append(_encode_node(node, index))
    return {"expr": nodes}


def _encode_node(node: Any, index: dict[int, int]) -> dict[str, Any]:
    import ibis.expr.operations as ops

    name = type(node).__name__
    if type(node) is ops.Field:
        return {"op": "Field", "name": str(node.name)}
    if type(node) is ops.Literal:
        return {"op": "Literal", "value": _encode_literal(node.value), "dtype": str(node.dtype)}
    if type(node) is ops.Argument:
        return {"op": "Argument", "name": str(node.name), "dtype": str(node.dtype)}
    if name not in WIRE_OPS or getattr(ops, name, None) is not type(node):
        raise ValidationError(f"the expression uses {name}, which is not one of the row-wise "
                              "operations a remote table accepts")
    args = {k: _encode_arg(a, index) for k, a in zip(node.__argnames__, node.__args__, strict=True)}
    return {"op": name, "args": args}


def _encode_literal(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, _SCALARS):
        return v
    if isinstance(v, (tuple, list)):
        return [_encode_literal(x) for x in v]
    raise ValidationError(f"a literal of type {type(v).__name__} cannot be sent; use numbers, "
                          "strings, booleans, None or lists of them")


def _encode_arg(a: Any, index: dict[int, int]) -> Any:
    import ibis.expr.datatypes as dt
    import ibis.expr.operations as ops

    if isinstance(a, ops.Node):
        return {"ref": index[id(a)]}
    if isinstance(a, dt.DataType):
        return {"dtype": str(a)}
    if isinstance(a, tuple):
        return {"tuple": [_encode_arg(x, index) for x in a]}
    if isinstance(a, float) and not math.isfinite(a):
        return _encode_literal(a)
    if isinstance(a, _SCALARS):
        return a
    raise ValidationError(f"an argument of type {type(a).__name__} cannot be sent")


# ---------------------------------------------------------------------------------- shape
def _nodes(js: Any) -> list[dict[str, Any]]:
    if not isinstance(js, dict) or set(js) != {"expr"} or not isinstance(js["expr"], list) \
            or not js["expr"]:
        raise ValidationError("an expression must be {\"expr\": [node, ...]} with at least one node")
    for i, n in enumerate(js["expr"]):
        if not isinstance(n, dict) or not isinstance(n.get("op"), str):
            raise ValidationError(f"expression node {i}: expected an object with an \"op\" name")
    return js["expr"]


def _refs(a: Any, i: int) -> Iterable[int]:
    """The node positions an argument refers to (validated: earlier nodes only)."""
    if isinstance(a, dict):
        if set(a) == {"ref"}:
            r = a["ref"]
            if type(r) is not int or not 0 <= r < i:
                raise ValidationError(f"expression node {i}: a ref must name an earlier node")
            yield r
        elif set(a) == {"tuple"} and isinstance(a["tuple"], list):
            for x in a["tuple"]:
                yield from _refs(x, i)
        elif set(a) == {"dtype"} and isinstance(a["dtype"], str):
            return
        elif set(a) == {"float"} and a["float"] in _SPECIAL:
            return
        else:
            raise ValidationError(f"expression node {i}: an argument object must be ref, tuple, "
                                  "dtype or float")
    elif not isinstance(a, _SCALARS):
        raise ValidationError(f"expression node {i}: an argument must be a JSON scalar or object")


# ---------------------------------------------------------------------------------- cost
class Cost:
    """Size bound ``g * L + c`` of a value (L: the record's longest string or array) and the
    size of the expression tree it expands to."""

    __slots__ = ("g", "c", "tree", "reads")

    def __init__(self, g: float, c: float, tree: float, reads: bool) -> None:
        self.g, self.c, self.tree, self.reads = g, c, tree, reads


_SAME = frozenset({"Alias", "Lowercase", "Uppercase", "Capitalize", "Strip", "LStrip", "RStrip",
                   "Substring", "Reverse", "StrRight", "ArrayIndex", "ArraySlice", "ArraySort",
                   "ArrayDistinct", "ArrayFilter", "ArrayRemove", "ArrayFlatten", "StructField",
                   "NullIf"})
_SUM = frozenset({"StringConcat", "ArrayConcat", "Array", "StructColumn"})
_MAX = frozenset({"Coalesce", "Greatest", "Least", "IfElse", "SearchedCase", "SimpleCase"})
_CONST = 1.0  # a number, a boolean, a date: one unit (strings count characters, arrays items)
_PRINTED = 24.0  # a number printed as a string


def check_cost(js: Any, *, max_growth: float, max_tree: int) -> list[Cost]:
    """Validate the shape of a wire expression and bound its per-row cost (no data, no schema).

    Parameters:
        js: the wire form ``{"expr": [...]}``.
        max_growth: the largest growth factor g allowed (see the module doc).
        max_tree: the largest number of nodes of the expanded expression tree.

    Returns:
        The bound of every node.

    Raises:
        ValidationError: a malformed expression, an unknown operation, an unbounded or too large
            growth, or a tree too large. The message depends only on the expression.
    """
    nodes = _nodes(js)
    out: list[Cost] = []
    for i, n in enumerate(nodes):
        op = n["op"]
        if op == "Field":
            _keys(n, {"op", "name"}, i)
            if not isinstance(n["name"], str):
                raise ValidationError(f"expression node {i}: Field needs a column name")
            out.append(Cost(1.0, 0.0, 1, True))
            continue
        if op in ("Literal", "Argument"):
            _keys(n, {"op", "value", "dtype"} if op == "Literal" else {"op", "name", "dtype"}, i)
            if not isinstance(n["dtype"], str) or len(n["dtype"]) > 200:
                raise ValidationError(f"expression node {i}: {op} needs an Ibis type string")
            size = float(len(str(n.get("value", "")))) if op == "Literal" else 0.0
            out.append(Cost(1.0 if op == "Argument" else 0.0, size, 1, False))
            continue
        if op not in WIRE_OPS:
            raise ValidationError(f"expression node {i}: {op!r} is not one of the row-wise "
                                  "operations of the plan schema")
        _keys(n, {"op", "args"}, i)
        args = n["args"]
        if not isinstance(args, dict):
            raise ValidationError(f"expression node {i}: args must be an object")
        kids = {k: [out[r] for r in _refs(a, i)] for k, a in args.items()}
        out.append(_bound(op, args, kids, nodes, out))
        c = out[-1]
        if c.tree > max_tree:
            raise ValidationError(f"the expression expands to more than {max_tree} operations "
                                  "(the service's cap on plan size)")
        if c.g > max_growth:
            what = "an unbounded" if math.isinf(c.g) else f"a {c.g:g}x"
            raise ValidationError(
                f"the expression can make a value {what} longer than the record's own data "
                f"({op}); the service caps per-row growth at {max_growth:g}x (nested replace, "
                "concat or join): simplify it")
    return out


def _keys(n: dict[str, Any], want: set[str], i: int) -> None:
    if set(n) != want:
        raise ValidationError(f"expression node {i} ({n['op']}): expected the keys {sorted(want)}")


def _lit_len(arg: Any, nodes: list[dict[str, Any]]) -> int | None:
    """The length of a string literal argument (None if the argument is not one)."""
    if isinstance(arg, dict) and set(arg) == {"ref"}:
        n = nodes[arg["ref"]]
        if n["op"] == "Literal" and isinstance(n.get("value"), str):
            return len(n["value"])
    return None


def _bound(op: str, args: dict[str, Any], kids: dict[str, list[Cost]],
           nodes: list[dict[str, Any]], out: list[Cost]) -> Cost:
    every = [c for cs in kids.values() for c in cs]
    tree = 1 + sum(c.tree for c in every)
    reads = any(c.reads for c in every)
    first = kids.get("arg", every[:1]) or [Cost(0.0, _CONST, 1, False)]
    a = first[0]
    if op in _SAME:
        g, c = a.g, a.c
    elif op in ("Cast", "TryCast"):
        to = args.get("to")
        printed = isinstance(to, dict) and str(to.get("dtype", "")).lstrip("!") == "string"
        # a value printed as a string: a number takes at most _PRINTED characters, an array or
        # a struct at most 4 per character or item (quotes, separators)
        g, c = (4 * a.g, max(4 * a.c, _PRINTED)) if printed else (a.g, a.c)
    elif op in _SUM:
        g, c = sum(x.g for x in every), sum(x.c for x in every)
    elif op in _MAX:
        g, c = max(x.g for x in every), max(x.c for x in every)
    elif op == "StringReplace":
        old, new = _lit_len(args.get("pattern"), nodes), _lit_len(args.get("replacement"), nodes)
        if old is None or new is None:
            g, c = math.inf, 0.0
        else:
            f = max(1.0, math.ceil(new / old)) if old > 0 else 1.0
            g, c = a.g * f, a.c * f
    elif op == "StringSplit":
        g, c = 2 * a.g, 2 * a.c + 1
    elif op == "ArrayStringJoin":
        sep = _lit_len(args.get("sep"), nodes)
        g, c = (math.inf, 0.0) if sep is None else (a.g * (1 + sep), a.c * (1 + sep) + sep)
    elif op == "ArrayMap":
        body = kids.get("body", [Cost(0.0, _CONST, 1, False)])[0]
        if body.reads:  # the body reads a column: |array| x L
            g, c = math.inf, 0.0
        else:
            f = body.g + body.c
            g, c = a.g * max(f, 1.0), a.c * max(f, 1.0)
    else:  # numbers, booleans, comparisons, lengths, dates: bounded output
        g, c = 0.0, _CONST
    return Cost(g, c, tree, reads if op != "ArrayMap" else a.reads)


# ---------------------------------------------------------------------------------- decode
def decode(js: Any, table: Any) -> Any:
    """Rebuild a wire expression on ``table`` (server side), from :data:`WIRE_OPS` only.

    Parameters:
        js: the wire form, already checked by :func:`check_cost`.
        table: the unbound public Ibis table the expression is resolved on.

    Returns:
        The Ibis value expression (the table's own row-wise check runs after this).

    Raises:
        ValidationError: an unknown column, a bad type string or arguments Ibis refuses.
    """
    import ibis.expr.datashape as ds
    import ibis.expr.datatypes as dt
    import ibis.expr.operations as ops

    nodes = _nodes(js)
    built: list[Any] = []

    def arg(a: Any) -> Any:
        if isinstance(a, dict):
            if "ref" in a:
                return built[a["ref"]]
            if "tuple" in a:
                return tuple(arg(x) for x in a["tuple"])
            if "dtype" in a:
                return dt.dtype(a["dtype"])
            return _SPECIAL[a["float"]]
        return a

    for i, n in enumerate(nodes):
        op = n["op"]
        try:
            if op == "Field":
                if n["name"] not in table.columns:
                    raise ValidationError(f"expression node {i}: {n['name']!r} is not a column; "
                                          f"columns are {list(table.columns)}")
                built.append(table[n["name"]].op())
            elif op == "Literal":
                built.append(ops.Literal(_literal(n["value"]), dt.dtype(n["dtype"])))
            elif op == "Argument":
                built.append(ops.Argument(name=str(n["name"]), shape=ds.columnar,
                                          dtype=dt.dtype(n["dtype"])))
            else:
                cls = getattr(ops, op)
                args = n["args"]
                if not set(args) <= set(cls.__argnames__):
                    raise ValidationError(f"expression node {i} ({op}): unknown arguments "
                                          f"{sorted(set(args) - set(cls.__argnames__))}")
                built.append(cls(**{k: arg(a) for k, a in args.items()}))
        except ValidationError:
            raise
        except Exception as exc:  # ibis checks types against the public schema only
            msg = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise ValidationError(f"expression node {i} ({op}): {type(exc).__name__}: {msg}") \
                from None
    return built[-1].to_expr()


def _literal(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"float"} and v["float"] in _SPECIAL:
            return _SPECIAL[v["float"]]
        raise ValidationError("a literal object must be {\"float\": \"nan\"|\"inf\"|\"-inf\"}")
    if isinstance(v, list):
        return tuple(_literal(x) for x in v)
    return v
