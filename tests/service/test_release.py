"""d_X releases through the service: the same answers' distribution as in process, the right
charges, neighbouring datasets alike, hostile release requests refused with nothing charged."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from ibis import _
from scipy import stats

import dprivacy as dp
from dprivacy.errors import (
    ConfigMismatchError,
    PrivacyViolationError,
    UnsupportedOperationError,
)
from dprivacy.remote import connect
from dprivacy.tables import ProPerTable, Queryable
from tests.service.conftest import KEYS, at_once
from tests.service.release_fixtures import (
    BETA,
    F,
    owner_inputs,
    proper_charges,
    residents,
)

TRUE = np.array([30.0, 20.0, 10.0])[np.arange(len(F)) % 3]  # residents(60): a 30, b 20, c 10


def test_round_trip_matches_in_process_distribution(service):
    srv = service(query_seconds=1.5)  # far above a release's time: no answer is the default
    U, M, W, d = owner_inputs()  # noqa: N806
    s = connect(srv.url, key=KEYS["alice"])
    v, p = s.table("visits"), s.table("people")
    U2, M2 = v.release_inputs()  # noqa: N806  the owner's published inputs rebuild exactly
    assert U2.fingerprint() == U.fingerprint() and M2.fingerprint(U2) == M.fingerprint(U)
    remote = np.concatenate([v.release(W, d) - TRUE for _i in range(5)]
                            + [p.release(W, d, U, metric=M) - TRUE for _i in range(3)])
    # PINQ: 5 releases at s * max_i c_i = 1 * 10 * BETA each, recorded durably
    assert v.remaining_budget() == pytest.approx(100.0 - 5 * 10 * BETA, abs=1e-12)
    # ProPer: every one of the 60 people paid c_i = 10 * BETA, three times
    charges = proper_charges(srv)
    assert [(n, round(tot, 9)) for _q, _l, n, tot in charges] == [(60, 60 * 10 * BETA)] * 3
    df = residents()
    local = np.concatenate([
        Queryable(df[["city"]], 1e6, noise_seed=i).release(W, d, U, metric=M) - TRUE
        for i in range(20)] + [
        ProPerTable(df, "eps", id_column="pid", noise_seed=100 + i).release(W, d, U, metric=M) - TRUE
        for i in range(10)])
    # the same Laplace(1/beta) residuals: two-sample KS and the per-element means
    assert stats.ks_2samp(remote, local).pvalue > 1e-4
    sd = np.sqrt(2) / BETA / np.sqrt(len(remote) / 3)
    for k in range(3):
        assert abs(remote[k::3].mean()) < 4.5 * sd, (k, remote[k::3].mean())
    # the answers are real counts, not the default (noise on an empty table): a's count is 30
    raw = remote + np.tile(TRUE, len(remote) // len(TRUE))
    assert raw[0::3].mean() - raw[2::3].mean() > 20 - 6 * sd
    assert srv.runner.overruns == 0


def test_stability_scales_the_pinq_charge(service):
    srv = service()
    _U, _M, W, d = owner_inputs()  # noqa: N806
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    v.take(30).release(W, d)  # take has stability 2
    v.where(_.city != "z").release(W, d)
    assert v.remaining_budget() == pytest.approx(100.0 - 3 * 10 * BETA, abs=1e-12)


def _other_universe_config():
    U = dp.Universe.from_dataframe(pd.DataFrame({"city": ["a", "b", "d"]}), ["city"])  # noqa: N806
    _U, M, W, d = owner_inputs()  # noqa: N806
    return dp.MechanismConfig.from_design(W, U, M, d).to_json()


def _config_doc():
    U, M, W, d = owner_inputs()  # noqa: N806
    return dp.MechanismConfig.from_design(W, U, M, d).to_dict()


def _edited(**design):
    doc = _config_doc()
    doc["design"].update(design)
    return json.dumps(doc)


def _body(config, f=None, source="visits", **extra):
    q = {"op": "release", "config": config, "F": F.tolist() if f is None else f, **extra}
    return json.dumps({"v": 1, "table": {"source": source, "steps": []}, "query": q})


GOOD = json.dumps(_config_doc())
HOSTILE = [
    ("another universe", _body(_other_universe_config()), "ConfigMismatchError"),
    ("beta raised", _body(_edited(beta=[0.2] * 30)), "PrivacyViolationError"),
    ("nan in F", _body(GOOD).replace('"F": [[1.0', '"F": [[NaN', 1), "ValidationError"),
    ("huge F", _body(GOOD, f=[[1e300, 0, 0]] * 30), "ValidationError"),
    ("overflowing F", _body(GOOD).replace('"F": [[1.0', '"F": [[1e999', 1), "ValidationError"),
    ("wrong N", _body(GOOD, f=[[1.0, 0, 0, 0]] * 30), "ValidationError"),
    ("too many queries", _body(GOOD, f=[[1.0, 0, 0]] * 51), "ValidationError"),
    ("ragged F", _body(GOOD, f=[[1.0, 0, 0], [1.0]]), "ValidationError"),
    ("bool in F", _body(GOOD, f=[[True, 0, 0]] * 30), "ValidationError"),
    ("nan in config", _body(GOOD.replace('"beta": [0.05', '"beta": [NaN', 1)), "ConfigError"),
    ("overflow in config", _body(GOOD.replace('"beta": [0.05', '"beta": [1e999', 1)),
     "ConfigError"),
    ("huge int in config", _body(GOOD.replace('"beta": [0.05', '"beta": [' + "9" * 400, 1)),
     "ConfigError"),
    ("nested config", _body("[" * 100000 + "]" * 100000), "ConfigError"),
    ("config not json", _body(GOOD[:-20]), "ConfigError"),
    ("config not a string", _body(_config_doc()), "ValidationError"),
    ("huge w, tiny beta", _body(_edited(w=[1e13] * 30, beta=[5e-15] * 30)), "ValidationError"),
    ("another kind", _body(json.dumps({**_config_doc(), "kind": "exponential"})), None),
    ("no release inputs", _body(GOOD, source="plain"), "UnsupportedOperationError"),
    ("extra key", _body(GOOD, eps=1.0), "ValidationError"),
    ("wrong universe N", _body(GOOD, f=[[1.0, 0]] * 30), "ValidationError"),
]


def test_hostile_release_requests_refused_with_nothing_charged(service):
    """Against a PINQ source (visits) and a ProPer one (people), each on its own service, the
    two at the same time (each request waits for its deadline: they wait together)."""
    at_once({source: lambda source=source: _hostile_requests(service, source)
             for source in ("visits", "people")})


def _hostile_requests(service, source: str) -> None:
    srv = service(source, release_seconds=1.5)  # the good release at the end must not overrun
    s = connect(srv.url, key=KEYS["alice"])
    v = s.table("visits")
    before = (v.remaining_budget(), proper_charges(srv))
    headers = {"Authorization": f"Bearer {KEYS['alice']}", "Content-Type": "application/json"}
    with httpx.Client(base_url=srv.url, headers=headers, timeout=120) as c:
        for name, body, error in HOSTILE:
            if source == "people" and '"source": "visits"' in body:
                body = body.replace('"source": "visits"', '"source": "people"', 1)
            r = c.post("/v1/query", content=body.encode())
            assert r.status_code in (400, 413, 422), (source, name, r.status_code, r.text[:200])
            out = r.json()
            assert set(out) == {"error", "message"} and "\n" not in out["message"], (source, name)
            assert len(out["message"]) <= 400, (source, name)
            if error is not None:
                assert out["error"] == error, (source, name, out)
    assert (v.remaining_budget(), proper_charges(srv)) == before
    # and a good release still goes through (and is charged)
    U, M, W, d = owner_inputs()  # noqa: N806
    s.table(source).release(W, d)
    assert srv.runner.overruns == 0
    assert (v.remaining_budget(), proper_charges(srv)) != before


def test_client_checks_before_sending(service):
    srv = service()
    U, M, W, d = owner_inputs()  # noqa: N806
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    other = dp.Universe.from_dataframe(pd.DataFrame({"city": ["a", "b", "d"]}), ["city"])
    with pytest.raises(ConfigMismatchError):
        v.release(W, d, other)
    with pytest.raises(ConfigMismatchError):
        v.release(W, d, U, metric=dp.metrics.Discrete(2.0))
    with pytest.raises(PrivacyViolationError):
        v.release(W, dp.Design(w=np.ones(30), beta=np.full(30, 0.2)))
    cfg = dp.MechanismConfig.from_design(W, U, M, d)
    assert v.release(W, cfg).shape == (30,)  # a config is accepted as the design
    assert v.remaining_budget() == pytest.approx(100.0 - 10 * BETA, abs=1e-12)


def program(url):
    """An analyst's release program; every outcome as (kind, payload, seconds)."""
    U, M, W, d = owner_inputs()  # noqa: N806
    s = connect(url, key=KEYS["alice"])
    p, v = s.table("people"), s.table("visits")
    steps = [
        lambda: p.release(W, d),
        lambda: p.where(_.city == "a").release(W, d),
        lambda: v.release(W, d),
        lambda: v.remaining_budget(),
        lambda: p._ask({"op": "release", "config": _edited(beta=[0.2] * 30),
                        "F": F.tolist()}),
        lambda: p._ask({"op": "release", "config": GOOD, "F": [[1.0, 0, 0]] * 51}),
        lambda: p.remaining_budget(),
        lambda: v.release(W, d),
        lambda: v.release(W, d),  # the analyst's PINQ budget (1.0) is spent: refused
        lambda: v.remaining_budget(),
        lambda: p.release(W, d),  # the target (eps 5 or 0) and everybody else still pay
    ]
    out = []
    for f in steps:
        t0 = time.monotonic()
        try:
            r = f()
            kind = ("budget", r) if isinstance(r, float) else ("answer", np.shape(r))
        except Exception as exc:
            kind = ("error", type(exc).__name__, str(exc))
        out.append((kind, time.monotonic() - t0))
    return out


def _target(neighbour: str) -> dict:
    """The neighbour's extra record: a target who can pay (added) or whose budget is 0."""
    return {"pid": 999, "city": "a", "eps": 5.0 if neighbour == "added" else 0.0}


NEIGHBOURS = ("added", "exhausted")


def test_release_on_neighbouring_datasets(service):
    """The base world and both neighbours (added, exhausted), the three programs at the same
    time (each waits for its deadlines); each neighbour's outcomes against the base world's."""
    worlds = {"base": residents(), **{n: residents(extra=[_target(n)]) for n in NEIGHBOURS}}

    def run(name, df):
        srv = service(name, df, query_seconds=0.5, pinq_budget=1.0)
        try:
            return program(srv.url)
        finally:
            srv.stop()

    runs = at_once({name: lambda name=name, df=df: run(name, df) for name, df in worlds.items()})
    a = [k for k, _t in runs["base"]]
    for neighbour in NEIGHBOURS:
        b = [k for k, _t in runs[neighbour]]
        assert a == b, neighbour  # same errors, messages, budgets and answer shapes
    assert [k[0] for k in a] == ["answer", "answer", "answer", "budget", "error", "error",
                                 "error", "answer", "error", "budget", "answer"]
    assert a[3][1] == 0.5 and a[9][1] == 0.0
    for w in runs:  # every answer and every refusal is released at (or after) the deadline
        releases = [t for (k, t) in runs[w] if k[0] != "budget"]
        assert min(releases) >= 0.5 - 0.02, (w, releases)


def test_release_outputs_indistinguishable(service):
    """Each neighbour's answers for the target's element: Laplace(1/β) around counts that differ
    by at most one record (exhausted: by none). The base world and both neighbours at the same
    time (each release waits for its deadline); each neighbour against the base world."""
    _U, _M, W, d = owner_inputs()  # noqa: N806

    def run(name, df):
        srv = service(name, df, query_seconds=1.5)  # no default answer (checked below)
        try:
            p = connect(srv.url, key=KEYS["alice"]).table("people")
            out = np.concatenate([p.release(W, d)[0::3] for _i in range(5)])
            assert srv.runner.overruns == 0
            return out
        finally:
            srv.stop()

    worlds = {"base": residents(), **{n: residents(extra=[_target(n)]) for n in NEIGHBOURS}}
    res = at_once({name: lambda name=name, df=df: run(name, df) for name, df in worlds.items()})
    assert res["base"].mean() > 30 - 4.5 * np.sqrt(2) / BETA / np.sqrt(len(res["base"]))
    sd = np.sqrt(2) / BETA * np.sqrt(2 / len(res["base"]))
    for neighbour in NEIGHBOURS:
        shift = res[neighbour].mean() - res["base"].mean()
        assert abs(shift) < 4.5 * sd, neighbour
        assert stats.ks_2samp(res["base"], res[neighbour]).pvalue > 1e-4, neighbour


def test_release_is_refused_on_a_source_without_inputs(service):
    srv = service()
    _U, _M, W, d = owner_inputs()  # noqa: N806
    s = connect(srv.url, key=KEYS["alice"])
    plain = s.table("plain")
    with pytest.raises(UnsupportedOperationError, match="no release universe"):
        plain.release(W, d)
    assert plain.remaining_budget() == 100.0


def _release_program(url):
    """Releases on derived tables of both kinds; every outcome (error or answer shape, budget)."""
    _U, _M, W, d = owner_inputs()  # noqa: N806
    s = connect(url, key=KEYS["alice"])
    p, v = s.table("people"), s.table("visits")
    steps = [lambda: p.as_pinq(1.0).release(W, d), lambda: p.as_pinq(1.0).remaining_budget(),
             lambda: v.partition(["a", "b"], _.city)["a"].release(W, d),
             lambda: v.remaining_budget(),
             lambda: p.select(city=_.city.upper().lower()).release(W, d),
             lambda: v.where(_.city.length() > 0).release(W, d), lambda: p.release(W, d)]
    out = []
    for f in steps:
        try:
            r = f()
            out.append(("ok", r if isinstance(r, float) else np.shape(r)))
        except Exception as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def test_release_with_a_hostile_key_value(service):
    """A record whose key is NULL, outside the universe or huge: the same outcomes, budgets and
    no default answer (it is left out, as a Where would). The base world and the three worlds
    with such a record at the same time (each program waits for its deadlines); each against
    the base world."""
    cities = {"null": None, "unknown": "zzz", "long": "a" * 100_000}

    def run(name, df):
        srv = service(name, df, query_seconds=1.0)
        try:
            out = _release_program(srv.url)
            assert srv.runner.overruns == 0
            return out
        finally:
            srv.stop()

    worlds = {"base": residents(), **{k: residents(extra=[{"pid": 999, "city": city, "eps": 5.0}])
                                      for k, city in cities.items()}}
    by_world = at_once({name: lambda name=name, df=df: run(name, df)
                        for name, df in worlds.items()})
    base = by_world["base"]
    for k in cities:
        assert base == by_world[k], k
    assert all(o[0] == "ok" for o in base), base
    assert base[1] == ("ok", 0.5) and base[3] == ("ok", 99.5)


def test_a_release_has_its_own_deadline(service):
    srv = service(query_seconds=0.3, release_seconds=1.2)
    cfg = srv.runner.cfg
    assert cfg.deadline_seconds({"visits"}) == 0.3
    assert cfg.deadline_seconds({"visits"}, release=True) == 1.2
    assert cfg.deadline_seconds({"plain"}, release=True) == 0.3
    _U, _M, W, d = owner_inputs()  # noqa: N806
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    t0 = time.monotonic()
    v.noisy_count(0.1)
    t1 = time.monotonic()
    v.release(W, d)
    t2 = time.monotonic()
    assert t1 - t0 >= 0.3 - 0.02 and t2 - t1 >= 1.2 - 0.02  # the release waits longer


def test_a_release_past_its_deadline_is_still_charged(service):
    """The analyst's worker is slower than calibrated: the default answer (a release on an
    empty table) is released at the deadline, and the release's s·max_i c_i was charged when
    it arrived."""
    srv = service(query_seconds=0.3)
    _U, _M, W, d = owner_inputs()  # noqa: N806
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    srv.runner.stall("alice", 1.5)
    out = v.release(W, d)
    assert out.shape == (30,) and np.all(np.isfinite(out)) and srv.runner.overruns == 1
    assert v.remaining_budget() == pytest.approx(100.0 - 10 * BETA, abs=1e-12)


def test_the_default_exists_whenever_the_real_answer_would(service):
    """An analyst budget above the shadows' own: a query whose worker overruns still gets the
    default answer, never a refusal the real query would not give."""
    srv = service(query_seconds=0.3, pinq_budget=5e6)
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    srv.runner.stall("alice", 1.2)
    assert np.isfinite(v.noisy_count(2e6)) and srv.runner.overruns == 1
    assert v.remaining_budget() == pytest.approx(3e6)


def test_a_strategy_release_through_the_service(service):
    """A strategy config: re-verified against the owner's universe and metric, the same answers'
    distribution as in process, PINQ charged s (max_i c_i + total_eps), every ProPer record
    c_i + total_eps (total_eps = max_i c_i by default, c_i = ||A e_i||_1)."""
    import solvers.strategy as st

    srv = service(query_seconds=1.5)
    U, M, W, _d = owner_inputs()  # noqa: N806
    sd = dp.design_strategy(W, U, M, rounds=1)
    c = np.abs(st.materialise(sd.C, sd.basis)).sum(axis=0)
    cost = c + c.max()
    s = connect(srv.url, key=KEYS["alice"])
    v, p = s.table("visits"), s.table("people")
    remote = [v.release(W, sd) - TRUE for _i in range(4)] + [
        p.release(W, dp.MechanismConfig.from_design(W, U, M, sd)) - TRUE for _i in range(2)]
    assert v.remaining_budget() == pytest.approx(100.0 - 4 * cost.max(), abs=1e-6)
    charges = proper_charges(srv)
    city_cost = {"a": cost[0], "b": cost[1], "c": cost[2]}
    df = residents()
    per_person = df["city"].map(city_cost).sum()
    assert [(n, round(tot, 6)) for _q, _l, n, tot in charges] == [(60, round(per_person, 6))] * 2
    local = [Queryable(df[["city"]], 1e6, noise_seed=i).release(W, sd, U, metric=M) - TRUE
             for i in range(30)]
    # one number per release (the answers of one release share its noise, so pooling them would
    # overstate the sample): the squared size of each release's error, and its first answer's
    for stat in (lambda e: float(np.sum(e ** 2)), lambda e: float(e[0])):
        assert stats.ks_2samp([stat(e) for e in remote], [stat(e) for e in local]).pvalue > 1e-4
    # a strategy scaled past the owner's metric is refused before any charge
    doc = json.loads(dp.MechanismConfig.from_design(W, U, M, sd).to_json())
    strat = doc["design"]["strategy"]
    key = "dense" if "dense" in strat else "data"
    strat[key] = [3 * x for x in strat[key]]
    before = v.remaining_budget()
    with pytest.raises(PrivacyViolationError):
        v.release(W, dp.MechanismConfig.from_dict(doc))
    assert v.remaining_budget() == before
