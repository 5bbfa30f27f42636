"""Authentication (401 / 403), the key never stored, and the configuration's checks."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from ibis import _

from dprivacy.errors import ConfigError
from dprivacy.remote import AuthenticationError, ServiceError, connect
from dprivacy.service.auth import authenticate, key_sha256
from dprivacy.service.config import AnalystConfig, load_config
from tests.service.conftest import KEYS, people, write_service


def test_requests_without_a_valid_key_are_refused(start):
    srv = start()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEYS["alice"]},
                    {"Authorization": "Basic " + KEYS["alice"]},
                    {"Authorization": "Bearer " + key_sha256(KEYS["alice"])}):
        for method, path in (("GET", "/v1/sources"), ("GET", "/v1/sources/people"),
                             ("POST", "/v1/query"), ("POST", "/v1/budget"), ("POST", "/v1/schema")):
            r = httpx.request(method, srv.url + path, headers=headers, json={"v": 1})
            assert r.status_code == 401, (headers, path)
            assert r.json()["error"] == "AuthenticationError"
    assert httpx.get(srv.url + "/v1/health").status_code == 200
    with pytest.raises(AuthenticationError):
        connect(srv.url, key="wrong")


def test_a_forbidden_source_gets_the_answer_of_an_unknown_one(start):
    """A source outside the analyst's list is answered exactly like one that does not exist
    (the same status, error and message form): the answers do not tell which names exist."""
    srv = start()
    bob = connect(srv.url, key=KEYS["bob"])
    assert [s["name"] for s in bob.sources()] == ["visits"]
    h = {"Authorization": f"Bearer {KEYS['bob']}"}

    def seen(name: str) -> list[tuple[int, str, str]]:
        out = []
        for method, path, body in (
                ("GET", f"/v1/sources/{name}", None), ("GET", f"/v1/sources/{name}/release", None),
                ("POST", "/v1/query", {"v": 1, "table": {"source": "visits", "steps": [
                    {"op": "concat", "other": {"source": name, "steps": []}}]},
                    "query": {"op": "noisy_count", "eps": 0.1}}),
                ("POST", "/v1/query", {"v": 1, "table": {"source": name, "steps": []},
                                       "query": {"op": "noisy_count", "eps": 0.1}}),
                ("POST", "/v1/budget", {"v": 1, "table": {"source": name, "steps": []}}),
                ("POST", "/v1/schema", {"v": 1, "table": {"source": name, "steps": []}})):
            r = httpx.request(method, srv.url + path, headers=h, json=body)
            e = r.json()
            out.append((r.status_code, e["error"], e["message"].replace(repr(name), "NAME")))
        return out

    forbidden, unknown = seen("people"), seen("peoplf")
    assert forbidden == unknown
    assert {x[0] for x in forbidden} == {404}
    with pytest.raises(ServiceError, match="no source 'people'"):
        bob.table("people")
    assert bob.table("visits").remaining_budget() == 1.0  # nothing was charged


def test_the_key_is_never_stored(start, tmp_path: Path):
    srv = start()
    s = connect(srv.url, key=KEYS["alice"])
    s.table("visits").noisy_count(0.1)
    s.table("people").where(_.age > 3).noisy_count(0.1)
    for f in (tmp_path / "svc").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert KEYS["alice"].encode() not in data, f
    assert KEYS["alice"] not in repr(srv.app.state.runner.cfg)


def test_authenticate_compares_every_digest():
    a = [AnalystConfig("a", key_sha256("ka")), AnalystConfig("b", key_sha256("kb"))]
    assert authenticate("Bearer kb", a) is a[1]
    assert authenticate("Bearer ka", a) is a[0]
    assert authenticate("Bearer kc", a) is None
    assert authenticate(None, a) is None
    assert authenticate("Bearer " + "x" * 10_000, a) is None


@pytest.mark.parametrize("edit, msg", [
    (("key_sha256 = ", 'key = "plain"\nkey_sha256 = '), "never the key"),
    (('kind = "pinq"', 'kind = "table"'), "kind"),
    (('budget = 1.0', 'budget = -1.0'), "budget"),
    (('budget = 1.0', 'budget = nan'), "budget"),
    (('budget_column = "eps"', 'budget_column = "eps"\nbudget = 2.0'), "exactly one"),
    (('id = "pid"', 'idd = "pid"'), "unknown key"),
    (('query_seconds = 0.25', 'query_seconds = 0'), "query_seconds"),
    (('path = "people.parquet"', 'path = "missing.parquet"'), "does not exist"),
    (('name = "bob"', 'name = "alice"'), "used twice"),
    (('sources = ["visits"]', 'sources = ["nope"]'), "unknown sources"),
])
def test_config_errors(tmp_path: Path, edit, msg):
    cfg = write_service(tmp_path, people(10))
    cfg.write_text(cfg.read_text().replace(*edit, 1))
    with pytest.raises(ConfigError, match=msg):
        c = load_config(cfg)
        from dprivacy.service.sources import Owner

        Owner(c)


def test_config_defaults_and_deadline(tmp_path: Path):
    cfg = load_config(write_service(tmp_path, people(10), query_seconds=0.5))
    assert cfg.state_dir == (tmp_path / "service.state").resolve()
    assert cfg.max_body_bytes == 65536 and cfg.max_growth == 16
    assert cfg.deadline_seconds({"people"}) == 0.5
    assert [s.format for s in cfg.sources] == ["parquet", "parquet"]


def test_cli_serve_is_registered():
    from dprivacy.cli.app import build_parser

    args = build_parser().parse_args(["serve", "--config", "x.toml", "--port", "9"])
    assert args.config == "x.toml" and args.port == 9 and args.host == "127.0.0.1"
