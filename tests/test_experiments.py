"""Reproduction scripts in --quick mode: columns, the invariants of spec §3.9, the targets table."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import run_all, targets

os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm reads it: no progress bars in the test log


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
    df = outcome.results[name]
    if name == "fig5_blowfish_if":  # IF >= 1 holds against the d_X-private eps_min baseline only
        df = df[df.baseline == "eps_min"]
    IF = df.IF.to_numpy()
    assert len(IF) > 0 and np.all(np.isfinite(IF)) and IF.min() >= 1 - 1e-12


@pytest.mark.parametrize("name,keys", [
    ("fig2b_single_synthetic", ["query"]),
    ("fig3b_us_cities", ["metric", "query"]),
    ("fig5_blowfish_if", ["rule", "metric", "baseline", "theta", "query"]),
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
    assert set(df.baseline) == {"eps_min", "eps"}
    private = df[df.baseline == "eps_min"]
    assert (private.rmse_dx <= private.rmse_baseline * (1 + 1e-12)).all()
    # RMSE scales as 1/eps exactly (both metrics are linear in eps)
    w = df.pivot_table(index=["rule", "metric", "baseline", "theta"], columns="eps",
                       values="rmse_dx")
    lo, hi = sorted(w.columns)
    np.testing.assert_allclose(w[lo] / w[hi], hi / lo, rtol=1e-9)
    # the d_X RMSE does not depend on the baseline; the baselines' RMSEs are sqrt(2) Df / eps'
    k = ["rule", "metric", "theta", "eps"]
    a = df[df.baseline == "eps_min"].set_index(k)
    b = df[df.baseline == "eps"].set_index(k).loc[a.index]
    np.testing.assert_allclose(a.rmse_dx, b.rmse_dx, rtol=1e-12)
    np.testing.assert_allclose(b.rmse_baseline / a.rmse_baseline, a.eps_min / b.index.
                               get_level_values("eps"), rtol=1e-12)
    # eps-DP baseline: one value per eps, whatever the metric, reading or theta
    base_eps = df[df.baseline == "eps"].groupby("eps").rmse_baseline
    np.testing.assert_allclose(base_eps.max(), base_eps.min(), rtol=1e-12)
    # d1 has eps_min = eps as soon as one pair lies within theta: the baselines coincide there
    d1 = a.xs("d1", level="metric")
    np.testing.assert_allclose(d1.eps_min, d1.index.get_level_values("eps"), rtol=1e-12)


def test_blowfish_eps_baseline_if(outcome: run_all.Outcome) -> None:
    """IF against the eps-DP baseline = IF against eps_min-DP times eps_min / eps, per query."""
    f5 = outcome.results["fig5_blowfish_if"]
    f4 = outcome.results["fig4_blowfish_rmse"]
    k = ["rule", "metric", "theta", "eps", "query"]
    a = f5[f5.baseline == "eps_min"].set_index(k).IF
    b = f5[f5.baseline == "eps"].set_index(k).IF.loc[a.index]
    scale = f4[f4.baseline == "eps"].set_index(k[:-1]).eps_min / \
        f4[f4.baseline == "eps"].set_index(k[:-1]).index.get_level_values("eps")
    expected = a * scale.reindex(a.index.droplevel("query")).to_numpy()
    np.testing.assert_allclose(b.to_numpy(), expected.to_numpy(), rtol=1e-12)
    # d2 with theta above the closest pair: eps_min < eps, and the eps-DP Laplace can beat d_X
    d2 = b.xs("d2", level="metric")
    assert d2.min() < 1


@pytest.mark.parametrize("factor,status", [(1.5, "met"), (3.0, "partly met"), (0.2, "missed")])
def test_t8_criterion(factor: float, status: str) -> None:
    """d2 = factor * d1; RMSE rising in theta unless factor < 1 (then it falls, and d2 < d1)."""
    rows = [{"rule": r, "metric": m, "baseline": base, "theta": th, "eps": 1.0, "eps_min": 1.0,
             "queries": 1, "rmse_dx": (th if factor >= 1 else 1 / th) * (factor if m == "d2" else 1),
             "rmse_baseline": 10.0, "mean_IF": 1.0}
            for r in ("A", "B") for base in ("eps_min", "eps") for th in (1.0, 2.0, 4.0)
            for m in ("d1", "d2")]
    tg = targets.compare({"fig4_blowfish_rmse": pd.DataFrame(rows)})
    assert tg.target.tolist() == ["T8 (eps_min)", "T8 (eps)"]
    assert (tg.status == status).all()


def _fake_fig5(low: tuple[float, float], high: tuple[float, float]) -> pd.DataFrame:
    rows = [{"rule": r, "metric": m, "baseline": base, "theta": th, "eps": 1.0, "query": 0,
             "IF": v}
            for r in ("A", "B") for base in ("eps_min", "eps")
            for th, (v1, v2) in ((1.0, low), (9.0, high)) for m, v in (("d1", v1), ("d2", v2))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("low,high,status", [
    ((2.0, 1.0), (1.5, 1.45), "met"),        # the paper's statement
    ((2.0, 1.0), (1.0, 2.0), "partly met"),  # low theta right, not similar at high theta
    ((1.0, 2.0), (1.0, 2.0), "missed"),      # neither
])
def test_t9_criterion(low: tuple[float, float], high: tuple[float, float], status: str) -> None:
    tg = targets.compare({"fig5_blowfish_if": _fake_fig5(low, high)})
    assert tg.target.tolist() == ["T9 (eps_min)", "T9 (eps)"]
    assert (tg.status == status).all()


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
    blowfish = [f"T{k} ({b})" for k in (8, 9) for b in ("eps_min", "eps")]
    assert tg.target.tolist() == [f"T{k}" for k in range(1, 8)] + blowfish + ["T10"]
    assert set(tg.status) <= {"met", "partly met", "missed", "differs (other data)"}
    assert tg.set_index("target").loc["T10", "status"] == "met"
    md = (outdir / "targets.md").read_text()
    assert md.count("\n| T") == 12


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
