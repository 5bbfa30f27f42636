"""The local-simulation benchmark runs (--quick) and both libraries estimate with the same error."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(300)


def test_bench_local_sim_quick(tmp_path) -> None:
    pytest.importorskip("pure_ldp")
    from experiments import bench_local_sim as b

    df = b.run(quick=True, seed=1, outdir=tmp_path, users=20_000, reps=2)
    assert (tmp_path / "bench_local_sim.csv").exists() and (tmp_path / "bench_local_sim.png").exists()
    assert set(df.library) == {"dprivacy", "pure-ldp"} and set(df.method) == {"k-RR", "SUE"}
    assert len(df) == 8 and np.all(df.seconds > 0)
    # the same estimators: every run's RMSE within a factor 2 of the closed-form standard deviation
    ratio = df.rmse / df.sd_closed_form
    assert np.all((ratio > 0.4) & (ratio < 2.0)), ratio.tolist()
    s = b.summarize(df)
    assert set(s.columns) >= {"seconds", "rmse", "time_vs_pure_ldp"}
