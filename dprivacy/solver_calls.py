"""What every design shares: the tolerance of the privacy check, and calls into :mod:`solvers`
with their errors turned into dprivacy errors."""

from __future__ import annotations

from typing import Any

import solvers
from dprivacy.errors import InfeasibleDesignError, ValidationError

__all__ = ["PRIVACY_RTOL", "call_solver"]

#: Relative tolerance on the privacy condition (1e-9): a design may exceed a budget by this factor.
PRIVACY_RTOL = 1e-9


def call_solver(fn, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN201
    """Call a :mod:`solvers` function, turning its errors into dprivacy errors."""
    try:
        return fn(*args, **kwargs)
    except solvers.InfeasibleError as exc:
        raise InfeasibleDesignError(f"{exc} (see docs/theory.md, 'Zero and infinite distances')") from exc
    except solvers.SolverError as exc:
        raise ValidationError(str(exc)) from exc
