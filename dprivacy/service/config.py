"""The service's configuration: one TOML file naming the sources, the analysts and the limits.

Example (``service.toml``; paths are relative to the file)::

    [service]
    state_dir = "state"        # durable budgets (default: "<config name>.state" beside it)
    query_seconds = 1.0        # every answer is released this long after its request arrived
    max_body_bytes = 65536     # larger requests are refused before they are parsed
    max_plan_steps = 32        # transformations per table in a plan
    max_expr_nodes = 500       # operations in one expression, after expansion
    max_growth = 16            # how much longer than the record's own data a value may get
    max_as_pinq = 64           # as_pinq tables an analyst may hold (each keeps its payers)
    max_rows = 100000          # the row cap of a source that declares none (see below)
    max_work_rows = 2000000    # capacity: the most rows one plan may process (its static bound)
    row_seconds = 5e-8         # the engine's calibrated cost of one row of work
    base_seconds = 0.02        # the engine's fixed cost of a query and of each of its steps
    store_seconds = 2e-8       # a ProPer budget store's cost per person of one commit and of
                               # another worker's catch-up with it (see workbound)
    calibrate = false          # true: measure both costs at start (x calibrate_factor = 4);
                               # the configured ones are then the least used
    # cpus = 2                 # the CPUs the analysts' workers share (default: the CPUs this
    #                          # process may run on)

    [[source]]
    name = "people"            # what analysts ask for
    path = "people.parquet"    # Parquet, CSV, or a DuckDB database (then give `table`)
    kind = "proper"            # or "pinq"
    id = "pid"                 # ProPer: the identity column
    budget = 1.0               # PINQ: each analyst's budget; ProPer: default personal budget
    # notion = "zcdp"          # PINQ: the budget is a zCDP rho (Gaussian queries; pure ε ones
    #                          # are charged ε²/2); default "pure"
    # budget_column = "eps"    # ProPer: personal budgets from a column
    # query_seconds = 2.0      # this source's own deadline (the largest in a plan applies)
    # max_rows = 5000000       # the owner's cap on the source's rows (checked at start: a
    #                          # source above its cap is refused, never truncated)
    # engine = "spark"         # read through Spark (see [spark]); default "duckdb"
    # [source.release]         # d_X releases: the owner's universe and metric (see
    # universe = "cities.csv"  # dprivacy.service.releases)
    # key = ["city"]
    # metric = "Discrete"
    # params = { eps = 1.0 }
    # query_seconds = 5.0      # the deadline of a release (if larger than the source's)

    [[analyst]]
    name = "alice"
    key_sha256 = "<hex>"       # sha256 of the key, never the key itself
    # sources = ["people"]     # default: every source
    # share = 0.25             # the analyst's share of the machine's CPUs (default: an
    #                          # equal split of what the other analysts' shares leave)

    [spark]                    # only for sources with engine = "spark"
    master = "local[2]"        # or a cluster: "spark://host:7077", "yarn", "k8s://..."
    budget_dir = "budgets"     # ProPer budgets of Spark sources: a directory that the service
                               # and every executor see (a shared POSIX file system)
    budgets = "table"          # or "slots": kept beside the rows of Parquet sources
    driver_memory = "1g"
    conf = { "spark.executor.memory" = "4g" }   # any other Spark setting
    base_seconds = 1.0         # Spark's fixed cost of a query (one job: the steps are
    step_seconds = 0.02        # compiled together, each costs only this)
    row_seconds = 1e-6         # Spark's cost of one row of work
    max_work_rows = 2000000    # the most rows one plan on Spark sources may process

A Spark source's ``path`` may be a URL that Spark reads (``s3a://``, ``hdfs://``); without
``path``, ``table`` names a table of Spark's catalogue.

The work bound, the deadlines, the workers and the lanes are explained in
:mod:`dprivacy.service.workbound`, :mod:`dprivacy.service.shares`,
:mod:`dprivacy.service.workers` and :mod:`dprivacy.service.lanes`.

Unknown keys are refused (a typo must not silently fall back to a default), and so is a
``key`` field in an analyst: the service stores only the SHA-256 of each key.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprivacy.errors import ConfigError, ValidationError
from dprivacy.service.releases import ReleaseSpec, parse_release

__all__ = ["SourceConfig", "AnalystConfig", "ServiceConfig", "load_config", "parse_config"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_MAX_FILE = 1 << 20
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class SourceConfig:
    """One protected source (see the module doc)."""

    name: str
    path: Path
    kind: str
    budget: float | None
    id: str | None = None
    budget_column: str | None = None
    table: str | None = None
    query_seconds: float | None = None
    release: ReleaseSpec | None = None
    #: PINQ: "pure" (the budget is ε) or "zcdp" (the budget is rho: a table in zCDP mode)
    notion: str = "pure"
    max_rows: int = 100_000
    #: "duckdb" (in the service's process) or "spark" (through the [spark] session)
    engine: str = "duckdb"
    #: a Spark source's location as Spark reads it (a URL, or the resolved local path); None
    #: for a table of Spark's catalogue
    url: str | None = None

    @property
    def format(self) -> str:
        """``"parquet"``, ``"csv"``, ``"duckdb"`` (from the file name) or ``"catalog"`` (a
        Spark source without a path: a table of Spark's catalogue)."""
        if self.engine == "spark" and self.url is None:
            return "catalog"
        suffix = Path(self.url if self.url is not None else self.path).suffix.lower()
        if suffix in (".csv", ".tsv"):
            return "csv"
        if suffix in (".duckdb", ".db", ".ddb"):
            return "duckdb"
        return "parquet"


@dataclass(frozen=True)
class SparkConfig:
    """The ``[spark]`` table: the Spark session of the sources with ``engine = "spark"``, where
    their personal budgets live, and Spark's own calibrated costs (see the module doc)."""

    budget_dir: Path
    master: str = "local[2]"
    driver_memory: str = "1g"
    conf: tuple[tuple[str, str], ...] = ()
    base_seconds: float = 1.0
    step_seconds: float = 0.02
    row_seconds: float = 1e-6
    max_work_rows: int = 2_000_000
    #: the ProPer budget store: "table" (SparkBudgetTable, any source) or "slots"
    #: (SparkSlotBudgets, beside the rows of a Parquet source: no join or rewrite per query)
    budgets: str = "table"


@dataclass(frozen=True)
class AnalystConfig:
    """One analyst: a name, the SHA-256 of their key, the sources they may query."""

    name: str
    key_sha256: str
    sources: tuple[str, ...] | None = None
    share: float | None = None

    def may_use(self, source: str) -> bool:
        """Whether the analyst may query ``source``."""
        return self.sources is None or source in self.sources


@dataclass(frozen=True)
class ServiceConfig:
    """The whole configuration (see the module doc for the keys and their defaults)."""

    sources: tuple[SourceConfig, ...]
    analysts: tuple[AnalystConfig, ...]
    state_dir: Path
    query_seconds: float = 1.0
    max_body_bytes: int = 65536
    max_plan_steps: int = 32
    max_expr_nodes: int = 500
    max_growth: float = 16.0
    max_public_rows: int = 1000
    max_candidates: int = 1000
    max_as_pinq: int = 64
    max_rows: int = 100_000
    max_work_rows: int = 2_000_000
    row_seconds: float = 5e-8
    base_seconds: float = 0.02
    store_seconds: float = 2e-8
    calibrate: bool = False
    calibrate_factor: float = 4.0
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    extra: dict[str, Any] = field(default_factory=dict)
    spark: SparkConfig | None = None

    def engine_of(self, names: Any) -> str:
        """The engine of the sources ``names`` (one plan reads sources of one engine)."""
        engines = {s.engine for s in self.sources if s.name in names}
        if len(engines) > 1:
            raise ValidationError("a plan reads sources of one engine: these sources are "
                                  "served by DuckDB and by Spark")
        return engines.pop() if engines else "duckdb"

    def costs(self, engine: str = "duckdb") -> tuple[float, float, float, int]:
        """``(base_seconds, step_seconds, row_seconds, max_work_rows)`` of ``engine``: the
        service's own for DuckDB (a step costs ``base_seconds`` there), those of ``[spark]``
        for Spark."""
        if engine == "spark" and self.spark is not None:
            sp = self.spark
            return sp.base_seconds, sp.step_seconds, sp.row_seconds, sp.max_work_rows
        return self.base_seconds, self.base_seconds, self.row_seconds, self.max_work_rows

    def engines(self) -> set[str]:
        """The engines of the configured sources."""
        return {s.engine for s in self.sources}

    def source(self, name: str) -> SourceConfig | None:
        """The source called ``name`` (None if there is none)."""
        return next((s for s in self.sources if s.name == name), None)

    def deadline_seconds(self, names: set[str], *, release: bool = False) -> float:
        """The per-query time of a plan over the sources ``names`` (the largest applies; for a
        ``release``, the sources' ``[source.release]`` ``query_seconds`` count too)."""
        vals = [self.query_seconds] + [s.query_seconds for s in self.sources
                                       if s.name in names and s.query_seconds is not None]
        if release:
            vals += [s.release.query_seconds for s in self.sources if s.name in names
                     and s.release is not None and s.release.query_seconds is not None]
        return max(vals)

    def share(self, analyst: str) -> float:
        """The analyst's share of the machine's CPUs: its ``share``, or an equal split of
        what the declared shares leave to the analysts without one."""
        a = next(x for x in self.analysts if x.name == analyst)
        if a.share is not None:
            return a.share
        left = 1.0 - sum(x.share for x in self.analysts if x.share is not None)
        return left / sum(1 for x in self.analysts if x.share is None)


def _take(d: dict[str, Any], allowed: dict[str, type | tuple[type, ...]], where: str) -> None:
    for k, v in d.items():
        if k not in allowed:
            hint = " (store key_sha256, the SHA-256 of the key, never the key)" if k == "key" else ""
            raise ConfigError(f"{where}: unknown key {k!r}{hint}; allowed: {sorted(allowed)}")
        if not isinstance(v, allowed[k]) or isinstance(v, bool) and allowed[k] is not bool:
            raise ConfigError(f"{where}: {k} has the wrong type ({type(v).__name__})")


def _positive(x: Any, what: str, *, integer: bool = False) -> Any:
    v = float(x)
    if not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
        raise ConfigError(f"{what} = {x!r}: expected a positive {'integer' if integer else 'number'}")
    return int(v) if integer else v


def parse_config(doc: dict[str, Any], base: Path, default_state: Path) -> ServiceConfig:
    """A :class:`ServiceConfig` from a parsed TOML document (paths relative to ``base``)."""
    _take(doc, {"service": dict, "source": list, "analyst": list, "spark": dict}, "config")
    svc = doc.get("service", {})
    num = (int, float)
    _take(svc, {"state_dir": str, "query_seconds": num, "max_body_bytes": int,
                "max_plan_steps": int, "max_expr_nodes": int, "max_growth": num,
                "max_public_rows": int, "max_candidates": int, "max_as_pinq": int,
                "max_rows": int, "max_work_rows": int, "row_seconds": num,
                "base_seconds": num, "store_seconds": num, "calibrate": bool,
                "calibrate_factor": num, "cpus": int}, "[service]")
    default_rows = _positive(svc.get("max_rows", 100_000), "max_rows", integer=True)
    sources: list[SourceConfig] = []
    for i, s in enumerate(doc.get("source", [])):
        where = f"[[source]] #{i + 1}"
        if not isinstance(s, dict):
            raise ConfigError(f"{where}: expected a table")
        _take(s, {"name": str, "path": str, "kind": str, "id": str, "budget": num,
                  "budget_column": str, "table": str, "query_seconds": num,
                  "release": dict, "notion": str, "max_rows": int, "engine": str}, where)
        engine = s.get("engine", "duckdb")
        if engine not in ("duckdb", "spark"):
            raise ConfigError(f"{where}: engine {engine!r}: expected 'duckdb' or 'spark'")
        if engine == "spark" and "spark" not in doc:
            raise ConfigError(f"{where}: a Spark source needs a [spark] table (its master and "
                              "the directory of its budgets)")
        for k in ("name", "kind") if engine == "spark" and "table" in s else ("name", "path",
                                                                              "kind"):
            if k not in s:
                raise ConfigError(f"{where}: {k} is required")
        if not _NAME.match(s["name"]):
            raise ConfigError(f"{where}: name {s['name']!r}: letters, digits, _ . - (64 at most)")
        if any(x.name == s["name"] for x in sources):
            raise ConfigError(f"{where}: the source name {s['name']!r} is used twice")
        if s["kind"] not in ("pinq", "proper"):
            raise ConfigError(f"{where}: kind {s['kind']!r}: expected 'pinq' or 'proper'")
        budget = s.get("budget")
        if budget is not None:
            b = float(budget)
            if not math.isfinite(b) or b < 0:
                raise ConfigError(f"{where}: budget {budget!r}: a finite number >= 0")
        if s["kind"] == "pinq":
            if budget is None:
                raise ConfigError(f"{where}: a PINQ source needs budget (each analyst's budget)")
            if "id" in s or "budget_column" in s:
                raise ConfigError(f"{where}: id and budget_column are for ProPer sources")
            if s.get("notion", "pure") not in ("pure", "zcdp"):
                raise ConfigError(f"{where}: notion {s['notion']!r}: expected 'pure' or 'zcdp'")
            if s.get("notion") == "zcdp" and not float(budget) > 0:
                raise ConfigError(f"{where}: a zCDP budget (rho) is a number > 0")
        else:
            if "id" not in s:
                raise ConfigError(f"{where}: a ProPer source needs id (the stable identity column)")
            if (budget is None) == ("budget_column" not in s):
                raise ConfigError(f"{where}: give exactly one of budget and budget_column")
            if "notion" in s:
                raise ConfigError(f"{where}: notion is for PINQ sources (ProPer budgets are "
                                  "pure ε)")
        qs = s.get("query_seconds")
        url, path = None, s.get("path")
        if engine == "spark" and path is not None:
            url = path if _URL.match(path) else str((base / path).resolve())
        local = base if path is None or _URL.match(path) else (base / path).resolve()
        src = SourceConfig(
            name=s["name"], path=local, kind=s["kind"], engine=engine, url=url,
            budget=None if budget is None else float(budget), id=s.get("id"),
            budget_column=s.get("budget_column"), table=s.get("table"),
            query_seconds=None if qs is None else _positive(qs, f"{where}: query_seconds"),
            release=parse_release(s["release"], base, where) if "release" in s else None,
            notion=s.get("notion", "pure"),
            max_rows=_positive(s.get("max_rows", default_rows), f"{where}: max_rows",
                               integer=True))
        if src.format == "duckdb" and src.table is None:
            raise ConfigError(f"{where}: a DuckDB database needs table (the table's name)")
        if engine == "spark" and src.format == "duckdb":
            raise ConfigError(f"{where}: a Spark source reads Parquet, CSV or a table of Spark's "
                              "catalogue, not a DuckDB database")
        sources.append(src)
    if not sources:
        raise ConfigError("config: no [[source]]")
    analysts: list[AnalystConfig] = []
    for i, a in enumerate(doc.get("analyst", [])):
        where = f"[[analyst]] #{i + 1}"
        if not isinstance(a, dict):
            raise ConfigError(f"{where}: expected a table")
        _take(a, {"name": str, "key_sha256": str, "sources": list, "share": num}, where)
        if "name" not in a or "key_sha256" not in a:
            raise ConfigError(f"{where}: name and key_sha256 are required")
        if not _NAME.match(a["name"]):
            raise ConfigError(f"{where}: name {a['name']!r}: letters, digits, _ . - (64 at most)")
        if not _HEX.match(a["key_sha256"].lower()):
            raise ConfigError(f"{where}: key_sha256 must be 64 hexadecimal digits")
        if any(x.name == a["name"] for x in analysts):
            raise ConfigError(f"{where}: the analyst name {a['name']!r} is used twice")
        srcs = a.get("sources")
        if srcs is not None:
            unknown = [x for x in srcs if not any(s.name == x for s in sources)]
            if unknown:
                raise ConfigError(f"{where}: unknown sources {unknown}")
        share = None if "share" not in a else _positive(a["share"], f"{where}: share")
        analysts.append(AnalystConfig(a["name"], a["key_sha256"].lower(),
                                      None if srcs is None else tuple(srcs), share))
    if not analysts:
        raise ConfigError("config: no [[analyst]]")
    declared = sum(a.share for a in analysts if a.share is not None)
    free = sum(1 for a in analysts if a.share is None)
    if declared > 1.0 + 1e-12 or (free and declared >= 1.0):
        raise ConfigError(f"[[analyst]] shares add up to {declared:g}: the shares are parts of "
                          "the machine (at most 1 in total, less if an analyst has none)")
    state = Path(svc["state_dir"]) if "state_dir" in svc else default_state
    state_dir = (base / state).resolve()
    spark = _spark(doc["spark"], base, state_dir) if "spark" in doc else None
    return ServiceConfig(
        spark=spark,
        sources=tuple(sources), analysts=tuple(analysts),
        state_dir=state_dir,
        query_seconds=_positive(svc.get("query_seconds", 1.0), "query_seconds"),
        max_body_bytes=_positive(svc.get("max_body_bytes", 65536), "max_body_bytes", integer=True),
        max_plan_steps=_positive(svc.get("max_plan_steps", 32), "max_plan_steps", integer=True),
        max_expr_nodes=_positive(svc.get("max_expr_nodes", 500), "max_expr_nodes", integer=True),
        max_growth=_positive(svc.get("max_growth", 16.0), "max_growth"),
        max_public_rows=_positive(svc.get("max_public_rows", 1000), "max_public_rows",
                                  integer=True),
        max_candidates=_positive(svc.get("max_candidates", 1000), "max_candidates", integer=True),
        max_as_pinq=_positive(svc.get("max_as_pinq", 64), "max_as_pinq", integer=True),
        max_rows=default_rows,
        max_work_rows=_positive(svc.get("max_work_rows", 2_000_000), "max_work_rows",
                                integer=True),
        row_seconds=_positive(svc.get("row_seconds", 5e-8), "row_seconds"),
        base_seconds=_positive(svc.get("base_seconds", 0.02), "base_seconds"),
        store_seconds=_positive(svc.get("store_seconds", 2e-8), "store_seconds"),
        calibrate=svc.get("calibrate", False),
        calibrate_factor=_positive(svc.get("calibrate_factor", 4.0), "calibrate_factor"),
        **({"cpus": _positive(svc["cpus"], "cpus", integer=True)} if "cpus" in svc else {}),
    )


def _spark(d: dict[str, Any], base: Path, state_dir: Path) -> SparkConfig:
    """The ``[spark]`` table (budget_dir relative to ``base``; default: in the state
    directory)."""
    num = (int, float)
    _take(d, {"master": str, "budget_dir": str, "driver_memory": str, "conf": dict,
              "base_seconds": num, "step_seconds": num, "row_seconds": num,
              "max_work_rows": int, "budgets": str}, "[spark]")
    if d.get("budgets", "table") not in ("table", "slots"):
        raise ConfigError(f"[spark] budgets = {d['budgets']!r}: expected 'table' or 'slots'")
    conf: dict[str, str] = {}
    for k, v in d.get("conf", {}).items():
        if not isinstance(v, (str, int, float)):
            raise ConfigError(f"[spark] conf: {k} must be a string, a number or a boolean")
        conf[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    bd = d.get("budget_dir")
    if bd is not None and _URL.match(bd):
        if not bd.startswith("file://"):
            raise ConfigError(f"[spark] budget_dir = {bd!r}: the budgets are committed with "
                              "POSIX file operations (an exclusive create, fsync, a lock "
                              "file): give a directory of a file system mounted on the service "
                              "and on every executor, not an object store URL")
        from urllib.parse import urlparse

        bd = urlparse(bd).path
    return SparkConfig(
        budget_dir=(base / bd).resolve() if bd is not None else state_dir / "spark-budgets",
        master=d.get("master", "local[2]"), driver_memory=d.get("driver_memory", "1g"),
        conf=tuple(sorted(conf.items())),
        base_seconds=_positive(d.get("base_seconds", 1.0), "[spark] base_seconds"),
        step_seconds=_positive(d.get("step_seconds", 0.02), "[spark] step_seconds"),
        row_seconds=_positive(d.get("row_seconds", 1e-6), "[spark] row_seconds"),
        max_work_rows=_positive(d.get("max_work_rows", 2_000_000), "[spark] max_work_rows",
                                integer=True),
        budgets=d.get("budgets", "table"))


def load_config(path: str | os.PathLike) -> ServiceConfig:
    """Read and check the TOML configuration at ``path``.

    Raises:
        ConfigError: unreadable, too large (1 MiB), not TOML, or an invalid setting.
    """
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(_MAX_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the config {p}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_FILE:
        raise ConfigError(f"the config {p} is larger than {_MAX_FILE} bytes")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the config {p} is not valid TOML: {exc}") from None
    return parse_config(doc, p.resolve().parent, Path(p.stem + ".state"))
