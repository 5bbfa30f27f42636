"""Malformed or dangerous plans are refused before anything is charged or run; the plan
validator's caps (body size, depth, expression size, string growth)."""

from __future__ import annotations

import json

import httpx
import ibis
import numpy as np
import pytest
from ibis import _

from dprivacy.errors import ValidationError
from dprivacy.remote import connect
from dprivacy.service.config import load_config
from dprivacy.service.exprcodec import WIRE_OPS, check_cost, decode, encode
from dprivacy.service.plan import json_depth
from dprivacy.service.serve import ServiceThread
from tests.service.conftest import KEYS, people, write_service

PUBLIC = ibis.table({"age": "int64", "name": "string", "tags": "array<string>"}, name="records")


def _expr(e):
    return encode(e.resolve(PUBLIC))


def _field(name):
    return {"expr": [{"op": "Field", "name": name}]}


def _nested_replace(depth):
    x = _.name
    for _i in range(depth):
        x = x.replace("a", "aaaa")
    return _expr(x.length() > 0)


def _query(table, query):
    return {"v": 1, "table": table, "query": query}


COUNT = {"op": "noisy_count", "eps": 0.1}
VISITS = {"source": "visits", "steps": []}
PEOPLE = {"source": "people", "steps": []}
udf = {"expr": [{"op": "Field", "name": "age"},
                {"op": "ScalarUDF", "args": {"arg": {"ref": 0}}}]}
max_node = {"expr": [{"op": "Field", "name": "age"}, {"op": "Max", "args": {"arg": {"ref": 0}}}]}

BAD = [
    ("not json", b"{\"v\": 1,"),
    ("nan constant", b'{"v": 1, "table": {"source": "visits", "steps": []}, '
                     b'"query": {"op": "noisy_count", "eps": NaN}}'),
    ("depth bomb", b"[" * 5000 + b"]" * 5000),
    ("wrong version", json.dumps({"v": 2, "table": VISITS, "query": COUNT}).encode()),
    ("extra key", json.dumps({**_query(VISITS, COUNT), "python": "x"}).encode()),
    ("unknown step", json.dumps(_query({"source": "visits", "steps": [{"op": "collect"}]},
                                       COUNT)).encode()),
    ("unknown query", json.dumps(_query(VISITS, {"op": "rows", "eps": 1})).encode()),
    ("pickle-like step", json.dumps(_query({"source": "visits", "steps": [
        {"op": "where", "pred": {"pickle": "gASV..."}}]}, COUNT)).encode()),
    ("udf", json.dumps(_query({"source": "visits", "steps": [{"op": "where", "pred": udf}]},
                              COUNT)).encode()),
    ("aggregate", json.dumps(_query({"source": "visits", "steps": [
        {"op": "select", "exprs": {"m": max_node}}]}, COUNT)).encode()),
    ("hidden id column", json.dumps(_query({"source": "people", "steps": [
        {"op": "where", "pred": {"expr": [{"op": "Field", "name": "__dp_pid"},
                                          {"op": "Literal", "value": 3, "dtype": "int64"},
                                          {"op": "Equals", "args": {"left": {"ref": 0},
                                                                    "right": {"ref": 1}}}]}}]},
                                COUNT)).encode()),
    ("forward ref", json.dumps(_query({"source": "visits", "steps": [{"op": "where", "pred": {
        "expr": [{"op": "Not", "args": {"arg": {"ref": 1}}}, {"op": "Field", "name": "age"}]}}]},
        COUNT)).encode()),
    ("nested replace", json.dumps(_query({"source": "people", "steps": [
        {"op": "where", "pred": _nested_replace(12)}]}, COUNT)).encode()),
    ("negative eps", json.dumps(_query(VISITS, {"op": "noisy_count", "eps": -1})).encode()),
    ("bool eps", json.dumps(_query(VISITS, {"op": "noisy_count", "eps": True})).encode()),
    ("too many steps", json.dumps(_query({"source": "visits", "steps": [
        {"op": "distinct"}] * 40}, COUNT)).encode()),
    ("public rows", json.dumps(_query({"source": "visits", "steps": [
        {"op": "concat", "other": {"public": {"columns": ["age", "city"],
                                              "rows": [[1, "x"]] * 5000}}}]}, COUNT)).encode()),
    ("non-boolean where", json.dumps(_query({"source": "visits", "steps": [
        {"op": "where", "pred": _field("age")}]}, COUNT)).encode()),
    ("unknown column", json.dumps(_query({"source": "visits", "steps": [
        {"op": "where", "pred": _field("salary")}]}, COUNT)).encode()),
    ("ProPer group_by", json.dumps(_query({"source": "people", "steps": [
        {"op": "group_by", "key": "age", "aggs": {}}]}, COUNT)).encode()),
    ("huge body", b'{"v": 1, "pad": "' + b"x" * 100_000 + b'"}'),
]


def _people_budgets(srv):
    return srv.runner.owner.budgets["people"].remaining(np.arange(200))


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """One service for the refusals below (it used to be one per plan: 22 service starts). Each
    test checks that its plan was refused with nothing charged, from the budgets it reads before
    (people) and against the untouched initial budget (visits, 1.0): a plan that did charge
    fails its own test, and the absolute check makes the later ones fail too, never pass."""
    srv = ServiceThread(load_config(write_service(tmp_path_factory.mktemp("plans") / "svc",
                                                  people(), query_seconds=0.2)))
    yield srv
    srv.stop()


@pytest.mark.parametrize("name, body", BAD, ids=[b[0] for b in BAD])
def test_malformed_plans_are_refused_before_any_charge(refusing, name, body):
    srv = refusing
    before = _people_budgets(srv)
    s = connect(srv.url, key=KEYS["alice"])
    r = httpx.post(srv.url + "/v1/query", content=body,
                   headers={"Authorization": f"Bearer {KEYS['alice']}",
                            "Content-Type": "application/json"})
    assert r.status_code in (400, 413, 422), r.text
    err = r.json()
    assert set(err) == {"error", "message"} and "\n" not in err["message"]
    assert len(err["message"]) <= 400
    assert s.table("visits").remaining_budget() == 1.0
    assert np.array_equal(_people_budgets(srv), before)


def test_unknown_source_is_404(refusing):
    srv = refusing
    before = _people_budgets(srv)
    for name in ("nope", "../people", "people.parquet"):
        r = httpx.post(srv.url + "/v1/query", json=_query({"source": name, "steps": []}, COUNT),
                       headers={"Authorization": f"Bearer {KEYS['alice']}"})
        assert r.status_code == 404
    assert np.array_equal(_people_budgets(srv), before)
    assert connect(srv.url, key=KEYS["alice"]).table("visits").remaining_budget() == 1.0


def test_the_same_refusal_whatever_the_data(start):
    a = start("a", people(50), query_seconds=0.2)
    b = start("b", people(60, extra={"pid": 999, "age": 5, "name": "a" * 5000, "eps": 0.0}),
              query_seconds=0.2)
    out = []
    for srv in (a, b):
        p = connect(srv.url, key=KEYS["alice"]).table("people")
        msgs = []
        for f in (lambda t: t.where(_.name.replace("a", "aaaa").replace("a", "aaaa")
                                    .replace("a", "aaaa").length() > 3),
                  lambda t: t.noisy_count(-1), lambda t: t.distinct(),
                  lambda t: t.where(_.age.mean() > 1)):
            with pytest.raises(Exception) as e:
                f(p)
            msgs.append((type(e.value).__name__, str(e.value)))
        out.append(msgs)
    assert out[0] == out[1]


def test_codec_round_trip_and_wire_ops_are_engine_rowwise():
    from dprivacy.tables.relations.engine import rowwise

    names = {c.__name__ for c in rowwise.ALLOWED}
    assert WIRE_OPS <= names
    for e in (_.age > 40, _.name.replace("a", "bb").length(), _.age.isin([1, 2]),
              ibis.cases((_.age > 3, "x"), else_="y"), _.age.cast("float64"),
              _.tags.map(lambda x: x.upper()), _.name.substr(1, 2), _.age / 0.0 > float("inf")):
        v = e.resolve(PUBLIC)
        js = json.loads(json.dumps(encode(v), allow_nan=False))
        check_cost(js, max_growth=16, max_tree=500)
        assert decode(js, PUBLIC).equals(v)


def test_growth_and_tree_caps():
    ok = _nested_replace(2)  # 4 x 4 = 16: at the cap
    check_cost(ok, max_growth=16, max_tree=500)
    with pytest.raises(ValidationError, match="growth"):
        check_cost(_nested_replace(3), max_growth=16, max_tree=500)
    x = PUBLIC.name
    for _i in range(30):  # a DAG of 31 nodes whose tree has 2^30: refused, never expanded
        x = x + x
    with pytest.raises(ValidationError):
        check_cost(encode(x.length() > 0), max_growth=1e12, max_tree=500)
    col = PUBLIC.name.replace(PUBLIC.name, PUBLIC.name)  # replacement read from the record
    with pytest.raises(ValidationError, match="unbounded"):
        check_cost(encode(col), max_growth=16, max_tree=500)
    with pytest.raises(ValidationError, match="unbounded"):  # a map body reading a column
        check_cost(encode(PUBLIC.tags.map(lambda t: t + PUBLIC.name)), max_growth=16,
                   max_tree=500)


def test_json_depth_skips_strings():
    assert json_depth(b'{"a": [1, {"b": "[[[[{{{"}]}') == 3
    assert json_depth(b"[" * 100 + b"]" * 100) == 100
