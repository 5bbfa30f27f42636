"""experiments/bench_tables.py --quick runs end to end and reports every issue 9 and 24 target."""

from __future__ import annotations

import numpy as np

from experiments import bench_tables, bench_tables_cores


def test_bench_tables_quick_writes_its_table(tmp_path):
    t = bench_tables.main(["--quick", "--out", str(tmp_path), "--tmp", str(tmp_path / "data")])
    assert (tmp_path / "bench_tables_quick.csv").exists()
    assert (tmp_path / "bench_tables_quick.png").exists()
    assert (tmp_path / "bench_tables_quick_scaling.png").exists()
    assert set(t["benchmark"]) == {"where-where-noisy_count",
                                   "d_X histogram from Parquet (GROUP BY key)",
                                   "ProPer noisy_count, durable ledger",
                                   "ProPer durable noisy_count, 13 queries",
                                   "d_X histogram release, 1000 groups (Parquet)",
                                   "pandas where + noisy_count, default backend",
                                   *(f"cores: {w}" for w in bench_tables_cores.WORKLOADS)}
    assert (t["benchmark"] == "ProPer durable noisy_count, 13 queries").sum() == 13
    assert (t["store_bytes_per_person_after_100"].dropna() > 0).all()
    assert (t["time_s"] > 0).all() and (t["ref_time_s"] > 0).all()
    assert (t["ratio"] == t["time_s"] / t["ref_time_s"]).all()
    cores = t[t["benchmark"].str.startswith("cores: ")]  # 2 threads (time) vs 1 (reference)
    assert np.allclose(cores["speedup"], cores["ref_time_s"] / cores["time_s"])
    for col in ("ratio_to_exact_1_thread", "ratio_to_exact_2_threads"):
        assert np.all(np.isfinite(cores[col])) and np.all(cores[col] > 0)
