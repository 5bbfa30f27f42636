"""Memory limits the solvers check before they start, so that a workload too large for a
method is refused at once (with the route that handles it) rather than killed by the system.

numpy only; never imports dprivacy (and not cvxpy: the check runs before any solver loads).
"""

from __future__ import annotations

from solvers.constraints import ConstraintSet
from solvers.errors import SolverError

#: The exact, joint and bcd designs refuse at once when their first working set (dense rows
#: ``|F_ki - F_kj| / eps_ij``, one per pair, one entry per query) would need more than this
#: many bytes; the estimate counts four copies (the rows, their stack, the scaled matrix and the
#: solver's own), which is what the solve holds at its peak.
WORKING_SET_BYTES = 4 * 2**30


def check_working_set(m: int, cs: ConstraintSet, limit: int = WORKING_SET_BYTES) -> None:
    """Raise SolverError, naming the strategy route, when the first working set of m queries
    (each row's arg-max pair and twice the 4 m most loaded pairs, at most every constrained
    pair) would exceed ``limit`` bytes. Cheap: no scan is made."""
    pairs = min(int(cs.n_constraints), m + 2 * max(20, 4 * m))
    need = 4 * 8 * pairs * m
    if need > limit:
        raise SolverError(
            f"the exact (w, beta) design of m = {m} queries over {pairs} constrained pairs would "
            f"hold about {need / 2**30:.3g} GiB of constraint rows (pairs x queries), more than "
            f"its {limit / 2**30:.3g} GiB limit. A strategy mechanism answers large workloads "
            "in memory proportional to the output: use design_strategy (command line: "
            "--method strategy), with an ImplicitWorkload for all ranges, prefixes, rectangles "
            "or marginals (--workload ranges|prefixes|rectangles|marginals:K), or a smaller "
            "workload for the (w, beta) design")
