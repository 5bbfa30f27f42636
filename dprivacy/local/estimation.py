"""Input frequencies from the outputs of any randomiser ``T``, with standard errors.

``n`` users each report ``T(x_i)``; with input shares ``f`` (a distribution over the rows of
``T``) the outputs are distributed as ``p = Tᵀ f``. :func:`estimate_frequencies` inverts that:

* ``method="least_squares"``: ``f̂ = (Tᵀ)⁺ o`` for the observed output shares ``o``, unbiased
  for any ``T`` of full row rank (square or with more outputs than inputs; with a square ``T``
  it is Warner's ``o T⁻¹``). Its covariance is ``A Σ Aᵀ`` with ``A = (Tᵀ)⁺`` and
  ``Σ = (diag p - p pᵀ) / n`` the multinomial covariance of ``o``, evaluated at the fitted
  ``p``; shares may come out negative or above 1.
* ``method="mle"``: the maximum-likelihood shares on the simplex (``f ≥ 0``, ``Σ f = 1``),
  found by EM (each step ``f_x ← f_x Σ_z o_z T[x, z] / p_z``: it never leaves the simplex and
  never lowers the likelihood). Its standard errors are the asymptotic ones, from the Fisher
  information ``n T diag(1/p) Tᵀ`` restricted to the simplex; they describe shares away from
  0 (at the boundary the asymptotic normal approximation does not hold).

Both need the input shares to be *identifiable*: two inputs (or combinations of inputs) with the
same output distribution cannot be told apart from any number of reports. The singular values
of ``T`` measure it; a ``T`` whose condition number ``σ_max / σ_min`` exceeds ``max_condition``
(or whose rank is below its number of inputs, as for many optimal d_X randomisers, which report
several inputs alike) is refused with :class:`NotIdentifiableError`, naming the inputs that are
confounded, instead of an inversion that returns numbers near ±10¹⁶.

Privacy condition: none (post-processing of the reports; no data is touched).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.cost import validate_stochastic
from dprivacy.local.randomiser import MatrixRandomiser, _key, _plain

__all__ = ["FrequencyEstimate", "NotIdentifiableError", "check_identifiable", "estimate_frequencies"]

#: Largest condition number of ``T`` accepted by default: beyond it, the estimate's error is
#: dominated by the inversion (a relative perturbation of the reports is magnified that much).
MAX_CONDITION = 1e8


class NotIdentifiableError(ValidationError):
    """``T`` does not determine its input shares from its output distribution (rank-deficient or
    ill-conditioned): no estimator can recover them."""


@dataclass(frozen=True)
class FrequencyEstimate:
    """Estimated input shares of a randomiser's reports.

    ``shares[i]`` and ``std_errors[i]`` belong to ``inputs[i]`` (the rows of ``T``);
    ``covariance`` is the estimate's covariance matrix, ``users`` the number of reports,
    ``condition`` the condition number of ``T``; for ``method="mle"``, ``iterations`` the EM
    steps taken and ``converged`` whether the step fell below the tolerance.
    """

    inputs: list[Any]
    shares: np.ndarray
    std_errors: np.ndarray
    covariance: np.ndarray
    method: str
    users: int
    condition: float
    iterations: int = 0
    converged: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The estimate as plain JSON values."""
        return {"inputs": list(self.inputs), "estimate": self.shares.tolist(),
                "std_error": self.std_errors.tolist(), "method": self.method, "users": self.users,
                "condition": self.condition, "iterations": self.iterations,
                "converged": self.converged}


def _matrix(T: Any) -> tuple[np.ndarray, list[Any], list[Any] | None]:  # noqa: N802, N803
    if isinstance(T, MatrixRandomiser):
        return np.asarray(T.matrix), list(T.inputs or ()), list(T.outputs or ())
    if hasattr(T, "matrices"):
        raise ValidationError("estimate_frequencies takes a matrix randomiser; estimate a product "
                              "randomiser coordinate by coordinate")
    m = validate_stochastic(T)
    return m, list(range(m.shape[0])), None


def check_identifiable(T: Any, max_condition: float = MAX_CONDITION) -> float:  # noqa: N803
    """Return the condition number of ``T``, or raise :class:`NotIdentifiableError`.

    The input shares are identifiable from the output distribution ``Tᵀ f`` iff ``T`` has full
    row rank (as many independent rows as inputs); numerically, iff its condition number
    ``σ_max / σ_min`` is at most ``max_condition``.

    Examples
    --------
    >>> round(check_identifiable([[0.75, 0.25], [0.25, 0.75]]), 6)
    2.0
    >>> check_identifiable([[0.5, 0.5], [0.5, 0.5]])
    Traceback (most recent call last):
    ...
    dprivacy.local.estimation.NotIdentifiableError: T cannot tell its inputs apart: ...
    """
    m, inputs, _ = _matrix(T)
    n_in, n_out = m.shape
    if n_in > n_out:
        raise NotIdentifiableError(
            f"T cannot tell its inputs apart: it has {n_in} inputs but only {n_out} outputs, so "
            "the output distribution does not determine the input shares; estimate fewer "
            "(merged) inputs, or use a randomiser with at least as many outputs as inputs")
    u, s, vt = np.linalg.svd(m, full_matrices=False)
    cond = math.inf if s[-1] <= 0 else float(s[0] / s[-1])
    if not cond <= max_condition:
        tiny = s <= s[0] / max_condition
        rank = int(np.sum(~tiny))
        # the input combinations T cannot see: left singular vectors of the small singular values
        weight = np.sqrt(np.sum(u[:, tiny] ** 2, axis=1))
        involved = [inputs[i] for i in np.flatnonzero(weight > 0.1 * weight.max())]
        shown = ", ".join(repr(v) for v in involved[:10]) + (" ..." if len(involved) > 10 else "")
        raise NotIdentifiableError(
            f"T cannot tell its inputs apart: its condition number is {cond:.3g} (above "
            f"{max_condition:.3g}; numerical rank {rank} of {n_in} inputs), so some mixtures of "
            f"the inputs {shown} give (nearly) the same output distribution and their shares "
            "cannot be recovered from any number of reports (an inversion would return noise "
            "magnified that much); merge those inputs and estimate the merged shares, or use a "
            "randomiser whose rows differ")
    return cond


def _counts(outputs: Any, n_out: int, labels: list[Any] | None) -> np.ndarray:
    if labels is not None:  # canonical JSON labels, as the agent and the aggregator compare them
        index = {_key(v): j for j, v in enumerate(labels)}
        seq = outputs.tolist() if isinstance(outputs, np.ndarray) else list(outputs)
        cols = np.empty(len(seq), dtype=np.intp)
        for i, v in enumerate(seq):
            j = index.get(_key(_plain(v)))
            if j is None:
                raise ValidationError(f"report {i} is {str(v)[:60]!r}, which is not an output of T")
            cols[i] = j
    else:
        cols = np.asarray(outputs).ravel()
        if cols.size and (cols.dtype.kind not in "iu" or cols.min() < 0 or cols.max() >= n_out):
            raise ValidationError(f"reports must be output column indices in [0, {n_out}) of T")
        cols = cols.astype(np.intp)
    return np.bincount(cols, minlength=n_out).astype(float)


def _simplex_covariance(m: np.ndarray, p: np.ndarray, n: int) -> np.ndarray:
    """Inverse Fisher information of the shares, restricted to ``Σ f = 1``."""
    used = p > 0
    info = n * (m[:, used] / p[used]) @ m[:, used].T
    inv = np.linalg.pinv(info)
    one = inv @ np.ones(m.shape[0])
    return inv - np.outer(one, one) / float(np.sum(one))


def estimate_frequencies(T: Any, outputs: Sequence[Any] | np.ndarray, *,  # noqa: N803
                         method: str = "least_squares", max_condition: float = MAX_CONDITION,
                         tol: float = 1e-10, max_iter: int = 100_000) -> FrequencyEstimate:
    """Estimate the share of each input of ``T`` from the reports ``outputs`` of many users.

    Parameters
    ----------
    T : MatrixRandomiser or array (n_in, n_out)
        The randomiser every user applied (any right-stochastic matrix, square or not; e.g. the
        optimal d_X randomiser of ``dprivacy local optimal``).
    outputs : sequence
        One report per user: an output label of a :class:`MatrixRandomiser` (as in replies), or
        a column index of an array ``T``.
    method : "least_squares" or "mle"
        Unbiased linear inversion, or maximum likelihood on the simplex by EM (see the module).
    max_condition : float
        Refuse (:class:`NotIdentifiableError`) a ``T`` with a larger condition number.
    tol, max_iter : float, int
        EM stops when no share moves by more than ``tol`` in a step, or after ``max_iter`` steps.

    Returns
    -------
    FrequencyEstimate

    Raises
    ------
    NotIdentifiableError
        ``T`` cannot tell its inputs apart (rank below its inputs, or ill-conditioned).
    ValidationError
        No reports, a report that is not an output of ``T``, or an unknown method.

    Examples
    --------
    >>> T = [[0.75, 0.25], [0.25, 0.75]]
    >>> est = estimate_frequencies(T, [0] * 400 + [1] * 600)
    >>> est.shares.round(6).tolist(), est.std_errors.round(4).tolist()
    ([0.3, 0.7], [0.031, 0.031])
    """
    if method not in ("least_squares", "mle"):
        raise ValidationError(f"method = {method!r}: use 'least_squares' or 'mle'")
    m, inputs, labels = _matrix(T)
    cond = check_identifiable(m, max_condition)
    c = _counts(outputs, m.shape[1], labels)
    n = int(c.sum())
    if n == 0:
        raise ValidationError("no reports: nothing to estimate from")
    o = c / n
    if method == "least_squares":
        a = np.linalg.pinv(m.T)  # (n_in, n_out)
        f = a @ o
        p = np.clip(m.T @ f, 0.0, None)
        p = p / p.sum()
        cov = (a * p) @ a.T / n - np.outer(a @ p, a @ p) / n
        return FrequencyEstimate(inputs, f, np.sqrt(np.clip(np.diag(cov), 0.0, None)), cov,
                                 method, n, cond)
    f = np.full(m.shape[0], 1.0 / m.shape[0])
    converged, it = False, 0
    for it in range(1, int(max_iter) + 1):  # noqa: B007 (the count is reported)
        p = m.T @ f
        ratio = np.divide(o, p, out=np.zeros_like(o), where=p > 0)
        new = f * (m @ ratio)
        new /= new.sum()
        step = float(np.max(np.abs(new - f)))
        f = new
        if step <= tol:
            converged = True
            break
    cov = _simplex_covariance(m, m.T @ f, n)
    return FrequencyEstimate(inputs, f, np.sqrt(np.clip(np.diag(cov), 0.0, None)), cov, method, n,
                             cond, it, converged)
