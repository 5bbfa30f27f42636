"""Pictures of designs, randomisers and error curves (matplotlib, from the ``[plot]`` extra).

Nothing here imports matplotlib until a function is called, so ``import dprivacy`` never loads
it; without matplotlib a call raises :class:`~dprivacy.errors.MissingDependencyError` with the
one line that fixes it (``pip install "dprivacy[plot]"``). Every function returns a
``matplotlib.figure.Figure`` built without pyplot (no global state, no window) and, given
``path``, also writes it (the format follows the file name: ``.png``, ``.pdf``, ``.svg``).

* :func:`plot_design`: noise per query against the ε_min-DP baseline, and the pairs whose
  privacy constraint binds, over the universe's points (a longitude/latitude map for a geodesic
  metric); also :meth:`dprivacy.Design.plot`.
* :func:`plot_strategy`: a strategy design's standard deviation per answer and its strategy
  matrix; also ``dprivacy design --method strategy --plot``.
* :func:`plot_randomiser`: a heat map of a local randomiser's matrix T; also
  :meth:`dprivacy.local.MatrixRandomiser.plot`.
* :func:`plot_error_curves`: error against ε, one line per method (log-log).
"""

from dprivacy.plotting.curves import plot_error_curves
from dprivacy.plotting.design import binding_pairs, plot_design
from dprivacy.plotting.randomiser import plot_randomiser
from dprivacy.plotting.strategy import plot_strategy

__all__ = ["binding_pairs", "plot_design", "plot_error_curves", "plot_randomiser", "plot_strategy"]
