"""Reproduction scripts in --quick mode: columns, the invariants of spec §3.9, the targets table."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import run_all, targets

os.environ.setdefault("DPRIVACY_NO_PROGRESS", "1")


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="module")
def outcome(outdir: Path) -> run_all.Outcome:
    return run_all.run_all(quick=True, seed=1, outdir=outdir, echo=False)


@pytest.mark.parametrize("name", run_all.EXPERIMENTS)
def test_columns_and_files(outcome: run_all.Outcome, outdir: Path, name: str) -> None:
    mod = importlib.import_module(f"experiments.{name}")
    df = outcome.results[name]
    assert list(df.columns) == mod.COLUMNS
    assert len(df) > 0
    written = pd.read_csv(outdir / f"{name}.csv")
    assert list(written.columns) == mod.COLUMNS and len(written) == len(df)
    assert (outdir / f"{name}.png").stat().st_size > 1000


@pytest.mark.parametrize("name", ["fig2b_single_synthetic", "fig3b_us_cities", "fig5_blowfish_if"])
def test_single_query_if_at_least_one(outcome: run_all.Outcome, name: str) -> None:
    IF = outcome.results[name].IF.to_numpy()
    assert np.all(np.isfinite(IF)) and IF.min() >= 1 - 1e-12


@pytest.mark.parametrize("name,keys", [
    ("fig2b_single_synthetic", ["query"]),
    ("fig3b_us_cities", ["metric", "query"]),
    ("fig5_blowfish_if", ["rule", "metric", "theta", "query"]),
    ("fig2cd_multi_strategies", ["matrix", "m", "rep", "method"]),
])
def test_if_independent_of_eps(outcome: run_all.Outcome, name: str, keys: list[str]) -> None:
    df = outcome.results[name]
    assert df.eps.nunique() >= 2 or name == "fig3b_us_cities"
    if name == "fig3b_us_cities":
        df = df[df.metric == "geodesic"]
        assert df.eps.nunique() == 2
    spread = df.groupby(keys).IF.agg(lambda v: v.max() / v.min() - 1)
    assert spread.max() < 1e-9


def test_if_independent_of_eps_across_runs(tmp_path: Path) -> None:
    """Two separate runs with different eps give the same IF per query (spec §3.9)."""
    from experiments import fig2b_single_synthetic as f

    a = f.run(quick=True, seed=3, outdir=tmp_path, eps=(0.02,))
    b = f.run(quick=True, seed=3, outdir=tmp_path, eps=(7.0,))
    np.testing.assert_allclose(a.IF.to_numpy(), b.IF.to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.noise_scale.to_numpy() / b.noise_scale.to_numpy(), 7.0 / 0.02)


def test_multi_query_ordering(outcome: run_all.Outcome) -> None:
    """No heuristic beats the exact log-loss optimum; for m = 1 all four coincide."""
    df = outcome.results["fig2cd_multi_strategies"]
    w = df.pivot_table(index=["matrix", "m", "rep", "eps"], columns="method", values="IF")
    for h in ("equal_split", "uniform", "budget_sharing"):
        assert (w[h] <= w["exact"] * (1 + 1e-6)).all(), h
    one = w.xs(1, level="m")
    assert np.allclose(one.to_numpy(), one[["exact"]].to_numpy(), rtol=1e-6)


def test_blowfish_rmse_is_baseline_over_if(outcome: run_all.Outcome) -> None:
    df = outcome.results["fig4_blowfish_rmse"]
    assert (df.rmse_dx <= df.rmse_baseline * (1 + 1e-12)).all()
    # RMSE scales as 1/eps exactly (both metrics are linear in eps)
    w = df.pivot_table(index=["rule", "metric", "theta"], columns="eps", values="rmse_dx")
    lo, hi = sorted(w.columns)
    np.testing.assert_allclose(w[lo] / w[hi], hi / lo, rtol=1e-9)


def test_example1_matches_spec(outcome: run_all.Outcome) -> None:
    df = outcome.results["example1_noise_scales"].set_index(["rule", "query"])
    assert df.match.all()
    assert df.loc[("min", "Y"), "noise_scale"] == pytest.approx(1.0)
    assert df.loc[("max", "Y"), "noise_scale"] == pytest.approx(0.2)


def test_elevation_query_beats_random_queries(outcome: run_all.Outcome) -> None:
    df = outcome.results["elevation_query"]
    assert (df.IF >= 1).all()
    assert (df.IF > df.random_max_IF).all()
    geo = df[df.metric == "geodesic"]
    assert geo.IF.nunique() == 1 or np.ptp(geo.IF) < 1e-9 * geo.IF.max()


def test_targets_table(outcome: run_all.Outcome, outdir: Path) -> None:
    tg = outcome.targets
    assert list(tg.columns) == targets.COLUMNS
    assert tg.target.tolist() == [f"T{k}" for k in range(1, 11)]
    assert set(tg.status) <= {"met", "missed", "differs (other data)"}
    assert tg.set_index("target").loc["T10", "status"] == "met"
    md = (outdir / "targets.md").read_text()
    assert md.count("\n| T") == 10


def test_run_all_rejects_unknown_name(outdir: Path) -> None:
    with pytest.raises(KeyError, match="unknown experiment"):
        run_all.run_all(quick=True, outdir=outdir, names=["fig9"], echo=False)


def test_script_main_prints_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from experiments import example1_noise_scales as e
    from experiments._common import main

    main(e.NAME, e.__doc__, e.run, e.summarize, ["--quick", "--outdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "noise_scale" in out and "MYA" in out
    assert (tmp_path / "example1_noise_scales.csv").is_file()
