"""Live-data rate bound b·f/(l·ε) (spec §6.6, §9 row 11): the experiment in quick mode."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from experiments import tables_live_rate as lr


def test_quick_run_no_blocking_up_to_the_bound_and_predicted_share_above(tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    df = lr.run(quick=True, seed=0, outdir=tmp_path)
    assert list(df["c"]) == [0.5, 1.0, 1.25, 2.0]
    below, above = df[df["c"] <= 1], df[df["c"] > 1]
    assert (below["max_blocked_share"] == 0).all()  # at or under the bound: nobody blocked
    assert (above["blocked_share"] > 0).all()  # just above it blocking starts: the bound is tight
    assert above["blocked_share"].to_numpy() == pytest.approx([0.2, 0.5])  # 1 − 1/c
    assert (df["abs_error_vs_prediction"] < 1e-9).all() and df["claim_holds"].all()
    assert (df["queries"] > 0).all()
    assert (tmp_path / "tables_live_rate.csv").exists() and (tmp_path / "tables_live_rate.png").exists()


def test_simulate_counts_queries_and_rejects_partial_batches():
    rng = np.random.default_rng(1)
    one = Fraction(1)
    s = lr.simulate(one, 2, 4, Fraction(1, 2), Fraction(1), ticks=10, rng=rng)  # q* = 1
    assert s["queries"] == 6 and s["max_blocked_share"] == 0  # ticks 4..9, one query each
    s = lr.simulate(one, 2, 4, Fraction(1, 2), Fraction(3, 2), ticks=10, rng=rng)
    assert s["blocked_share"] == pytest.approx(lr.predicted_blocked(one, Fraction(1, 2),
                                                                     Fraction(3, 2), 2))
    with pytest.raises(ValueError, match="multiple"):
        lr.simulate(one, 3, 4, Fraction(1, 2), one, ticks=5, rng=rng)
