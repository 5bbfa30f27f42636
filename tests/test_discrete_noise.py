"""dprivacy.discrete_noise: the exact discrete Laplace sampler (distribution, grid, privacy ratio)
and its exact primitives (Bernoulli of a rational, exp(-γ), the e^-1 geometric, thresholds)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprivacy import discrete_noise as dn
from dprivacy.errors import ValidationError


def pmf(z: np.ndarray, b: float) -> np.ndarray:
    """The exact discrete Laplace probabilities (1-q)/(1+q) q^|z|, q = exp(-1/b)."""
    q = math.exp(-1.0 / b)
    return (1 - q) / (1 + q) * q ** np.abs(z)


def chi2_pvalue(z: np.ndarray, b: float, min_expected: float = 20.0) -> float:
    """Chi-square of the sample against pmf(b), with both tails pooled into one cell each."""
    n = z.size
    hi = 0
    while n * pmf(np.array([hi + 1]), b)[0] >= min_expected:
        hi += 1
    support = np.arange(-hi, hi + 1)
    expected = n * pmf(support, b)
    q = math.exp(-1.0 / b)
    tail = n * (1 - q) / (1 + q) * q ** (hi + 1) / (1 - q)  # P(Z > hi) = P(Z < -hi)
    observed = np.array([np.sum(z < -hi), *[np.sum(z == v) for v in support], np.sum(z > hi)])
    exp_all = np.array([tail, *expected, tail])
    return float(stats.chisquare(observed, exp_all * n / exp_all.sum()).pvalue)


SCALES = [0.4, 2.0, 1 / 0.3, 40.5, 1000.3]


@pytest.mark.parametrize("b", SCALES)
def test_matches_the_exact_distribution_chi_square(b: float) -> None:
    z = dn.discrete_laplace(np.full(60_000, b), rng=7, secure=False)
    assert z.dtype == np.int64
    assert chi2_pvalue(z, b) > 1e-4  # seeded: deterministic


def test_secure_draws_match_the_exact_distribution() -> None:
    z = dn.discrete_laplace(2.5, size=60_000)  # the OS CSPRNG (unseeded: false alarm ~1e-6)
    assert chi2_pvalue(z, 2.5) > 1e-6
    assert not np.array_equal(z[:50], dn.discrete_laplace(2.5, size=50))


def test_per_entry_scales_and_zero_scale() -> None:
    sc = np.repeat([0.0, 1.5, 30.0], 30_000)
    z = dn.discrete_laplace(sc, rng=3, secure=False)
    assert np.all(z[:30_000] == 0)
    assert chi2_pvalue(z[30_000:60_000], 1.5) > 1e-4
    assert chi2_pvalue(z[60_000:], 30.0) > 1e-4


def test_privacy_ratio_of_neighbouring_answers_is_at_most_e_to_the_eps() -> None:
    """Answers a = 0 and a' = 1 (sensitivity 1), scale b: for every output y the probability
    ratio is q^(|y| - |y-1|) <= e^(1/b) exactly; the sampled frequencies agree with it."""
    b = 2.0
    eps = 1.0 / b
    y0 = dn.add_discrete_laplace(np.zeros(200_000, dtype=np.int64), b, rng=11, secure=False)
    y1 = dn.add_discrete_laplace(np.ones(200_000, dtype=np.int64), b, rng=12, secure=False)
    for y in range(-8, 10):
        exact = pmf(np.array([y]), b)[0] / pmf(np.array([y - 1]), b)[0]
        assert exact <= math.exp(eps) * (1 + 1e-12)
        p0, p1 = np.mean(y0 == y), np.mean(y1 == y)
        se = math.sqrt(p0 / (200_000 * max(p1, 1e-12) ** 2) + p0**2 / (200_000 * p1**3))
        assert abs(p0 / p1 - exact) < 5 * se + 1e-9
        assert p0 / p1 <= math.exp(eps) + 5 * se


def test_outputs_lie_on_the_integer_grid() -> None:
    values = np.array([0, 5, -3, 10**12, 2**52], dtype=np.int64)
    for secure in (True, False):
        y = dn.add_discrete_laplace(values, np.array([1.0, 0.3, 7.0, 2.0, 0.0]), rng=0,
                                    secure=secure)
        assert y.dtype == float and np.all(y == np.round(y))
        assert y[-1] == 2**52  # scale 0: exact
        assert np.all((y - values) == np.round(y - values))
    with pytest.raises(ValidationError):
        dn.add_discrete_laplace([0.5, 1.0], 1.0)


def test_scales_are_validated() -> None:
    for bad in (-1.0, np.nan, np.inf, dn.MAX_SCALE * 2):
        with pytest.raises(ValidationError):
            dn.discrete_laplace(bad)
    with pytest.raises(ValidationError):
        dn.discrete_laplace(np.ones(3), size=4)


def test_seeded_path_is_reproducible() -> None:
    a = dn.discrete_laplace(np.full(100, 3.0), rng=5, secure=False)
    assert np.array_equal(a, dn.discrete_laplace(np.full(100, 3.0), rng=5, secure=False))
    assert not np.array_equal(a, dn.discrete_laplace(np.full(100, 3.0), rng=6, secure=False))


# ----------------------------------------------------------------------- exact primitives
class Scripted:
    """A byte source that returns given bytes first, then bytes from a seeded generator."""

    def __init__(self, first: list[int], seed: int = 0) -> None:
        self.first = list(first)
        self.gen = np.random.default_rng(seed)

    def __call__(self, n: int) -> np.ndarray:
        take, self.first = self.first[:n], self.first[n:]
        rest = self.gen.integers(0, 256, size=n - len(take), dtype=np.uint8)
        return np.concatenate([np.array(take, dtype=np.uint8), rest])


@pytest.mark.parametrize(("a", "c"), [(1, 3), (2, 7), (5, 8), (0, 5), (9, 9), (1000, 2**54 - 1)])
def test_bernoulli_of_a_rational_is_exact(a: int, c: int) -> None:
    """Enumerate the first two bytes: the probability of True is within 2^-16 of a/c, and the
    decided part never overshoots."""
    true = Fraction(0)
    undecided = Fraction(0)
    for b1 in range(256):
        got = dn._bernoulli(np.array([a]), np.array([c]), Scripted([b1], seed=b1))
        d1 = (a * 256) // c
        if b1 != d1 or (a * 256) % c == 0:
            true += Fraction(int(got[0]), 256)
        else:
            undecided += Fraction(1, 256)
    assert true <= Fraction(a, c) <= true + undecided
    assert undecided <= Fraction(1, 256)


def test_bern_exp_frac_has_probability_exp_minus_gamma() -> None:
    gen = np.random.default_rng(1)
    for u, t in ((0, 5), (1, 2), (3, 7), (7505999378950826, 7505999378950827)):
        n = 40_000
        got = dn._bern_exp_frac(np.full(n, u, np.int64), np.full(n, t, np.int64),
                                dn.numpy_bytes(gen))
        p = math.exp(-u / t)
        assert abs(got.mean() - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def _exp_neg_bounds(v: int, bits: int) -> tuple[Fraction, Fraction]:
    """e^-v · 2^bits enclosed with exact rational arithmetic (series of e^v, bounded tail)."""
    s, term, k = Fraction(0), Fraction(1), 0
    while term > Fraction(1, 2 ** (bits + 80)):
        s += term
        k += 1
        term = term * v / k
    upper = s + 2 * term  # the tail is below twice the next term once k > 2v
    return Fraction(2**bits) / upper, Fraction(2**bits) / s


@pytest.mark.parametrize("v", [1, 2, 7, 30, 44, 45])
def test_thresholds_are_exact_floors(v: int) -> None:
    lo, hi = _exp_neg_bounds(v, 64)
    assert math.floor(lo) == math.floor(hi) == dn._exp_neg_floor(v, 64)
    if v <= 45:
        assert int(dn._thresholds()[v - 1]) == math.floor(lo)
    lo2, hi2 = _exp_neg_bounds(v, 192)
    assert math.floor(lo2) == math.floor(hi2) == dn._exp_neg_floor(v, 192)


def test_geometric_e_distribution_and_its_tie_branch() -> None:
    n = 100_000
    v = dn._geometric_e(n, dn.numpy_bytes(np.random.default_rng(2)))
    k = np.arange(0, 8)
    p = (1 - math.exp(-1)) * np.exp(-k)
    obs = np.array([*(np.sum(v == i) for i in k), np.sum(v >= 8)])
    exp = np.array([*(n * p), n * math.exp(-8)])
    assert stats.chisquare(obs, exp * n / exp.sum()).pvalue > 1e-4
    # a first word equal to ⌊e^-3 2^64⌋: R is just below or just above e^-3; decided exactly
    th = int(dn._thresholds()[2])
    outcomes = set()
    for seed in range(40):
        src = Scripted(list(th.to_bytes(8, "little")), seed=seed)
        outcomes.add(int(dn._geometric_e(1, src)[0]))
    assert outcomes == {2, 3}  # both sides occur, nothing else


def test_combine_matches_python_integers_on_the_overflow_branch() -> None:
    t = np.array([2**52 + 1, 3, 2**40], dtype=np.int64)
    s = np.array([2**55, 1, 1], dtype=np.int64)
    scale = np.array([(2**52 + 1) / 2**55, 3.0, 2.0**40])
    u = np.array([5, 2, 17], dtype=np.int64)
    v = np.array([10**6, 4, 2**21], dtype=np.int64)  # first and last: u + t v beyond 2^62
    y = dn._combine(u, v, t, s, scale)
    exact = [(int(u[i]) + int(t[i]) * int(v[i])) // int(Fraction(scale[i]).denominator)
             for i in range(3)]
    assert list(y) == exact
    v[2] = 2**23  # a magnitude beyond 2^62 is stored as 2^62 (documented; never drawn)
    assert dn._combine(u, v, t, s, scale)[2] == 2**62


def test_integer_coefficients_are_decided_exactly() -> None:
    eye = np.eye(3)
    assert dn.integer_coefficients(np.ones(3), eye)
    assert dn.integer_coefficients(np.full(3, 0.5), 2 * eye)
    assert dn.integer_coefficients(np.full(3, 2.0**-60), 2.0**60 * eye)
    assert not dn.integer_coefficients(np.full(3, 0.1), 10 * eye)  # 0.1 is not 1/10 in binary
    assert not dn.integer_coefficients(np.full(3, 1 / 3), 3 * eye)
    assert not dn.integer_coefficients(np.ones(3), 0.5 * eye)
    assert not dn.integer_coefficients(np.ones(3), 2.0**21 * eye)  # beyond the limit
    assert dn.integer_coefficients(np.array([0.0, 1.0, 1.0]), np.diag([0.5, 1.0, 3.0]))


@pytest.mark.parametrize("b", [0.1, 0.25, 0.7, 7.3])
def test_small_and_non_dyadic_scales_match_the_exact_distribution(b: float) -> None:
    """Review: scales below the others (most mass at 0, so the sign rejection of (-, 0) and the
    exp(-U/t) Bernoulli reject often) and non-dyadic ones (t/s with a large denominator)."""
    z = dn.discrete_laplace(np.full(40_000, b), rng=5, secure=False)
    assert chi2_pvalue(z, b) > 1e-4  # seeded: deterministic


def test_extreme_scales_stay_exact() -> None:
    """A scale whose denominator exceeds 2^62 (clipped in the int64 path) gives 0 except with
    probability ~exp(-1/b); the largest allowed scale has mean ~0 and E|Z| ~ b."""
    assert np.all(dn.discrete_laplace(np.full(2000, 1e-300), rng=1, secure=False) == 0)
    z = dn.discrete_laplace(np.full(40_000, dn.MAX_SCALE), rng=2, secure=False).astype(float)
    assert abs(np.mean(np.abs(z)) / dn.MAX_SCALE - 1) < 0.05  # sd of E|Z|/b ~ 1/200
    assert abs(np.mean(z)) / dn.MAX_SCALE < 0.05
