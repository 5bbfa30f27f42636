"""A service with d_X releases configured: cities (PINQ) and people (ProPer) over the owner's
universe of three cities with the Discrete metric (eps = 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dprivacy as dp
from dprivacy.service.auth import key_sha256
from dprivacy.service.config import load_config
from dprivacy.service.serve import ServiceThread
from tests.service.keys import KEYS

CITIES = ["a", "b", "c"]
#: 30 queries, query k counts city k % 3: Theorem 1 for Discrete(1) needs 20 beta <= 1.
F = np.array([[1.0 if i == k % 3 else 0.0 for i in range(3)] for k in range(30)])
BETA = 0.05  # every element costs c_i = 10 * 0.05 = 0.5 per release


def residents(n: int = 60, extra: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """pid, city (a: n/2, b: n/3, c: the rest), eps = 5."""
    city = ["a"] * (n // 2) + ["b"] * (n // 3)
    city += ["c"] * (n - len(city))
    df = pd.DataFrame({"pid": np.arange(n, dtype=np.int64), "city": city,
                       "eps": np.full(n, 5.0)})
    if extra:
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    return df


def write_release_service(d: Path, ppl: pd.DataFrame, *, pinq_budget: float = 100.0,
                          query_seconds: float = 0.3, release_seconds: float | None = None,
                          service: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    ppl.to_parquet(d / "people.parquet")
    ppl[["city"]].to_parquet(d / "visits.parquet")
    ppl[["city"]].to_parquet(d / "plain.parquet")
    pd.DataFrame({"city": CITIES}).to_csv(d / "cities.csv", index=False)
    cfg = d / "service.toml"
    release = '[source.release]\nuniverse = "cities.csv"\nkey = ["city"]\n' \
              'metric = "Discrete"\nparams = { eps = 1.0 }\nmax_queries = 50\n'
    if release_seconds is not None:
        release += f"query_seconds = {release_seconds}\n"
    cfg.write_text(f"""
[service]
query_seconds = {query_seconds}
max_body_bytes = 262144
{service}

[[source]]
name = "people"
path = "people.parquet"
kind = "proper"
id = "pid"
budget_column = "eps"
{release}
[[source]]
name = "visits"
path = "visits.parquet"
kind = "pinq"
budget = {pinq_budget}
{release}
[[source]]
name = "plain"
path = "plain.parquet"
kind = "pinq"
budget = {pinq_budget}

[[analyst]]
name = "alice"
key_sha256 = "{key_sha256(KEYS['alice'])}"
""")
    return cfg


def start_release_service(d: Path, ppl: pd.DataFrame, **kw: Any) -> ServiceThread:
    return ServiceThread(load_config(write_release_service(d, ppl, **kw)))


def owner_inputs() -> tuple[Any, Any, Any, Any]:
    """(U, M, W, design) as the analyst builds them from the published inputs."""
    U = dp.Universe.from_dataframe(pd.DataFrame({"city": CITIES}), ["city"])  # noqa: N806
    M = dp.metrics.Discrete(1.0)  # noqa: N806
    W = dp.Workload(F)  # noqa: N806
    return U, M, W, dp.Design(w=np.ones(len(F)), beta=np.full(len(F), BETA))


def proper_charges(srv: ServiceThread) -> list[tuple[int, str | None, int, float]]:
    """(number, label, payers, total ε) of every committed ProPer query on "people" (read
    through the owner's handle: the store is shared by the workers' processes)."""
    return srv.runner.owner.budgets["people"].queries()
