"""Inputs of the golden mechanism configs under tests/data/golden/ (not a test module).

The files were written by dprivacy 0.1 (config version 2, fingerprint encoding dprivacy-fp-2)
with ``python -m tests.golden_inputs``. Later versions must keep loading them with the inputs
built here: do NOT change these builders or regenerate the files (add new ones instead).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

import dprivacy as dp
from dprivacy import metrics

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"


def _points():
    U = dp.Universe.from_points(np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 1.0], [4.5, 2.0]]),
                                names=["a", "b", "c", "d"])
    W = dp.Workload([[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    return U, metrics.Euclidean(0.5), W


def _attributes():
    el = pd.DataFrame({"sex": ["F", "F", "F", "M", "M", "M"], "age": [20, 40, 60] * 2,
                       "eps": [0.5, 1.0, 2.0, 0.5, 1.0, 2.0]})
    U = dp.Universe(el, ("sex", "age"))
    W = dp.Workload(sp.csr_array(np.array([[1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
                                           [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]])))
    return U, W


def inputs() -> dict[str, tuple]:
    """name -> (universe, metric, workload, kind) for every golden file."""
    U, M, W = _points()
    Ua, Wa = _attributes()
    return {
        "laplace_euclidean": (U, M, W, "laplace"),
        "exponential_euclidean": (U, M, W, "exponential"),
        "smalldb_euclidean": (U, M, W, "smalldb"),
        "mwem_euclidean": (U, M, W, "mwem"),
        "laplace_attribute_weighted": (Ua, metrics.AttributeWeighted({"sex": 1.0, "age": 0.5}),
                                       Wa, "laplace"),
        "laplace_elementwise_column": (Ua, metrics.ElementWise("eps"), Wa, "laplace"),
        "laplace_graph_labels": (U, metrics.Graph([("a", "b"), ("b", "c", 2.0), ("c", "d")],
                                                  eps=1.0), W, "laplace"),
    }


def write() -> None:  # pragma: no cover - run once by hand
    from dprivacy.config import MechanismConfig

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, (U, M, W, kind) in inputs().items():
        if kind == "laplace":
            cfg = MechanismConfig.from_design(W, U, M, dp.design(W, U, M, method="exact"))
        elif kind == "exponential":
            cfg = MechanismConfig.from_mechanism(dp.DXExponential.optimal(W, U, M), U, M)
        elif kind == "smalldb":
            cfg = MechanismConfig.from_mechanism(dp.DXSmallDB.from_solver(W, U, M, 200, size=2),
                                                 U, M)
        else:
            cfg = MechanismConfig.from_mechanism(dp.DXMWEM.from_solver(W, U, M, 200, T=2), U, M)
        cfg.save(GOLDEN / f"{name}.json")
        print(GOLDEN / f"{name}.json")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.golden_inputs --write   (only for NEW golden files)")
    write()
