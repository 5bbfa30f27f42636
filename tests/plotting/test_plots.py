"""The pictures: files written, the expected artists drawn, matplotlib only when asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dprivacy as dp
from dprivacy.design import ExactAnswerWarning
from dprivacy.errors import MissingDependencyError

pytest.importorskip("matplotlib")
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def _grid_design():
    xy = np.array([[x, y] for x in range(4) for y in range(3)], dtype=float)
    U = dp.Universe.from_points(xy)
    M = dp.metrics.Euclidean(eps_per_unit=0.5)
    rng = np.random.default_rng(0)
    W = dp.Workload(np.vstack([rng.uniform(size=(2, U.N)), np.ones(U.N)]),
                    names=("q0", "q1", "total"))
    with pytest.warns(ExactAnswerWarning):
        d = dp.design(W, U, M)
    return W, U, M, d


def test_design_plot_has_bars_and_binding_pairs(tmp_path: Path) -> None:
    from dprivacy.plotting import binding_pairs

    W, U, M, d = _grid_design()
    fig = d.plot(W, U, M, path=tmp_path / "d.png")
    assert isinstance(fig, Figure) and (tmp_path / "d.png").stat().st_size > 10_000
    ax_noise, ax_pairs = fig.axes[:2]
    bars = [p for p in ax_noise.patches]
    assert len(bars) == 3 + 2                       # 3 baseline bars, 2 designed (total: exact)
    texts = [t.get_text() for t in ax_noise.texts]
    assert "exact (no noise)" in texts and sum(": IF " in t for t in texts) == 2
    i, j, ratio = binding_pairs(d, W, U, M)
    assert i.size >= 1 and np.all(ratio >= 1 - 1e-6)
    lines = [c for c in ax_pairs.collections if isinstance(c, LineCollection)]
    assert len(lines) == 1 and len(lines[0].get_segments()) >= i.size
    rings = [c for c in ax_pairs.collections if isinstance(c, PathCollection)]
    assert len(rings[-1].get_offsets()) == i.size   # one ring per binding pair


def test_binding_pairs_are_exactly_the_tight_constraints() -> None:
    W, U, M, d = _grid_design()
    from dprivacy.plotting import binding_pairs

    i, j, ratio = binding_pairs(d, W, U, M, max_pairs=10_000, threshold=0.0)
    E = M.constraint_set(U)
    F = W.dense()
    loss = np.abs(F[:, i] - F[:, j]).T @ np.where(np.isinf(d.beta), 0, d.u)
    np.testing.assert_allclose(loss / np.array([E.pair_eps(np.array([a]), np.array([b]))[0]
                                                for a, b in zip(i, j, strict=True)]), ratio)


def test_geodesic_design_is_a_lon_lat_map(tmp_path: Path) -> None:
    cities = dp.data.load_us_cities().head(60)
    U = dp.Universe.from_points(cities[["latitude", "longitude"]].to_numpy())
    M = dp.metrics.Geodesic(eps_per_km=0.1)
    W = dp.Workload(cities["elevation"].to_numpy()[None, :] / 1000)
    fig = dp.design(W, U, M).plot(W, U, M)
    ax = fig.axes[1]
    assert ax.get_xlabel().startswith("longitude") and ax.get_ylabel().startswith("latitude")
    xs = ax.collections[0].get_offsets()[:, 0]
    np.testing.assert_allclose(np.sort(xs), np.sort(cities["longitude"].to_numpy()))


def test_randomiser_heat_map(tmp_path: Path) -> None:
    from dprivacy.local import MatrixRandomiser

    T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", "no"], outputs=["yes", "no"])
    fig = T.plot(path=tmp_path / "t.svg")
    assert (tmp_path / "t.svg").read_text().startswith("<?xml")
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), T.matrix)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["yes", "no"]
    assert "1.099" in ax.get_title()                # cost ln 3


def test_error_curves(tmp_path: Path) -> None:
    from dprivacy.plotting import plot_error_curves

    t = pd.DataFrame({"eps": [0.1, 1, 0.1, 1], "rmse": [14.1, 1.41, 5.0, 0.5],
                      "method": ["baseline", "baseline", "exact", "exact"]})
    fig = plot_error_curves(t, path=tmp_path / "e.png")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and [ln.get_label() for ln in ax.lines] == ["baseline", "exact"]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [5.0, 0.5])


def test_missing_matplotlib_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    W, U, M, d = _grid_design()
    with pytest.raises(MissingDependencyError, match=r'pip install "dprivacy\[plot\]"'):
        d.plot(W, U, M)


def test_cli_design_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    from dprivacy.cli import main

    (tmp_path / "u.csv").write_text("x,y\n0,0\n1,0\n0,2\n3,1\n")
    np.save(tmp_path / "F.npy", np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 1.0, 0.0]]))
    argv = ["design", "--universe", str(tmp_path / "u.csv"), "--metric", "euclidean",
            "--param", "eps_per_unit=0.5", "--queries", str(tmp_path / "F.npy"),
            "--out", str(tmp_path / "c.json"), "--plot", str(tmp_path / "d.png")]
    assert main(argv) == 0
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    assert "picture of the design written to" in capsys.readouterr().out
    (tmp_path / "c.json").unlink()
    (tmp_path / "d.png").unlink()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(argv) == 2                          # refused before any work
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "dprivacy[plot]"' in err
    assert not (tmp_path / "c.json").exists()


def test_import_dprivacy_and_plotting_do_not_load_matplotlib() -> None:
    code = ("import sys, dprivacy, dprivacy.plotting, dprivacy.local; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
