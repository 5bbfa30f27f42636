"""The tables reproductions in --quick mode: qualitative targets of the spec (§9 rows 1, 8, 10)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import bench_kmeans, tables_scaling, tables_teachers


def test_teachers_pinq_3eps_proper_2eps(tmp_path):
    t = tables_teachers.main(["--quick", "--out", str(tmp_path)])
    paper = t.iloc[0]
    assert paper["pinq_in_eps"] == pytest.approx(3) and paper["proper_in_eps"] == pytest.approx(2)
    assert np.allclose(t["proper_in_eps"], t["g"])  # ProPer: g·ε
    overlap = t[t["g"] > 1]
    assert np.allclose(overlap["pinq_in_eps"], overlap["queries"])  # PINQ: n·ε
    disjoint = t[t["g"] == 1]
    assert np.allclose(disjoint["pinq_in_eps"], 1)  # disjoint: ε in both
    assert (tmp_path / "tables_teachers_quick.csv").exists()
    assert (tmp_path / "tables_teachers_quick.png").exists()


def test_scaling_factors_g_22(tmp_path):
    t = tables_scaling.main(["--quick", "--out", str(tmp_path)])
    assert list(t["measured_s"]) == pytest.approx([1, 2, 3, 10, 3, 3, 22])
    assert list(t["dry_run_cost"]) == pytest.approx(list(t["charged"]))
    assert (tmp_path / "tables_scaling_quick.png").exists()


def test_kmeans_benchmark_quick_runs_and_reports_ratios(tmp_path):
    t = bench_kmeans.main(["--quick", "--out", str(tmp_path)])
    assert list(t["records"]) == [500, 2000]
    assert (t["time_ratio"] > 0).all()
    assert (t["memory_ratio"] >= 1).all()  # ProPer stores provenance and budgets on top
    assert (tmp_path / "bench_kmeans_quick.csv").exists()


def test_kmeans_gives_the_same_centres_in_both_systems_when_nobody_is_dropped():
    df, init = bench_kmeans.make_data(5000, seed=3)
    centres = bench_kmeans.run("ProPer", df, init)
    pinq_centres = bench_kmeans.run("PINQ", df, init)
    assert np.isfinite(centres).all() and np.isfinite(pinq_centres).all()
    # same program, same noise seed: both systems reach the same centres when nobody is dropped
    assert np.allclose(centres, pinq_centres, atol=1e-9)

