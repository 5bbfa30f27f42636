"""experiments.bench_design_dask runs end to end: the Dask design equals the one-process design
and the independent pair bound confirms both."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import bench_design_dask


@pytest.mark.slow
def test_bench_design_dask_small(tmp_path, capsys):
    pytest.importorskip("distributed")
    assert bench_design_dask.main(["--sizes", "5000", "--outdir", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "bench_design_dask.csv").set_index("cell")
    assert (tmp_path / "bench_design_dask.png").stat().st_size > 0
    assert set(df.index) == {"local", "dask"}
    assert df.loc["dask", "objective"] == pytest.approx(df.loc["local", "objective"], rel=1e-9)
    assert "dask scan" in df.loc["dask", "verified_by"]
    for cell in ("local", "dask"):
        assert bool(df.loc[cell, "verify_holds"])
        assert df.loc[cell, "verify_max_exact"] == pytest.approx(df.loc[cell, "max_ratio"],
                                                                 rel=1e-12)
        assert df.loc[cell, "verify_pairs_exact"] < df.loc[cell, "pairs_total"]
    assert 0 < df.loc["dask", "worker_peak_gib_design"] < 4
    d = df.loc["dask"]
    assert d["worker_malloc"] == "MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456"
    phases = ["tree", "ranges", "ship", "seed", "walk", "other"]
    assert all(d[f"seconds_{p}"] >= 0 for p in phases)
    assert sum(d[f"seconds_{p}"] for p in phases) == pytest.approx(d["seconds_design"], rel=1e-9)
    assert "every pair within the budget" in capsys.readouterr().out
