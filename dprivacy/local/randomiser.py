"""Randomisers ``T`` of a PreTPost query: a full right-stochastic matrix, or one per coordinate.

A randomiser knows its input domain (the rows), draws an output for an input, prices itself
(:mod:`dprivacy.local.cost`) and round-trips through JSON so that a query can travel to a user.
The user's agent enforces the domain: an input outside it is replaced by a uniformly random
element of the domain (Paper IV §3.4, "domain enforcement").

Privacy condition: ``T[x, z] <= exp(cost) T[x', z]`` for all x, x', z (Paper IV Theorem 3).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.cost import (
    CoordinateGroups,
    coordinate_groups,
    groups_cost,
    validate_stochastic,
    validate_stochastic_stack,
)
from dprivacy.local.cost import cost as matrix_cost
from dprivacy.local.limits import check_randomiser_json

__all__ = ["MatrixRandomiser", "ProductRandomiser", "Randomiser", "randomiser_from_json"]


def _key(v: Any) -> str:
    """Canonical JSON text of a domain element (so 1 and 1.0, lists and tuples compare alike)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


class Randomiser:
    """Interface of a randomiser: ``cost``, ``contains``, ``random_input``, ``apply``, ``to_json``."""

    kind: str = ""

    def cost(self) -> float:
        """The privacy cost charged to a user (nats)."""
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        """True iff ``value`` is an input row of ``T``."""
        raise NotImplementedError

    def has_output(self, value: Any) -> bool:
        """True iff ``value`` is an output of ``T`` (what a device's reply may carry)."""
        raise NotImplementedError

    def random_input(self, rng: np.random.Generator) -> Any:
        """A uniformly random element of the input domain."""
        raise NotImplementedError

    def apply(self, value: Any, rng: np.random.Generator) -> Any:
        """Draw ``T(value)``; ``value`` must be in the domain."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


@dataclass(frozen=True, eq=False)
class MatrixRandomiser(Randomiser):
    """A full randomised-response matrix ``T`` with labelled inputs and outputs.

    Parameters
    ----------
    matrix : array_like, shape (n_in, n_out)
        Right-stochastic: ``matrix[i, j] = Pr[output outputs[j] | input inputs[i]]``.
    inputs, outputs : sequences of JSON values (default ``0..n-1``)

    Examples
    --------
    >>> T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"], outputs=["yes", "no"])
    >>> round(T.cost(), 6)
    1.098612
    >>> T.contains("yes"), T.contains("maybe")
    (True, False)
    """

    matrix: Any
    inputs: Sequence[Any] | None = None
    outputs: Sequence[Any] | None = None
    kind: str = field(default="matrix", init=False)

    def __post_init__(self) -> None:
        T = validate_stochastic(self.matrix)  # noqa: N806
        object.__setattr__(self, "matrix", T)
        ins = list(range(T.shape[0])) if self.inputs is None else [_plain(v) for v in self.inputs]
        outs = list(range(T.shape[1])) if self.outputs is None else [_plain(v) for v in self.outputs]
        if len(ins) != T.shape[0] or len(outs) != T.shape[1]:
            raise ValidationError(
                f"T is {T.shape[0]}x{T.shape[1]} but has {len(ins)} input and {len(outs)} output "
                "labels: one label per row and per column"
            )
        keys = [_key(v) for v in ins]
        if len(set(keys)) != len(keys):
            raise ValidationError("the input labels of T repeat a value: each row is a distinct input")
        object.__setattr__(self, "inputs", ins)
        object.__setattr__(self, "outputs", outs)
        object.__setattr__(self, "_index", {k: i for i, k in enumerate(keys)})
        object.__setattr__(self, "_output_keys", frozenset(_key(v) for v in outs))
        object.__setattr__(self, "_cdf", np.cumsum(T, axis=1))

    def cost(self) -> float:
        return matrix_cost(self.matrix)

    def row(self, value: Any) -> int | None:
        return self._index.get(_key(_plain(value)))  # type: ignore[attr-defined]

    def contains(self, value: Any) -> bool:
        try:
            return self.row(value) is not None
        except (TypeError, ValueError):
            return False

    def has_output(self, value: Any) -> bool:
        try:
            return _key(_plain(value)) in self._output_keys  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            return False

    def random_input(self, rng: np.random.Generator) -> Any:
        assert self.inputs is not None  # set by every concrete randomiser
        return self.inputs[int(rng.integers(len(self.inputs)))]

    def apply(self, value: Any, rng: np.random.Generator) -> Any:
        i = self.row(value)
        if i is None:
            raise ValidationError(f"{value!r} is not an input of T")
        cdf = self._cdf[i]  # type: ignore[attr-defined]
        j = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        assert self.outputs is not None  # set by every concrete randomiser
        return self.outputs[min(j, len(self.outputs) - 1)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "matrix", "matrix": self.matrix.tolist(), "inputs": self.inputs,
                "outputs": self.outputs}

    def plot(self, path: Any = None, title: str | None = None) -> Any:
        """Heat map of T (rows: true inputs, columns: reports) titled with its cost; returns a
        matplotlib ``Figure``, also written to ``path`` if given. Needs the ``[plot]`` extra
        (see :func:`dprivacy.plotting.plot_randomiser`)."""
        from dprivacy.plotting import plot_randomiser

        return plot_randomiser(self, title=title, path=path)


@dataclass(frozen=True, eq=False)
class ProductRandomiser(Randomiser):
    """Independent randomisation of each coordinate of an integer vector (Paper IV §3.4).

    Coordinate ``i`` of the input (an integer row index of ``matrices[i]``) is replaced by a draw
    from that row. The cost is :func:`dprivacy.local.cost.product_cost` over the declared
    ``domain``: ``"all"`` (any vector: the **sum** of per-coordinate costs) or ``"one_hot"``
    (0/1 vectors with exactly one 1: the two largest costs). ``matrices`` may be a single matrix
    with ``length`` repetitions.

    Examples
    --------
    >>> R = ProductRandomiser([[0.75, 0.25], [0.25, 0.75]], length=4, domain="one_hot")
    >>> round(float(R.cost() / np.log(3)), 9)
    2.0
    >>> R.contains([0, 1, 0, 0]), R.contains([1, 1, 0, 0])
    (True, False)
    """

    matrices: Any
    length: int | None = None
    domain: str = "all"
    kind: str = field(default="product", init=False)

    def __post_init__(self) -> None:
        m = self.matrices
        groups: CoordinateGroups
        if _is_matrix(m):  # one shared matrix: validated and priced once
            if self.length is None or int(self.length) < 1:
                raise ValidationError("one shared coordinate matrix needs length >= 1")
            n = int(self.length)
            a = validate_stochastic(m)
            mats = [a] * n
            groups = [(a[None], np.arange(n), np.zeros(n, dtype=np.intp))]
        else:
            try:
                n = len(m)
            except TypeError:
                raise ValidationError("matrices must be one matrix or a list of matrices") from None
            stack = _stack_of(m)
            if stack is not None:  # equally shaped matrices: validated and priced together
                stack = validate_stochastic_stack(stack)
                mats = list(stack)
                groups = [(stack, np.arange(n), np.arange(n))]
            else:
                mats = [validate_stochastic(x, name=f"matrices[{i}]") for i, x in enumerate(m)]
                groups = coordinate_groups(mats) if mats else []
            if self.length is not None and int(self.length) != len(mats):
                raise ValidationError(f"length = {self.length} but {len(mats)} matrices were given")
        if not mats:
            raise ValidationError("a product randomiser needs at least one coordinate")
        if self.domain not in ("all", "one_hot"):
            raise ValidationError(f"domain = {self.domain!r}: use 'all' or 'one_hot'")
        if self.domain == "one_hot" and any(st.shape[1] != 2 for st, _c, _i in groups):
            raise ValidationError("domain='one_hot' needs 2-row (bit) matrices")
        object.__setattr__(self, "matrices", mats)
        object.__setattr__(self, "length", len(mats))
        object.__setattr__(self, "_groups", groups)
        object.__setattr__(self, "_cost", groups_cost(groups, len(mats), self.domain))

    def cost(self) -> float:
        return float(self._cost)  # type: ignore[attr-defined]

    def _vector(self, value: Any) -> np.ndarray | None:
        """``value`` as an int64 array when it is a list of ``length`` whole numbers, else None."""
        v = value if type(value) is list else _plain(value)
        if not isinstance(v, list) or len(v) != self.length:
            return None
        if not all(type(x) is int for x in v):  # no bool, no float: whole numbers only
            v = _plain(v)  # numpy integers become ints; anything else stays and is refused
            if not all(type(x) is int for x in v):
                return None
        try:
            return np.array(v, dtype=np.int64)
        except OverflowError:
            return None

    def _sizes(self, axis: int) -> np.ndarray:
        """Rows (axis 1) or outputs (axis 2) of each coordinate's matrix."""
        out = np.empty(int(self.length), dtype=np.int64)  # type: ignore[arg-type]
        for stack, coords, _idx in self._groups:  # type: ignore[attr-defined]
            out[coords] = stack.shape[axis]
        return out

    def _in_domain(self, x: np.ndarray | None) -> bool:
        if x is None:
            return False
        if self.domain == "one_hot":
            return bool(np.all((x == 0) | (x == 1))) and int(x.sum()) == 1
        return bool(np.all((x >= 0) & (x < self._sizes(1))))

    def contains(self, value: Any) -> bool:
        return self._in_domain(self._vector(value))

    def has_output(self, value: Any) -> bool:
        x = self._vector(value)
        return x is not None and bool(np.all((x >= 0) & (x < self._sizes(2))))

    def random_input(self, rng: np.random.Generator) -> list[int]:
        if self.domain == "one_hot":
            v = [0] * int(self.length)  # type: ignore[arg-type]
            v[int(rng.integers(int(self.length)))] = 1  # type: ignore[arg-type]
            return v
        return [int(rng.integers(m.shape[0])) for m in self.matrices]

    def apply(self, value: Any, rng: np.random.Generator) -> list[int]:
        x = self._vector(value)
        if not self._in_domain(x):
            raise ValidationError(f"{str(value)[:80]} is not an input of this product randomiser")
        assert x is not None
        u = rng.random(x.size)  # one draw per coordinate, in coordinate order
        out = np.empty(x.size, dtype=np.intp)
        cdfs = getattr(self, "_cdfs", None)
        if cdfs is None:
            cdfs = [np.cumsum(stack, axis=2) for stack, _c, _i in self._groups]  # type: ignore[attr-defined]
            object.__setattr__(self, "_cdfs", cdfs)
        for (stack, coords, idx), c in zip(self._groups, cdfs, strict=True):  # type: ignore[attr-defined]
            cdf = c[idx, x[coords]]  # (m, n_out): the row of each coordinate
            # inverse CDF: the number of CDF entries <= u * total (searchsorted, side right)
            j = (cdf <= (u[coords] * cdf[:, -1])[:, None]).sum(axis=1)
            out[coords] = np.minimum(j, stack.shape[2] - 1)
        return out.tolist()

    def to_dict(self) -> dict[str, Any]:
        groups = self._groups  # type: ignore[attr-defined]
        first = self.matrices[0]
        same = len(groups) == 1 and bool(np.all(groups[0][0] == first))
        mats: Any = first.tolist() if same else [m.tolist() for m in self.matrices]
        return {"kind": "product", "matrices": mats, "length": self.length, "domain": self.domain}


def _stack_of(m: Any) -> np.ndarray | None:
    """``m`` as one (k, n_in, n_out) float array when its matrices share a shape, else None."""
    try:
        a = np.array(m, dtype=float)
    except (TypeError, ValueError):
        return None
    return a if a.ndim == 3 and 0 not in a.shape else None


def _is_matrix(m: Any) -> bool:
    try:
        return np.asarray(m, dtype=float).ndim == 2
    except (TypeError, ValueError):
        return False


def randomiser_from_json(obj: dict[str, Any] | str) -> Randomiser:
    """Rebuild a randomiser from :meth:`Randomiser.to_dict` output (validated again).

    The sizes the JSON declares are capped first (:func:`dprivacy.local.limits.check_randomiser_json`).

    Examples
    --------
    >>> R = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]])
    >>> abs(randomiser_from_json(R.to_json()).cost() - R.cost()) < 1e-15
    True
    """
    d = json.loads(obj) if isinstance(obj, str) else obj
    check_randomiser_json(d)  # size caps on the JSON lists, before any array is built
    if d["kind"] == "matrix":
        return MatrixRandomiser(d["matrix"], d.get("inputs"), d.get("outputs"))
    return ProductRandomiser(d["matrices"], d.get("length"), d.get("domain", "all"))

