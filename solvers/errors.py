"""Exceptions of the ``solvers`` package (numerical layer; never imports dprivacy).

dprivacy wraps these into its own hierarchy; both derive from ``ValueError`` so that callers
who only know the standard library can still catch them.
"""

from __future__ import annotations


class SolverError(ValueError):
    """Bad input to a solver: NaN, wrong shapes, unknown method or loss, unsupported combination."""


class InfeasibleError(SolverError):
    """No feasible design exists, e.g. ``eps[i, j] = 0`` while ``F[:, i] != F[:, j]``.

    The privacy condition ``sum_k u_k |F_ki - F_kj| <= eps_ij`` then forces ``u_k = 0`` (infinite
    noise) for every query separating i and j. ``pair`` names the offending pair.
    """

    def __init__(self, message: str, pair: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.pair = pair
