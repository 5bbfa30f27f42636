"""Fixtures of the service tests: a small data directory, a TOML config, a running service."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from dprivacy.service.auth import key_sha256  # noqa: E402
from dprivacy.service.config import load_config  # noqa: E402
from dprivacy.service.serve import ServiceThread  # noqa: E402
from tests.service.keys import KEYS  # noqa: E402

SECRET = "SECRET-NAME-7f3a"  # a value of one record: must never appear in a response

T = TypeVar("T")


def at_once(runs: dict[str, Callable[[], T]]) -> dict[str, T]:
    """``{name: run()}``, the runs made at the same time (a thread each; an exception in one is
    raised here). For programs against the independent services of neighbouring datasets: each
    has its own data directory, workers and budgets, and a program spends most of its time
    waiting for its answers' deadlines, so the neighbours wait together instead of one after
    the other; what each program observes does not change."""
    with ThreadPoolExecutor(len(runs)) as ex:
        futures = {name: ex.submit(run) for name, run in runs.items()}
        return {name: f.result() for name, f in futures.items()}


def people(n: int = 200, *, extra: dict[str, Any] | None = None) -> pd.DataFrame:
    """pid, age, name, eps (personal budget column); record 3 holds SECRET."""
    df = pd.DataFrame({"pid": np.arange(n, dtype=np.int64), "age": (np.arange(n) * 7) % 90,
                       "name": [f"p{i}" for i in range(n)], "eps": np.full(n, 1.0)})
    df.loc[3, "name"] = SECRET
    if extra is not None:
        df = pd.concat([df, pd.DataFrame([extra])], ignore_index=True)
    return df


def write_service(d: Path, ppl: pd.DataFrame, *, query_seconds: float = 0.25,
                  service: str = "", bob_sources: str = '["visits"]') -> Path:
    """Write people.parquet (ProPer, personal budgets from ``eps``), visits.parquet (PINQ,
    budget 1.0) and service.toml into ``d``; returns the config path."""
    d.mkdir(parents=True, exist_ok=True)
    ppl.to_parquet(d / "people.parquet")
    visits = pd.DataFrame({"age": ppl["age"].to_numpy(), "city": ["x", "y"] * (len(ppl) // 2)
                           + ["x"] * (len(ppl) % 2)})
    visits.to_parquet(d / "visits.parquet")
    cfg = d / "service.toml"
    cfg.write_text(f"""
[service]
query_seconds = {query_seconds}
{service}

[[source]]
name = "people"
path = "people.parquet"
kind = "proper"
id = "pid"
budget_column = "eps"

[[source]]
name = "visits"
path = "visits.parquet"
kind = "pinq"
budget = 1.0

[[analyst]]
name = "alice"
key_sha256 = "{key_sha256(KEYS['alice'])}"

[[analyst]]
name = "bob"
key_sha256 = "{key_sha256(KEYS['bob'])}"
sources = {bob_sources}
""")
    return cfg


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., ServiceThread]]:
    """``start(name, people_df, **kw)``: a running service on its own data directory."""
    running: list[ServiceThread] = []

    def _start(name: str = "svc", ppl: pd.DataFrame | None = None, **kw: Any) -> ServiceThread:
        cfg = write_service(tmp_path / name, people() if ppl is None else ppl, **kw)
        srv = ServiceThread(load_config(cfg))
        running.append(srv)
        return srv

    yield _start
    for srv in running:
        srv.stop()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Callable[..., ServiceThread]]:
    """``service(name, people_df, **kw)``: a running service with d_X releases configured
    (:mod:`tests.service.release_fixtures`)."""
    from tests.service.release_fixtures import residents, start_release_service

    running: list[ServiceThread] = []

    def _start(name: str = "svc", ppl: pd.DataFrame | None = None, **kw: Any) -> ServiceThread:
        srv = start_release_service(tmp_path / name, residents() if ppl is None else ppl, **kw)
        running.append(srv)
        return srv

    yield _start
    for srv in running:
        srv.stop()
