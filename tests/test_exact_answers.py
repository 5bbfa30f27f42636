"""A query that never changes when a record moves (the total count) is released exactly, loudly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dprivacy as dp
from dprivacy.design import ExactAnswerWarning


def _inputs():
    U = dp.Universe.from_points(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]))
    W = dp.Workload(np.vstack([np.ones(4), [0.0, 1.0, 2.0, 3.0]]), names=("total", "ramp"))
    return U, dp.metrics.Euclidean(eps_per_unit=0.5), W


def test_total_count_is_exact_and_design_says_so() -> None:
    U, M, W = _inputs()
    with pytest.warns(ExactAnswerWarning, match=r"1 of 2 queries \('total'\).*EXACTLY"):
        d = dp.design(W, U, M)
    assert np.isinf(d.beta[0]) and np.isfinite(d.beta[1])
    mech = dp.DXLaplace(W, d)
    x = np.array([3, 1, 4, 1])
    y = mech.release(x, secure=False, rng=0)
    assert y[0] == x.sum()                       # the total, with no noise at all
    assert y[1] != W.answer(x)[1]                # the other query is noisy


def test_no_warning_without_exact_queries() -> None:
    U, M, W = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExactAnswerWarning)
        dp.design(dp.Workload(W.dense()[1:]), U, M)


def test_the_cli_prints_the_warning(tmp_path, capsys) -> None:
    from dprivacy.cli import main

    (tmp_path / "u.csv").write_text("x,y\n0,0\n1,0\n0,2\n3,1\n")
    np.save(tmp_path / "F.npy", np.vstack([np.ones(4), [0.0, 1.0, 2.0, 3.0]]))
    code = main(["design", "--universe", str(tmp_path / "u.csv"), "--metric", "euclidean",
                 "--param", "eps_per_unit=0.5", "--queries", str(tmp_path / "F.npy"),
                 "--out", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 0 and "warning:" in err and "EXACTLY" in err and "total" in err, err
