"""Leak class: randomness the analyst controls (seeds, ``secure=False``, the median's last draw,
the samplers).

The analyst-facing API takes no ``rng`` or ``secure`` argument; without the data owner's
``noise_seed`` every draw comes from the secure source (OpenDP's samplers, the OS CSPRNG), which
no global seeding reaches; with the data owner's seed, runs are reproducible (simulations).
"""

from __future__ import annotations

import inspect
import random

import numpy as np
import pandas as pd
import pytest

import dprivacy.noise as noise_mod
from dprivacy.tables import ProPerTable, Queryable
from dprivacy.tables import sampling as s
from dprivacy.tables.randomness import NoiseSource
from tests.tables.leak_harness import assert_indistinguishable, people, pinq_pair

FORBIDDEN = {"rng", "secure", "seed", "random_state", "generator"}

AGGREGATIONS = {
    "count": lambda t: t.noisy_count(1.0),
    "sum": lambda t: t.noisy_sum(1.0, "x", -1, 1),
    "average": lambda t: t.noisy_average(1.0, "x", -1, 1),
    "median": lambda t: t.noisy_median(1.0, "x", -1, 1),
    "order statistic": lambda t: t.noisy_order_statistic(1.0, 0.9, "x", -1, 1),
}


def test_no_analyst_method_takes_a_seed_or_secure_flag():
    for cls in (Queryable, ProPerTable):
        for name, f in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") or name in ("insert", "delete", "update"):
                continue
            params = set(inspect.signature(f).parameters)
            assert not params & FORBIDDEN, (cls.__name__, name, params & FORBIDDEN)
    for name in ("sample_fixed", "sample_with_replacement", "sample_fraction",
                 "sample_bernoulli", "partition_fixed", "partition_fraction",
                 "partition_bernoulli"):
        assert not set(inspect.signature(getattr(s, name)).parameters) & FORBIDDEN
    t = Queryable(people(), budget=10.0)
    h = t.histogram(__import__("dprivacy").Universe.from_domains({"g": [0, 1, 2]}))
    assert not set(inspect.signature(h.release).parameters) & FORBIDDEN


@pytest.mark.parametrize("kw", [{"rng": 0}, {"secure": False}, {"rng": np.random.default_rng(0),
                                                                  "secure": False}])
def test_seeding_arguments_are_refused_alike(kw):
    a, b = pinq_pair(lambda t: t.noisy_count(1.0, **kw), budget=1.0)
    assert_indistinguishable(a, b, sensitivity=None)
    assert a.error[0] == "TypeError" and a.budget == 1.0


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_global_seeding_does_not_make_the_secure_noise_repeat(name):
    """The analyst seeds every generator it can reach before each query: the answers still
    differ (continuous noise: equal answers have probability 0)."""
    t = Queryable(people(), budget=100.0)
    answers = []
    for _ in range(3):
        np.random.seed(0)
        random.seed(0)
        answers.append(AGGREGATIONS[name](t))
    assert len(set(answers)) == 3


def test_secure_tables_draw_from_opendp_and_never_from_numpy(monkeypatch):
    calls = []
    real_add, real_choice = noise_mod.add_laplace, noise_mod.exponential_choice

    def add(*a, **k):
        calls.append(("laplace", k.get("secure", True), k.get("rng")))
        return real_add(*a, **k)

    def choice(*a, **k):
        calls.append(("choice", k.get("secure", True), k.get("rng")))
        return real_choice(*a, **k)

    monkeypatch.setattr(noise_mod, "add_laplace", add)
    monkeypatch.setattr(noise_mod, "exponential_choice", choice)
    monkeypatch.setattr(np.random, "default_rng", lambda *a: pytest.fail("numpy rng used"))
    t = Queryable(people(), budget=100.0)
    for q in AGGREGATIONS.values():
        q(t)
    t.exponential_mechanism(1.0, [0, 1, 2], lambda r, c: float(r["g"] == c))
    assert calls and all(sec is True and rng is None for _, sec, rng in calls)
    assert {kind for kind, _, _ in calls} == {"laplace", "choice"}


def test_the_median_draw_is_not_reproducible_by_the_analyst():
    """One record at a small ε: the choice among the 1025 grid candidates is spread out; the
    analyst's seeding of numpy / random does not fix it."""
    t = Queryable(pd.DataFrame({"x": [0.5]}), budget=1e6)
    outs = set()
    for _ in range(5):
        np.random.seed(1)
        random.seed(1)
        outs.add(t.noisy_median(0.5, "x", 0, 1))
    assert len(outs) > 1


@pytest.mark.parametrize("sampler", [
    lambda t: s.sample_fixed(t, 5), lambda t: s.sample_fraction(t, 0.5),
    lambda t: s.sample_bernoulli(t, 0.5), lambda t: s.partition_fixed(t, 5)[0],
    lambda t: s.sample_with_replacement(t, 5),
])
def test_samplers_use_a_fresh_secret_the_analyst_cannot_seed(sampler):
    t = Queryable(people(40), budget=10.0)
    picks = set()
    for _ in range(6):
        np.random.seed(0)
        random.seed(0)
        picks.add(tuple(sampler(t)._df["pid"]))
    assert len(picks) > 1


def test_the_data_owner_seed_reproduces_everything():
    runs = []
    for _ in range(2):
        t = Queryable(people(40), budget=100.0, noise_seed=7)
        p = ProPerTable(people(40), budget=10.0, id_column="pid", noise_seed=7)
        runs.append([q(t) for q in AGGREGATIONS.values()]
                    + [q(p) for q in AGGREGATIONS.values()]
                    + [tuple(s.sample_fixed(t, 5)._df["pid"])])
    assert runs[0] == runs[1]
    assert NoiseSource().seeded is False and NoiseSource(3).seeded is True
