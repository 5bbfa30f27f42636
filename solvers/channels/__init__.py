"""Optimal d_X-local randomisers as linear programs (numerical only; never imports dprivacy).

* :mod:`.optimal`: :func:`~solvers.channels.optimal.solve_dx_lp`, the LP over the channel
  ``T`` (direct, cutting planes, or column generation);
* :mod:`.column_lagrangian`: the LP decomposed by output column, with a proven lower bound;
* :mod:`.separation`: the violated pairs of one column found without listing the pairs, and
  blocked exact checks of a channel on all pairs or through a graph's edges;
* :mod:`.symmetry`: permutations of the inputs that leave the LP unchanged (the square's);
* :mod:`.warm_start`: a smaller grid's multipliers and columns moved onto a larger grid (a warm
  start of the column decomposition);
* :mod:`.dantzig_wolfe`: the column-generation master and pricing;
* :mod:`.lp_parts`: the HiGHS model pieces both methods share;
* :mod:`.spanner`: greedy metric spanners (fewer privacy constraints, bounded dilation) and the
  exact edges of a graph metric.

The user-facing wrapper that takes a metric and returns a randomiser is
:func:`dprivacy.local.optimal_randomiser`.
"""
