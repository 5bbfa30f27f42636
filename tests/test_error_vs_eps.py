"""experiments.error_vs_eps: error falls as 1/ε, the designs beat the baseline at every ε."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def test_quick_run(tmp_path: Path) -> None:
    from experiments import error_vs_eps as E

    df = E.run(quick=True, seed=0, outdir=tmp_path)
    assert (tmp_path / "error_vs_eps.csv").is_file()
    assert (tmp_path / "error_vs_eps.png").read_bytes()[:4] == b"\x89PNG"
    wide = df.pivot(index="eps_per_km", columns="method", values="rmse")
    scaled = wide.mul(wide.index.to_numpy(), axis=0)        # rmse x a: constant if error ~ 1/a
    np.testing.assert_allclose(scaled / scaled.iloc[0], 1.0, rtol=1e-6)
    exact, s3, s1, base = (wide[c] for c in ("exact design", "Strategy 3",
                                             "Strategy 1 (equal split)", E.BASELINE))
    assert (exact <= s3 * (1 + 1e-9)).all() and (s3 <= base).all() and (s1 <= base).all()
    sampled = df[df.method == "exact design"].set_index("eps_per_km")["sampled"]
    np.testing.assert_allclose(sampled, exact, rtol=0.15)   # 200 draws x 6 queries
