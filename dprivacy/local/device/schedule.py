"""How long a device's step may take: a time fixed by the query alone.

From the moment the agent starts on a query to the moment its reply is ready, an answered query
takes exactly :func:`step_seconds` of it:

* ``t``, the time bound of ``pre`` (a sandboxed ``pre`` is killed at it);
* :data:`PAD_SLACK`, which covers killing and collecting a sandboxed ``pre`` at its bound;
* :func:`t_bound`, the time T may take to draw its output (it grows with the coordinates of a
  product randomiser);
* the agent's own budget (:data:`STEP_BUDGET` by default) for everything else it does:
  parsing and pricing the query, the ledger transactions, reading the sandbox's record.

If the step is not done by then, the reply is the *default*: T applied to a uniformly random
element of its domain, drawn before any data was read, exactly what domain enforcement gives a
``pre`` that fails. It leaves at the scheduled time all the same.

Privacy condition: none (the schedule depends on the query's public text only).
"""

from __future__ import annotations

from dprivacy.local.device.sandbox import PAD_SLACK
from dprivacy.local.query import Query
from dprivacy.local.randomiser import ProductRandomiser, Randomiser

__all__ = ["STEP_BUDGET", "step_seconds", "t_bound"]

#: Seconds the agent allows itself for its own work in one step (all but ``pre`` and T).
STEP_BUDGET = 0.5
#: Seconds T may take, plus this much per coordinate of a product randomiser.
T_BASE, T_PER_COORDINATE = 0.02, 2e-5


def t_bound(T: Randomiser) -> float:  # noqa: N803 (the paper's symbol)
    """Seconds allowed for drawing T's output (and checking its input).

    Examples
    --------
    >>> from dprivacy.local.randomiser import MatrixRandomiser
    >>> t_bound(MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]]))
    0.02
    """
    if isinstance(T, ProductRandomiser):
        return T_BASE + T_PER_COORDINATE * int(T.length or 0)
    return T_BASE


def step_seconds(q: Query, budget: float = STEP_BUDGET) -> float:
    """Duration of a device's step on ``q``: ``t + PAD_SLACK + t_bound(T) + budget``.

    Examples
    --------
    >>> from dprivacy.local.case_studies import warner_query
    >>> round(step_seconds(warner_query("w", 1.0, "x", ["a", "b"])), 2)  # t = 1 s by default
    1.77
    """
    return float(q.t) + PAD_SLACK + t_bound(q.T) + float(budget)
