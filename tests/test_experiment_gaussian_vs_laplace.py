"""experiments/gaussian_vs_laplace.py --quick: every Gaussian strategy (eps_ij, 1e-6)-DP on every
pair (recomputed from its columns), certified to 0.1 %, and the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments import gaussian_vs_laplace as e


def test_analytic_gaussian_calibration():
    eps = np.array([0.05, 0.5, 1.0, 5.0, 50.0])
    s = e.max_sensitivity(eps, 1e-6)
    assert np.allclose(e.analytic_delta(eps, s), 1e-6, rtol=1e-6)
    assert np.all(e.analytic_delta(eps, s * 1.001) > 1e-6)
    # the classical sufficient calibration is looser: sigma = Delta sqrt(2 ln(1.25/delta)) / eps
    assert np.all(s[eps < 1] >= eps[eps < 1] / np.sqrt(2 * np.log(1.25 / 1e-6)))


@pytest.mark.slow
def test_quick_run(tmp_path: Path) -> None:
    df = e.run(quick=True, seed=1, outdir=tmp_path, only="8x8")
    assert (tmp_path / "gaussian_vs_laplace_only.md").stat().st_size > 0
    assert len(df) == 2
    assert np.all(df["certified_gap"] <= 1e-3) and np.all(df["certified_gap"] >= 0)
    assert np.all(df["dual_bound"] <= df["gaussian_error"])
    assert np.all(df["max_delta"] <= 1e-6 * (1 + 1e-9)) and np.all(df["max_delta"] > 0.9e-6)
    assert np.all(df["laplace_error"] > 0)


def test_grid_warm_start_from_the_half_grid():
    import dprivacy as dp

    U = dp.Universe.from_points(np.array([[a, b] for a in range(8) for b in range(8)], float))
    W = dp.ImplicitWorkload.all_rectangles(8, 8)
    M = dp.metrics.Euclidean(0.1)
    sol, worst = e._grid_coarse_to_fine(U, M, W, 1e-3, 60.0)
    assert sol.gap <= 1e-3 and sol.bound <= sol.error
    assert 0.9e-6 < worst <= 1e-6 * (1 + 1e-9)
