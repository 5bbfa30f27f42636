"""The privacy cost of a randomised-response matrix, its d_X check, and composition rules.

PreTPost (Ebadi & Sands, thesis Paper IV) asks a user to run ``post ∘ T ∘ pre`` on their own data,
where ``T`` is a right-stochastic matrix (row x = input, column z = output, ``T[x, z] =
Pr[T(x) = z]``). The user prices the query from ``T`` alone:

* ``cost(T) = ln max_z ( max_x T[x, z] / min_x' T[x', z] )`` with ``a/0 = ∞`` (Paper IV Def. 3);
  ``T`` is then cost(T)-locally private (Theorem 3) and so is ``T ∘ pre`` for any ``pre`` (the
  pre-processing theorem, Theorem 2).
* For a metric ``d`` on the inputs of ``T``: ``T`` is d_X-locally private iff
  ``T[x, z] <= exp(d(x, x')) T[x', z]`` for all x, x', z (:func:`check_dx`). The pre-processing
  theorem does **not** carry over to d_X: ``T ∘ pre`` is d_X-private only when ``pre`` is
  non-expansive (:func:`require_non_expansive`); an arbitrary ``pre`` only gets ``cost(T)``.
* Independent per-coordinate matrices (one per bit, Paper IV §3.4) cost the **sum** of their
  costs on arbitrary inputs, not the maximum the paper states; the maximum (or any smaller
  figure) holds only when the inputs of ``T`` are restricted, e.g. one-hot vectors cost the two
  largest per-bit costs (:func:`product_cost`).

Privacy condition (checked here): ``T[x, z] <= exp(eps) T[x', z]`` for all inputs x, x' and outputs z.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprivacy.errors import ShapeError, ValidationError

__all__ = [
    "CoordinateGroups", "DXCheck", "check_dx", "coordinate_groups", "cost", "dx_cost", "groups_cost",
    "pair_loss", "product_cost", "require_non_expansive", "sequential_cost", "stack_pair_loss",
    "validate_stochastic", "validate_stochastic_stack",
]

#: Tolerance on row sums of a right-stochastic matrix.
ROW_SUM_TOL = 1e-9


def validate_stochastic(T: Any, *, name: str = "T") -> np.ndarray:  # noqa: N803 (the paper's symbol)
    """Return ``T`` as a float array after checking it is right-stochastic.

    Parameters
    ----------
    T : array_like, shape (n_in, n_out)
        ``T[x, z] = Pr[output z | input x]``.

    Returns
    -------
    numpy.ndarray
        A read-only float copy.

    Raises
    ------
    ShapeError, ValidationError
        Not 2-D, empty, non-finite, negative entries, or a row that does not sum to 1.

    Examples
    --------
    >>> validate_stochastic([[0.75, 0.25], [0.25, 0.75]]).shape
    (2, 2)
    """
    try:
        a = np.array(T, dtype=float, copy=True)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} is not a numeric matrix: {exc}") from exc
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ShapeError(f"{name} has shape {a.shape}: a randomiser is a 2-D (inputs x outputs) matrix")
    if not np.all(np.isfinite(a)):
        i, j = np.argwhere(~np.isfinite(a))[0]
        raise ValidationError(f"{name}[{i}, {j}] = {a[i, j]}: probabilities must be finite")
    if np.any(a < 0):
        i, j = np.argwhere(a < 0)[0]
        raise ValidationError(f"{name}[{i}, {j}] = {a[i, j]}: probabilities are >= 0")
    s = a.sum(axis=1)
    bad = np.flatnonzero(np.abs(s - 1.0) > ROW_SUM_TOL)
    if bad.size:
        i = int(bad[0])
        raise ValidationError(
            f"row {i} of {name} sums to {s[i]!r}: each row is the output distribution of one input "
            "and must sum to 1 (normalise the rows)"
        )
    a.setflags(write=False)
    return a


def cost(T: Any) -> float:  # noqa: N803
    """cost(T) of Paper IV Def. 3: ``ln max_z (max_x T[x, z] / min_x' T[x', z])``, ``a/0 = ∞``.

    A column whose minimum is 0 makes the cost infinite, whatever its maximum (Def. 3 takes
    ``a/0 = ∞`` for every ``a``, so an all-zero column also costs ∞: drop outputs that never occur).

    Parameters
    ----------
    T : array_like, shape (n_in, n_out)
        A right-stochastic matrix.

    Returns
    -------
    float
        The cost in nats, ``math.inf`` if a column has a zero entry. ``T`` is cost(T)-locally
        private (Theorem 3).

    Examples
    --------
    >>> round(cost([[0.75, 0.25], [0.25, 0.75]]), 12)  # two fair coins: ln 3
    1.098612288668
    >>> cost([[1.0, 0.0], [0.5, 0.5]])
    inf
    """
    a = validate_stochastic(T)
    lo = a.min(axis=0)
    if np.any(lo <= 0):
        return math.inf
    return float(np.log(np.max(a.max(axis=0) / lo)))


def pair_loss(T: Any) -> np.ndarray:  # noqa: N803
    """The realised privacy loss ``L[x, x'] = ln max_z T[x, z] / T[x', z]`` of every input pair.

    Outputs with ``T[x, z] = T[x', z] = 0`` never occur from either input and are skipped;
    ``T[x, z] > 0 = T[x', z]`` gives ``+inf``. ``L`` is 0 on the diagonal.

    Parameters
    ----------
    T : array_like, shape (n_in, n_out)

    Returns
    -------
    numpy.ndarray, shape (n_in, n_in)

    Examples
    --------
    >>> L = pair_loss([[0.75, 0.25], [0.25, 0.75]])
    >>> bool(np.isclose(L[0, 1], np.log(3)))
    True
    """
    a = validate_stochastic(T)
    n = a.shape[0]
    out = np.zeros((n, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.log(a)  # -inf where 0
        for x in range(n):
            diff = la[x][None, :] - la  # ln T[x, z] - ln T[x', z]
            diff = np.where(np.isneginf(la[x])[None, :], -np.inf, diff)  # T[x, z] = 0: no loss
            out[x] = np.max(diff, axis=1)
    np.fill_diagonal(out, 0.0)
    return out


@dataclass(frozen=True)
class DXCheck:
    """The outcome of :func:`check_dx`: ``ok`` iff every pair's loss is within its budget.

    ``worst`` is the pair (x, x') with the largest ``loss / eps`` and ``ratio`` that value
    (``loss`` and ``eps`` its two terms).
    """

    ok: bool
    worst: tuple[int, int]
    loss: float
    eps: float
    ratio: float


def check_dx(T: Any, eps: Any, *, rtol: float = 1e-9, atol: float = 1e-12) -> DXCheck:  # noqa: N803
    """Check d_X-local privacy of ``T``: ``T[x, z] <= exp(eps[x, x']) T[x', z]`` for all x, x', z.

    This checks every triple directly from the matrix (independently of how ``T`` was made).

    Parameters
    ----------
    T : array_like, shape (n, n_out)
    eps : array_like, shape (n, n)
        The budget ``eps[x, x'] = d(x, x')`` of each input pair (a metric; ``inf`` = no constraint).
    rtol, atol : float
        A pair passes when ``loss <= eps * (1 + rtol) + atol``.

    Returns
    -------
    DXCheck

    Examples
    --------
    >>> e = np.log(3) * (1 - np.eye(2))
    >>> check_dx([[0.75, 0.25], [0.25, 0.75]], e).ok
    True
    >>> check_dx([[0.8, 0.2], [0.2, 0.8]], e).ok
    False
    """
    L = pair_loss(T)
    e = np.asarray(eps, dtype=float)
    if e.shape != L.shape:
        raise ShapeError(f"eps has shape {e.shape}; T has {L.shape[0]} inputs, so eps must be {L.shape}")
    if np.isnan(e).any() or (e < 0).any():
        raise ValidationError("eps must be a non-negative matrix without NaN (a metric)")
    with np.errstate(invalid="ignore", divide="ignore"):
        slack = L - (e * (1 + rtol) + atol)
        ratio = np.where(L <= 0, 0.0, np.where(e > 0, L / e, np.inf))
    np.fill_diagonal(ratio, 0.0)
    bad = slack > 0
    np.fill_diagonal(bad, False)
    i, j = np.unravel_index(int(np.argmax(np.nan_to_num(ratio, posinf=np.finfo(float).max))), L.shape)
    return DXCheck(ok=not bool(bad.any()), worst=(int(i), int(j)), loss=float(L[i, j]),
                   eps=float(e[i, j]), ratio=float(ratio[i, j]))


def dx_cost(T: Any, d: Any) -> float:  # noqa: N803
    """The smallest scale ``k`` such that ``T`` is ``k·d``-locally private: ``max L[x, x'] / d(x, x')``.

    With ``d`` a distance (e.g. km) this is the "ε per unit" a user pays for ``T`` when ``pre`` is
    non-expansive into ``d``. Pairs at distance 0 must have loss 0 (else the cost is ``inf``).

    Examples
    --------
    >>> d = np.array([[0.0, 2.0], [2.0, 0.0]])
    >>> round(dx_cost([[0.75, 0.25], [0.25, 0.75]], d), 6)  # ln 3 / 2
    0.549306
    """
    L = pair_loss(T)
    dd = np.asarray(d, dtype=float)
    if dd.shape != L.shape:
        raise ShapeError(f"d has shape {dd.shape}; expected {L.shape}")
    off = ~np.eye(L.shape[0], dtype=bool) & (L > 0)
    if not off.any():
        return 0.0
    if np.any(dd[off] <= 0):
        return math.inf
    return float(np.max(L[off] / dd[off]))


def sequential_cost(costs: Sequence[float]) -> float:
    """Sequential composition (Paper IV Prop. 2): the costs add, also when chosen adaptively.

    Examples
    --------
    >>> sequential_cost([0.5, 0.25])
    0.75
    """
    c = [float(v) for v in costs]
    if any(math.isnan(v) or v < 0 for v in c):
        raise ValidationError(f"costs {c}: each cost is a non-negative number")
    return float(math.fsum(c))


def validate_stochastic_stack(stack: Any, *, name: str = "matrices") -> np.ndarray:
    """:func:`validate_stochastic` for a stack of equally shaped matrices, in one pass.

    Parameters
    ----------
    stack : array_like, shape (k, n_in, n_out)

    Returns
    -------
    numpy.ndarray
        A read-only float copy of shape (k, n_in, n_out).

    Examples
    --------
    >>> validate_stochastic_stack([[[0.5, 0.5], [0.5, 0.5]]] * 3).shape
    (3, 2, 2)
    """
    try:
        a = np.array(stack, dtype=float, copy=True)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} is not a list of numeric matrices of one shape: {exc}") from exc
    if a.ndim != 3 or 0 in a.shape:
        raise ShapeError(f"{name} has shape {a.shape}: expected k matrices of one (inputs x outputs) shape")
    if not np.all(np.isfinite(a)):
        k, i, j = np.argwhere(~np.isfinite(a))[0]
        raise ValidationError(f"{name}[{k}][{i}, {j}] = {a[k, i, j]}: probabilities must be finite")
    if np.any(a < 0):
        k, i, j = np.argwhere(a < 0)[0]
        raise ValidationError(f"{name}[{k}][{i}, {j}] = {a[k, i, j]}: probabilities are >= 0")
    s = a.sum(axis=2)
    bad = np.argwhere(np.abs(s - 1.0) > ROW_SUM_TOL)
    if bad.size:
        k, i = bad[0]
        raise ValidationError(
            f"row {i} of {name}[{k}] sums to {s[k, i]!r}: each row is the output distribution of "
            "one input and must sum to 1 (normalise the rows)"
        )
    a.setflags(write=False)
    return a


def stack_pair_loss(stack: np.ndarray) -> np.ndarray:
    """:func:`pair_loss` of every matrix of a (k, n_in, n_out) stack (validated), shape (k, n_in, n_in).

    Vectorised over the stack in chunks of about 4 M entries, so pricing many small coordinate
    matrices costs array operations, not one Python call per matrix.

    Examples
    --------
    >>> T = np.array([[[0.75, 0.25], [0.25, 0.75]]])
    >>> bool(np.allclose(stack_pair_loss(T)[0], pair_loss(T[0])))
    True
    """
    k, r, c = stack.shape
    out = np.empty((k, r, r))
    step = max(1, (1 << 22) // max(1, r * c))
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in range(0, k, step):
            la = np.log(stack[s:s + step])  # -inf where 0
            for x in range(r):
                row = la[:, x, None, :]
                diff = np.where(np.isneginf(row), -np.inf, row - la)  # T[x, z] = 0: no loss
                out[s:s + step, x] = diff.max(axis=2)
    d = np.arange(r)
    out[:, d, d] = 0.0
    return out


#: Coordinates of a product randomiser grouped by matrix shape: (stack (k, n_in, n_out) of the
#: distinct matrices, coordinates (m,), index of each coordinate's matrix in the stack (m,)).
CoordinateGroups = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def coordinate_groups(matrices: Sequence[Any]) -> CoordinateGroups:
    """Group the coordinate matrices of a product by shape; a matrix object repeated over
    coordinates (a product built from one shared matrix) is stacked once."""
    by_id: dict[int, tuple[tuple[int, ...], int]] = {}
    stacks: dict[tuple[int, ...], list[np.ndarray]] = {}
    coords: dict[tuple[int, ...], list[int]] = {}
    local: dict[tuple[int, ...], list[int]] = {}
    for i, m in enumerate(matrices):
        hit = by_id.get(id(m))
        if hit is None:
            a = validate_stochastic(m, name=f"matrices[{i}]")
            lst = stacks.setdefault(a.shape, [])
            hit = by_id[id(m)] = (a.shape, len(lst))
            lst.append(a)
        coords.setdefault(hit[0], []).append(i)
        local.setdefault(hit[0], []).append(hit[1])
    return [(np.stack(stacks[s]), np.array(coords[s], dtype=np.intp),
             np.array(local[s], dtype=np.intp)) for s in stacks]


def _per_coordinate(groups: CoordinateGroups, n: int, values: list[np.ndarray]) -> np.ndarray:
    """Scatter one value per stacked matrix (``values[g][k]``) to the n coordinates."""
    out = np.empty(n)
    for (_stack, coords, idx), v in zip(groups, values, strict=True):
        out[coords] = v[idx]
    return out


def product_cost(matrices: Sequence[Any], domain: str | Any = "all") -> float:
    """Cost of randomising each coordinate of a vector independently (coordinate i by matrix i).

    The product matrix has, for inputs u, v, loss ``sum_i L_i[u_i, v_i]`` (the maximum over
    outputs factorises). Its cost is the maximum of that sum over the pairs of inputs that
    can reach ``T``:

    * ``domain="all"``: every vector, so the cost is the **sum** of the per-coordinate costs
      (Paper IV §3.4 says the maximum; that holds only for inputs differing in one coordinate);
    * ``domain="one_hot"`` (0/1 coordinates with one 1, e.g. unary encoding, one-time RAPPOR
      with one hash): the largest ``L_i[1, 0] + L_j[0, 1]`` over ``i != j`` (twice a common
      cost), found in O(length) from the two largest ``L_j[0, 1]``;
    * an integer array of shape (k, d): exactly those k input vectors (brute force over pairs).

    The agent enforces the declared domain (an output of ``pre`` outside it becomes a random
    element of it), so the figure holds for any ``pre``. Work is linear in the number of
    coordinates; each distinct matrix is priced once, and equally shaped ones together.

    Parameters
    ----------
    matrices : sequence of right-stochastic matrices, one per coordinate
    domain : "all", "one_hot" or array of input vectors (entries index the rows of each matrix)

    Returns
    -------
    float

    Examples
    --------
    >>> T = [[0.75, 0.25], [0.25, 0.75]]
    >>> bool(np.isclose(product_cost([T, T, T]), 3 * np.log(3)))
    True
    >>> bool(np.isclose(product_cost([T, T, T], "one_hot"), 2 * np.log(3)))
    True
    """
    if len(matrices) == 0:
        raise ValidationError("product_cost needs at least one coordinate matrix")
    return groups_cost(coordinate_groups(matrices), len(matrices), domain)


def groups_cost(groups: CoordinateGroups, n: int, domain: str | Any = "all") -> float:
    """:func:`product_cost` of ``n`` coordinates given as :func:`coordinate_groups`."""
    losses = [stack_pair_loss(stack) for stack, _c, _i in groups]
    if isinstance(domain, str):
        if domain == "all":
            return float(math.fsum(_per_coordinate(groups, n, [L.max(axis=(1, 2)) for L in losses])
                                   .tolist()))
        if domain == "one_hot":
            if any(L.shape[1] != 2 for L in losses):
                raise ValidationError("domain='one_hot' needs 2-row (0/1) coordinate matrices")
            if n == 1:
                return float(losses[0][0].max())
            up = _per_coordinate(groups, n, [L[:, 1, 0] for L in losses])  # 1 in u, 0 in v
            down = _per_coordinate(groups, n, [L[:, 0, 1] for L in losses])
            # u = e_i, v = e_j (i != j): L_i[1, 0] + L_j[0, 1]; the best j for every i but the
            # argmax of down is that argmax, and for it the second largest
            j1 = int(np.argmax(down))
            second = float(np.max(np.delete(down, j1)))
            return max(float(up[j1]) + second, float(np.max(np.delete(up, j1))) + float(down[j1]))
        raise ValidationError(f"domain = {domain!r}: use 'all', 'one_hot' or an array of vectors")
    D = np.asarray(domain)  # noqa: N806
    if D.ndim != 2 or D.shape[1] != n or D.dtype.kind not in "iu":
        raise ValidationError(
            f"domain has shape {D.shape} and dtype {D.dtype}: expected integer vectors of length "
            f"{n} (one entry per coordinate)"
        )
    per: list[np.ndarray | None] = [None] * n
    for (_stack, coords, idx), L in zip(groups, losses, strict=True):
        for c, k in zip(coords.tolist(), idx.tolist(), strict=True):
            per[c] = L[k]
    total = np.zeros((D.shape[0], D.shape[0]))
    for i, Li in enumerate(per):  # noqa: N806
        assert Li is not None
        if D[:, i].min() < 0 or D[:, i].max() >= Li.shape[0]:
            raise ValidationError(f"domain column {i} indexes outside the {Li.shape[0]} rows of matrix {i}")
        total += Li[np.ix_(D[:, i], D[:, i])]
    return float(total.max())


def require_non_expansive(pre_map: Any, d_in: Any, d_out: Any, *, rtol: float = 1e-9) -> None:
    """Refuse a deterministic pre-processor that could stretch distances (d_X composition).

    ``T`` being ``d_out``-locally private makes ``T ∘ pre`` ``d_in``-private when ``pre`` is
    non-expansive: ``d_out(pre(x), pre(x')) <= d_in(x, x')`` for all x, x'. Unlike plain LDP
    (Paper IV Theorem 2) this does not hold for an arbitrary ``pre``.

    Parameters
    ----------
    pre_map : int array, shape (n_in,)
        ``pre_map[x]`` is the input row of ``T`` that input x is mapped to.
    d_in : array, shape (n_in, n_in)
    d_out : array, shape (n_T, n_T)

    Raises
    ------
    ValidationError
        Naming the worst stretched pair.

    Examples
    --------
    >>> d = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> require_non_expansive([0, 1], d, d)  # identity: fine
    >>> require_non_expansive([0, 1], d / 2, d)
    Traceback (most recent call last):
    ...
    dprivacy.errors.ValidationError: pre maps inputs 0 and 1 (distance 0.5) to rows 0 and 1 (distance 1): ...
    """
    p = np.asarray(pre_map)
    di, do = np.asarray(d_in, dtype=float), np.asarray(d_out, dtype=float)
    if p.ndim != 1 or p.dtype.kind not in "iu":
        raise ValidationError("pre_map must be a 1-D integer array (input -> row of T)")
    if di.shape != (p.size, p.size):
        raise ShapeError(f"d_in has shape {di.shape}; pre_map has {p.size} inputs")
    if p.size and (p.min() < 0 or p.max() >= do.shape[0]):
        raise ValidationError(f"pre_map points outside the {do.shape[0]} rows of T")
    stretched = do[np.ix_(p, p)]
    excess = stretched - di * (1 + rtol) - 1e-12
    if np.any(excess > 0):
        x, y = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise ValidationError(
            f"pre maps inputs {x} and {y} (distance {di[x, y]:.6g}) to rows {p[x]} and {p[y]} "
            f"(distance {stretched[x, y]:.6g}): pre is not non-expansive, so the d_X guarantee of T "
            "does not carry over to T∘pre; pay cost(T) as plain local DP instead, or use a "
            "non-expansive pre"
        )
