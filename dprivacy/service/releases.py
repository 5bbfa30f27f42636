"""d_X releases through the service: the owner's universe and metric, the analyst's config.

**Who decides what.** A d_X release (eq. (5): (w ⊙ F) x + Lap(1/β) on the table's histogram x,
see :mod:`dprivacy.tables.dx`) reads three kinds of public numbers:

* the **universe** (the elements records are counted on) and the **metric** (the d_X policy the
  design must satisfy, Theorem 1) are the data owner's: they are configured per source
  (``[source.release]`` in the service's TOML file) and published to analysts
  (``GET /v1/sources/{name}/release``), never taken from a request;
* the **workload** F and the **design** (w, β) are the analyst's: F is sent as numbers, the
  design as a :class:`~dprivacy.MechanismConfig` JSON text (kind ``"laplace"``, or
  ``"strategy"``: A x + Lap(1)^p and the noisy number of records, see
  :mod:`dprivacy.tables.dx`), which the
  service parses with the strict config loader (:meth:`MechanismConfig.loads`: no NaN,
  Infinity, overflowing floats or huge integers) and re-verifies from scratch against the
  owner's universe and metric (fingerprints of universe, metric and the sent workload, then
  Theorem 1 over every constrained pair) before anything is charged.

The charge itself does not trust the config either: the table computes each element's
add/remove cost c_i = Σ_k u_k |F_ki| from the sent F and the verified (w, β) (PINQ: s · max_i c_i;
ProPer: c_i per record), so a config cannot under-state what a release costs. Numeric bounds
(:data:`MAX_ABS_F`, :data:`MAX_SCALE`) keep (w ⊙ F) x and the noise far from overflow, so no
output can be ±inf because of how many records there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dprivacy.errors import ConfigError, ValidationError

__all__ = ["ReleaseSpec", "ReleaseInputs", "METRICS", "parse_release", "open_release",
           "rebuild", "check_release_query", "run_release", "MAX_ABS_F", "MAX_SCALE"]

#: |F_ki| above this is refused (with MAX_SCALE, (w ⊙ F) x stays finite for any table size).
MAX_ABS_F = 1e9
#: w_k and the noise scale 1/β_k above this are refused.
MAX_SCALE = 1e12


def _metric_classes() -> dict[str, type]:
    from dprivacy import metrics as m

    return {c.__name__: c for c in (m.Discrete, m.Euclidean, m.Geodesic, m.BlowfishThreshold,
                                    m.AttributeWeighted, m.ValueWeighted)}


#: The metrics a service can publish: their parameters are plain JSON, so an analyst rebuilds
#: exactly the owner's metric from its name and ``params()``.
METRICS = ("Discrete", "Euclidean", "Geodesic", "BlowfishThreshold", "AttributeWeighted",
           "ValueWeighted")


@dataclass(frozen=True)
class ReleaseSpec:
    """A source's ``[source.release]`` table: the universe file and the metric."""

    universe: Path
    key: tuple[str, ...]
    coords: tuple[str, ...] | None
    metric: str
    params: dict[str, Any]
    max_queries: int = 1000
    query_seconds: float | None = None


def parse_release(d: Any, base: Path, where: str) -> ReleaseSpec:
    """A :class:`ReleaseSpec` from the TOML table ``d`` (paths relative to ``base``).

    Keys: ``universe`` (the elements, one per row: CSV or Parquet), ``key`` (the columns that
    match the records' columns), ``coords`` (optional coordinate columns: Euclidean, Geodesic,
    Blowfish), ``metric`` (one of :data:`METRICS`), ``params`` (the metric's parameters) and
    ``max_queries`` (rows of F in one release, default 1000) and ``query_seconds`` (the
    deadline of a release, when it must be longer than the source's: a release counts every
    element and, on ProPer, charges each person their element's cost).
    """
    where = f"{where} release"
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a table")
    allowed: dict[str, type | tuple[type, ...]] = {
        "universe": str, "key": list, "coords": list, "metric": str, "params": dict,
        "max_queries": int, "query_seconds": (int, float)}
    for k, v in d.items():
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key {k!r}; allowed: {sorted(allowed)}")
        if not isinstance(v, allowed[k]) or isinstance(v, bool):
            raise ConfigError(f"{where}: {k} has the wrong type ({type(v).__name__})")
    for k in ("universe", "key", "metric"):
        if k not in d:
            raise ConfigError(f"{where}: {k} is required")
    if d["metric"] not in METRICS:
        raise ConfigError(f"{where}: metric {d['metric']!r}: choose one of {', '.join(METRICS)}")
    for k in ("key", "coords"):
        if k in d and (not d[k] or not all(isinstance(c, str) for c in d[k])):
            raise ConfigError(f"{where}: {k} must be a non-empty list of column names")
    mq = d.get("max_queries", 1000)
    if not 1 <= mq <= 100_000:
        raise ConfigError(f"{where}: max_queries = {mq}: expected 1 .. 100000")
    qs = d.get("query_seconds")
    if qs is not None and not (math.isfinite(qs) and qs > 0):
        raise ConfigError(f"{where}: query_seconds = {qs!r}: expected a positive number")
    return ReleaseSpec(universe=(base / d["universe"]).resolve(), key=tuple(d["key"]),
                       coords=tuple(d["coords"]) if "coords" in d else None,
                       metric=d["metric"], params=dict(d.get("params", {})), max_queries=mq,
                       query_seconds=None if qs is None else float(qs))


@dataclass(frozen=True)
class ReleaseInputs:
    """The owner's universe and metric of a source, and their public description."""

    universe: Any
    metric: Any
    public: dict[str, Any]
    max_queries: int


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _build(elements: Any, key: list[str], coords: list[str] | None, metric: str,
           params: dict[str, Any]) -> tuple[Any, Any]:
    from dprivacy.universe import Universe

    U = Universe.from_dataframe(elements, key, coords=coords)  # noqa: N806 (the paper's symbol)
    if U.N != len(elements):
        raise ValidationError("the universe lists an element twice (by its key columns)")
    M = _metric_classes()[metric](**params)  # noqa: N806
    M.constraint_set(U)  # the metric applies to the universe (raises otherwise)
    return U, M


def open_release(spec: ReleaseSpec, max_elements: int = 5000) -> ReleaseInputs:
    """Read the universe file and build the metric (at start-up; errors are ConfigErrors)."""
    import pandas as pd

    try:
        if spec.universe.suffix.lower() in (".csv", ".tsv"):
            df = pd.read_csv(spec.universe, sep="\t" if spec.universe.suffix == ".tsv" else ",")
        else:
            df = pd.read_parquet(spec.universe)
    except Exception as exc:
        raise ConfigError(f"release universe {spec.universe}: cannot read it: "
                          f"{type(exc).__name__}") from None
    if not 2 <= len(df) <= max_elements:
        raise ConfigError(f"release universe {spec.universe}: {len(df)} elements; expected "
                          f"2 .. {max_elements}")
    cols = list(spec.key) + [c for c in (spec.coords or ()) if c not in spec.key]
    try:
        U, M = _build(df[cols] if set(cols) <= set(df.columns) else df, list(spec.key),  # noqa: N806
                      list(spec.coords) if spec.coords else None, spec.metric, spec.params)
    except Exception as exc:
        raise ConfigError(f"release universe {spec.universe} with {spec.metric}: "
                          f"{type(exc).__name__}: {exc}") from None
    el = U.elements
    public = {"key": list(spec.key), "coords": list(spec.coords) if spec.coords else None,
              "columns": [str(c) for c in cols],
              "rows": [[_py(v) for v in row] for row in df[cols].itertuples(index=False, name=None)],
              "metric": {"name": spec.metric, "params": M.params()},
              "universe_fingerprint": U.fingerprint(), "metric_fingerprint": M.fingerprint(U),
              "N": int(len(el)), "max_queries": spec.max_queries}
    return ReleaseInputs(U, M, public, spec.max_queries)


def rebuild(public: dict[str, Any]) -> tuple[Any, Any]:
    """The analyst's copy of the owner's (universe, metric) from their public description,
    checked against the published fingerprints."""
    import pandas as pd

    from dprivacy.errors import ConfigMismatchError

    df = pd.DataFrame(public["rows"], columns=public["columns"])
    m = public["metric"]
    U, M = _build(df, list(public["key"]), public["coords"], m["name"], dict(m["params"]))  # noqa: N806
    if U.fingerprint() != public["universe_fingerprint"] or \
            M.fingerprint(U) != public["metric_fingerprint"]:
        raise ConfigMismatchError("the service's universe or metric does not rebuild to the same "
                                  "fingerprint here (another dprivacy version?)")
    return U, M


def check_release_query(q: dict[str, Any], max_chars: int) -> None:
    """Structure of ``{"op": "release", "config": TEXT, "F": [[...], ...]}`` (data-free, cheap:
    the config's verification runs later, in the owner's thread, before the charge)."""
    if not isinstance(q["config"], str) or len(q["config"]) > max_chars:
        raise ValidationError("query.config must be the MechanismConfig JSON text")
    F = q["F"]  # noqa: N806
    if not isinstance(F, list) or not F or not all(isinstance(r, list) for r in F):
        raise ValidationError("query.F must be a non-empty list of rows (one per query)")
    n = len(F[0])
    for r in F:
        if len(r) != n or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and math.isfinite(v) and abs(v) <= MAX_ABS_F for v in r):
            raise ValidationError(f"query.F: every row has the same length and finite numbers "
                                  f"of magnitude at most {MAX_ABS_F:g}")


def run_release(t: Any, q: dict[str, Any], inputs: ReleaseInputs | None) -> list[float]:
    """Verify the analyst's config against the owner's inputs, then ``t.release`` (which checks,
    charges, and only then counts)."""
    from dprivacy.config import MechanismConfig
    from dprivacy.errors import UnsupportedOperationError
    from dprivacy.workload import Workload

    if inputs is None:
        raise UnsupportedOperationError("this source has no release universe and metric "
                                        "(the data owner configures [source.release])")
    F = np.array(q["F"], dtype=float)  # noqa: N806
    if F.shape[1] != inputs.universe.N or F.shape[0] > inputs.max_queries:
        raise ValidationError(f"query.F has shape {F.shape}: expected (m, {inputs.universe.N}) "
                              f"with m <= {inputs.max_queries}")
    W = Workload(F)  # noqa: N806
    cfg = MechanismConfig.loads(q["config"], inputs.universe, inputs.metric, W,
                                where="query.config")
    if cfg.kind not in ("laplace", "strategy"):
        raise ValidationError(f"a table release is a d_X Laplace or strategy release; the "
                              f"config is {cfg.kind!r}")
    d: Any = cfg.design()
    if cfg.kind == "laplace":
        w, beta = np.asarray(d.w, dtype=float), np.asarray(d.beta, dtype=float)
        with np.errstate(divide="ignore"):
            scale = np.where(w == 0, 0.0, 1.0 / beta)
        if not (np.all(w >= 0) and np.all(w <= MAX_SCALE) and np.all(scale <= MAX_SCALE)):
            raise ValidationError(f"the design's w and noise scale 1/beta must lie in [0, "
                                  f"{MAX_SCALE:g}]")
    out = t.release(W, d, inputs.universe, metric=inputs.metric)
    return [float(v) for v in np.asarray(out, dtype=float).reshape(-1)]
