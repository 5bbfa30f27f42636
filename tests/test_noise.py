"""Tests of dprivacy.noise: secure sampler scale, secure default, rng policy, log-space choice."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import dprivacy.noise as noise
from dprivacy.errors import ValidationError

N_VAR = 20_000


def _var_bounds(b: float, n: int, z: float = 5.0) -> tuple[float, float]:
    """z-sigma band for the sample variance of n Laplace(b) draws (Var(X^2) = 24 b^4 - 4 b^4)."""
    var, sd = 2 * b * b, np.sqrt(20 * b**4 / n)
    return var - z * sd, var + z * sd


@pytest.mark.parametrize("b", [0.5, 3.0])
def test_secure_laplace_has_the_right_scale(b: float) -> None:
    z = noise.laplace(b, size=N_VAR)
    assert z.shape == (N_VAR,)
    lo, hi = _var_bounds(b, N_VAR)
    assert lo < z.var() < hi
    assert abs(z.mean()) < 5 * np.sqrt(2) * b / np.sqrt(N_VAR)
    # mean absolute deviation of Laplace(b) is b
    assert abs(np.abs(z).mean() - b) < 5 * b / np.sqrt(N_VAR)
    # and the whole distribution matches (Kolmogorov-Smirnov)
    # (the secure path is unseeded: thresholds are set so that a false alarm is ~1e-6 per run)
    assert stats.kstest(z, stats.laplace(scale=b).cdf).pvalue > 1e-6


def test_secure_laplace_per_entry_scales() -> None:
    scales = np.repeat([1.0, 10.0, 0.0], 8000).reshape(3, 8000)
    z = noise.laplace(scales)
    assert z.shape == (3, 8000)
    assert np.all(z[2] == 0.0)
    for row, b in zip(z[:2], (1.0, 10.0), strict=True):
        lo, hi = _var_bounds(b, row.size)
        assert lo < row.var() < hi


def test_scale_zero_is_exact_and_shapes_follow_numpy() -> None:
    assert noise.laplace(0.0) == 0.0
    assert isinstance(noise.laplace(1.0), float)
    assert noise.laplace(1.0, size=(2, 3)).shape == (2, 3)
    assert noise.laplace(np.ones(4), size=(5, 4)).shape == (5, 4)
    assert noise.laplace(np.ones(4), secure=False, rng=0).shape == (4,)
    assert np.all(noise.laplace(0.0, size=7, secure=False, rng=1) == 0.0)


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf, [1.0, -0.1]])
def test_bad_scale_is_refused(bad: object) -> None:
    for secure in (True, False):
        with pytest.raises(ValidationError):
            noise.laplace(bad, secure=secure)


def test_scale_that_does_not_broadcast_is_refused() -> None:
    with pytest.raises(ValidationError):
        noise.laplace(np.ones(3), size=4)


def test_secure_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_add, real_gm = noise._secure_add, noise._gumbel_max_measurement

    def spy_add(v: np.ndarray, s: np.ndarray) -> np.ndarray:
        calls.append("laplace")
        return real_add(v, s)

    def spy_gm() -> object:
        calls.append("choice")
        return real_gm()

    monkeypatch.setattr(noise, "_secure_add", spy_add)
    monkeypatch.setattr(noise, "_gumbel_max_measurement", spy_gm)
    noise.laplace(1.0, size=3, rng=0)
    noise.add_laplace([1.0, 2.0], 1.0, rng=0)
    noise.exponential_choice([0.0, 1.0], rng=0)
    assert calls == ["laplace", "laplace", "choice"]
    noise.laplace(1.0, size=3, rng=0, secure=False)
    noise.exponential_choice([0.0, 1.0], rng=0, secure=False)
    assert calls == ["laplace", "laplace", "choice"]


def test_secure_path_ignores_the_seed() -> None:
    a = noise.laplace(1.0, size=50, rng=0)
    b = noise.laplace(1.0, size=50, rng=0)
    assert not np.array_equal(a, b)  # OS CSPRNG, not the seed


def test_fast_path_is_reproducible_with_a_seed() -> None:
    a = noise.laplace([1.0, 2.0, 3.0], rng=42, secure=False)
    b = noise.laplace([1.0, 2.0, 3.0], rng=np.random.default_rng(42), secure=False)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, noise.laplace([1.0, 2.0, 3.0], rng=43, secure=False))
    lw = np.linspace(0, 3, 10)
    picks = [noise.exponential_choice(lw, rng=7, secure=False) for _ in range(5)]
    assert len(set(picks)) == 1
    z = noise.laplace(2.0, size=N_VAR, rng=3, secure=False)
    lo, hi = _var_bounds(2.0, N_VAR)
    assert lo < z.var() < hi


def test_add_laplace_centres_on_the_values() -> None:
    v = np.full(N_VAR, 1e6 + 0.123)
    y = noise.add_laplace(v, 2.0)
    assert abs((y - v).mean()) < 5 * np.sqrt(8) / np.sqrt(N_VAR)
    lo, hi = _var_bounds(2.0, N_VAR)
    assert lo < (y - v).var() < hi
    assert noise.add_laplace(5.0, 0.0) == 5.0
    with pytest.raises(ValidationError):
        noise.add_laplace([1.0, np.nan], 1.0)
    with pytest.raises(ValidationError):
        noise.add_laplace([1.0, 2.0], [1.0, 2.0, 3.0])


def _softmax(lw: np.ndarray) -> np.ndarray:
    p = np.exp(lw - lw.max())
    return p / p.sum()


@pytest.mark.parametrize("secure", [True, False])
def test_exponential_choice_matches_softmax_with_huge_utilities(secure: bool) -> None:
    lw = 1e6 + np.array([0.0, 1.0, 2.0, -1.0, 0.5, -np.inf])
    n = 6000
    rng = np.random.default_rng(11)
    counts = np.bincount(
        [noise.exponential_choice(lw, rng=rng, secure=secure) for _ in range(n)],
        minlength=lw.size,
    )
    assert counts[-1] == 0  # -inf never chosen
    p = _softmax(lw[:-1])
    assert stats.chisquare(counts[:-1], n * p).pvalue > 1e-6  # unseeded when secure


def test_exponential_choice_minus_inf_and_validation() -> None:
    lw = [-np.inf, 3.0, -np.inf]
    assert all(noise.exponential_choice(lw) == 1 for _ in range(20))
    assert noise.exponential_choice([1e308, -1e308]) == 0
    for bad in ([], [np.nan, 1.0], [np.inf, 0.0], [-np.inf, -np.inf], [[0.0, 1.0]]):
        with pytest.raises(ValidationError):
            noise.exponential_choice(bad)


def test_resolve_rng() -> None:
    g = np.random.default_rng(0)
    assert noise.resolve_rng(g) is g
    assert isinstance(noise.resolve_rng(None), np.random.Generator)
    assert noise.resolve_rng(5).random() == np.random.default_rng(5).random()
    for bad in ("seed", 1.5, -1, True):
        with pytest.raises(ValidationError):
            noise.resolve_rng(bad)  # type: ignore[arg-type]


def test_opendp_contrib_is_scoped_not_process_wide() -> None:
    """``import dprivacy`` and sampling leave OpenDP's feature switch as the user set it."""
    import subprocess
    import sys

    code = (
        "import opendp.mod as m, dprivacy as d\n"
        "assert 'contrib' not in m.GLOBAL_FEATURES, 'import enabled contrib'\n"
        "d.noise.add_laplace([1.0, 2.0], 1.0); d.noise.exponential_choice([0.0, 1.0])\n"
        "assert 'contrib' not in m.GLOBAL_FEATURES, 'sampling left contrib on'\n"
        "m.enable_features('contrib'); d.noise.laplace(2.5, size=3)\n"
        "assert 'contrib' in m.GLOBAL_FEATURES, 'the user opt-in was undone'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
