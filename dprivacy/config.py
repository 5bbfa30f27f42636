"""MechanismConfig: a versioned JSON export of a solved mechanism, verified again when loaded.

A config file stores the mechanism kind, the design (w, beta, method, loss, objective, solver
report), the mechanism's extra parameters (MWEM's T, SmallDB's size) and sha256 fingerprints of
the universe (elements in order), the metric (name, parameters and budget) and the workload.
:meth:`MechanismConfig.load` refuses a file made for other inputs (:class:`ConfigMismatchError`
naming the part that differs) and re-checks the mechanism's privacy condition from scratch against
``metric.constraint_set(universe)`` — Theorem 1 (Laplace: sum_k beta_k w_k |F_ki - F_kj| <=
eps_ij), 3, 5 or 7 — so a file edited to raise beta is refused with PrivacyViolationError.

Floats are written losslessly: finite floats as JSON numbers (Python writes the shortest repr
that round-trips exactly), non-finite ones as ``{"__float__": "inf"}`` (strict JSON, no Infinity).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprivacy._atomic import atomic_write_text
from dprivacy.config_json import (
    _bounded_int,
    _finite_float,
    _float_array,
    _refuse_constant,
    _short,
    from_json,
    to_json,
)
from dprivacy.design import Design
from dprivacy.errors import ConfigError, ConfigMismatchError, ValidationError
from dprivacy.fingerprints import ENCODING
from dprivacy.gaussian_design import GaussianDesign, check_rho, pair_constraint_set
from dprivacy.implicit_workload import ImplicitWorkload, as_workload
from dprivacy.mechanisms.exponential import DXExponential
from dprivacy.mechanisms.gaussian import DXGaussian
from dprivacy.mechanisms.laplace import DXLaplace
from dprivacy.mechanisms.mwem import DXMWEM
from dprivacy.mechanisms.smalldb import DXSmallDB
from dprivacy.mechanisms.strategy import (
    StrategyDesign,
    StrategyMechanism,
    strategy_from_json,
    strategy_to_json,
)
from dprivacy.universe import universe_difference
from dprivacy.workload import Workload

if TYPE_CHECKING:
    from dprivacy.metrics.base import Metric
    from dprivacy.universe import Universe

SCHEMA = "dprivacy.mechanism-config"
#: The version this dprivacy writes; it reads every version in READABLE.
VERSION = 2
#: Strategy mechanisms (kind "strategy": the matrix C and its basis instead of w, beta) are
#: written as version 3; other kinds keep version 2.
STRATEGY_VERSION = 3
READABLE = (1, 2, 3)
#: Fingerprints of version-1 configs (pandas' CSV writer, budget bytes): read, never written.
LEGACY_ENCODING = "dprivacy-fp-1"
KINDS: dict[str, type] = {"laplace": DXLaplace, "exponential": DXExponential,
                          "smalldb": DXSmallDB, "mwem": DXMWEM, "strategy": StrategyMechanism,
                          "gaussian": DXGaussian}
#: Mechanism parameters beyond (w, beta) that each kind stores.
PARAMS: dict[str, tuple[str, ...]] = {"laplace": (), "exponential": (), "smalldb": ("size",),
                                      "mwem": ("T",), "strategy": (), "gaussian": ()}
_MAX_INLINE_PARAMS = 65536  # metric params larger than this (JSON chars) are stored as a hash
#: Config files larger than this are refused before they are read (as the command line does).
MAX_BYTES = 1 << 30
#: The mechanism parameters (MWEM's ``T``, SmallDB's ``size``) are integers in [1, MAX_PARAM].
MAX_PARAM = (1 << 31) - 1


def _metric_params(metric: Metric) -> dict[str, Any]:
    text = json.dumps(to_json(metric.params()), sort_keys=True)
    if len(text) > _MAX_INLINE_PARAMS:
        return {"params_sha256": hashlib.sha256(text.encode()).hexdigest()}
    return {"params": json.loads(text)}


def _identity_parts(universe: Universe, metric: Metric, workload: Workload | ImplicitWorkload,
                    encoding: str = ENCODING) -> dict[str, Any]:
    """Fingerprint builders per part, in checking order (each computed only when needed)."""
    legacy = encoding == LEGACY_ENCODING
    return {
        "universe": lambda: {"N": universe.N, "fingerprint": universe.legacy_fingerprint_v1()
                             if legacy else universe.fingerprint(),
                             "parts": universe.identity_parts()},
        "metric": lambda: {"name": metric.name, **_metric_params(metric),
                           "fingerprint": metric.legacy_fingerprint_v1(universe) if legacy
                           else metric.fingerprint(universe)},
        "workload": lambda: {"m": workload.m, "N": workload.N,
                             "fingerprint": workload.legacy_fingerprint_v1()
                             if legacy and isinstance(workload, Workload)
                             else workload.fingerprint()},
    }


def _identity(universe: Universe, metric: Metric, workload: Workload | ImplicitWorkload
              ) -> dict[str, Any]:
    return {k: f() for k, f in _identity_parts(universe, metric, workload).items()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@dataclass(frozen=True, eq=False)
class MechanismConfig:
    """A solved mechanism as data: kind, design, extra parameters and input fingerprints.

    Build with :meth:`from_design` or :meth:`from_mechanism`; write with :meth:`save`; read with
    :meth:`load`, which verifies the fingerprints and the privacy condition before returning.
    Equality is exact (floats bit for bit, inf and nan included).

    Examples
    --------
    >>> import numpy as np, tempfile, os, dprivacy as dp
    >>> U = dp.Universe.from_points(np.array([[0.0], [1.0], [3.0]]))
    >>> M, W = dp.metrics.Euclidean(1.0), dp.Workload([[0.0, 1.0, 2.0]])
    >>> cfg = MechanismConfig.from_design(W, U, M, dp.design(W, U, M, method="closed_form"))
    >>> path = cfg.save(os.path.join(tempfile.mkdtemp(), "laplace.json"))
    >>> back = MechanismConfig.load(path, U, M, W)
    >>> back == cfg, back.to_mechanism().kind
    (True, 'laplace')
    """

    kind: str
    w: np.ndarray
    beta: np.ndarray
    method: str
    loss: str
    objective: float
    report: dict
    params: dict
    identity: dict
    strategy: dict | None = None
    #: kind "gaussian": the noise sigma per query and the zCDP rho per unit of the metric
    #: (written as design.sigma, design.rho with design.noise "gaussian", design.notion "zcdp")
    sigma: np.ndarray | None = None
    rho: float | None = None
    encoding: str = field(default=ENCODING, compare=False)
    _bound: tuple | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------ building
    @classmethod
    def from_design(cls, workload: Workload | ImplicitWorkload | Any, universe: Universe,
                    metric: Metric,
                    design: Design | StrategyDesign, kind: str = "laplace",
                    **params: Any) -> MechanismConfig:
        """Config for ``kind`` built from ``design`` (verified now by building the mechanism).

        ``params``: ``T`` for "mwem" (default ``design.report["T"]``), ``size`` for "smalldb".
        """
        workload = as_workload(workload)
        if isinstance(design, StrategyDesign):
            kind = "strategy"
        elif isinstance(design, GaussianDesign):
            kind = "gaussian"
        if isinstance(workload, ImplicitWorkload) and kind != "strategy":
            raise ValidationError(f"{workload!r} is an implicit workload: only strategy "
                                  "mechanisms take it (dprivacy.design_strategy); other mechanisms "
                                  "need W.to_workload()")
        if kind not in KINDS:
            raise ValidationError(f"kind = {kind!r}: choose one of {', '.join(KINDS)}")
        extra = {k: v for k, v in params.items() if v is not None}
        if kind == "mwem" and "T" not in extra and "T" in design.report:
            extra["T"] = design.report["T"]
        unknown = set(extra) - set(PARAMS[kind])
        if unknown:
            raise ValidationError(f"{kind} takes no parameter(s) {sorted(unknown)}; "
                                  f"it takes {list(PARAMS[kind]) or 'none'}")
        mech = _build(kind, workload, design, universe, metric, extra)
        return cls._of(mech, workload, universe, metric)

    @classmethod
    def from_mechanism(cls, mechanism: Any, universe: Universe, metric: Metric) -> MechanismConfig:
        """Config of a built mechanism (re-verified against ``universe`` + ``metric``)."""
        kind = getattr(mechanism, "kind", None)
        if kind not in KINDS:
            raise ValidationError(f"{type(mechanism).__name__} is not a configurable mechanism")
        extra = mechanism.params() if hasattr(mechanism, "params") else {}
        mech = _build(kind, mechanism.workload, mechanism.design, universe, metric, extra)
        return cls._of(mech, mechanism.workload, universe, metric)

    @classmethod
    def _of(cls, mech: Any, workload: Workload | ImplicitWorkload, universe: Universe, metric: Metric
            ) -> MechanismConfig:
        d = mech.design
        extra = mech.params() if hasattr(mech, "params") else {}
        if mech.kind == "strategy":
            empty = _ro(np.zeros(0))
            return cls(kind="strategy", w=empty, beta=empty, method="strategy", loss="squared",
                       objective=float(mech.expected_squared_error()),
                       report=from_json(to_json(d.report)), params={},
                       identity=_identity(universe, metric, workload),
                       strategy=from_json(to_json(strategy_to_json(d))),
                       _bound=(workload, universe, metric, mech))
        if mech.kind == "gaussian":
            empty = _ro(np.zeros(0))
            return cls(kind="gaussian", w=empty, beta=empty, method=d.method, loss=d.loss,
                       objective=float(d.objective), report=from_json(to_json(d.report)),
                       params={}, identity=_identity(universe, metric, workload),
                       sigma=_ro(d.sigma), rho=float(d.rho),
                       _bound=(workload, universe, metric, mech))
        return cls(kind=mech.kind, w=_ro(d.w), beta=_ro(d.beta), method=d.method, loss=d.loss,
                   objective=float(d.objective), report=from_json(to_json(d.report)),
                   params=from_json(to_json(extra)),
                   identity=_identity(universe, metric, workload),
                   _bound=(workload, universe, metric, mech))

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """The JSON document (strict JSON; floats lossless)."""
        head: dict[str, Any] = {"schema": SCHEMA, "version": VERSION,
                                "fingerprint_encoding": ENCODING}
        if self.encoding == LEGACY_ENCODING:  # an unbound version-1 config stays version 1
            head = {"schema": SCHEMA, "version": 1}
        design = {"w": to_json(self.w), "beta": to_json(self.beta), "method": self.method,
                  "loss": self.loss, "objective": to_json(self.objective),
                  "report": to_json(self.report)}
        if self.kind == "strategy":
            head["version"] = STRATEGY_VERSION
            design["strategy"] = to_json(self.strategy)
        if self.kind == "gaussian":
            design.update(noise="gaussian", notion="zcdp", sigma=to_json(self.sigma),
                          rho=to_json(self.rho))
        return {**head, "kind": self.kind, "design": design,
                "params": to_json(self.params), **to_json(self.identity)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the config atomically (temporary file in the same folder, then os.replace)."""
        return atomic_write_text(path, self.to_json())

    @classmethod
    def from_dict(cls, doc: Any) -> MechanismConfig:
        """Parse a config document (structure only; no input check: use :meth:`load`)."""
        try:
            return cls._from_dict(doc)
        except RecursionError as exc:
            raise ConfigError("the config is nested too deeply to be a mechanism config "
                              "(corrupted or hostile file)") from exc

    @classmethod
    def _from_dict(cls, doc: Any) -> MechanismConfig:
        if not isinstance(doc, dict):
            raise ConfigError("a mechanism config is a JSON object")
        if doc.get("schema") != SCHEMA:
            raise ConfigError(f"schema = {doc.get('schema')!r}: not a {SCHEMA!r} file")
        version = doc.get("version")
        if isinstance(version, bool) or version not in READABLE:
            raise ConfigError(f"unknown config version {_short(version)}: this dprivacy reads "
                              f"versions {', '.join(map(str, READABLE))}; upgrade dprivacy or "
                              "re-export the config")
        encoding = LEGACY_ENCODING if version == 1 else doc.get("fingerprint_encoding")
        if encoding != ENCODING and encoding != LEGACY_ENCODING:
            raise ConfigError(f"unknown fingerprint encoding {_short(encoding)}: this dprivacy "
                              f"reads {ENCODING!r}; upgrade dprivacy or re-export the config")
        try:
            kind, d = doc["kind"], doc["design"]
            w, beta = _float_array(d["w"], "w"), _float_array(d["beta"], "beta")
            objective = from_json(d["objective"])
            identity = {k: doc[k] for k in ("universe", "metric", "workload")}
            method, loss, report, params = d["method"], d["loss"], d["report"], doc["params"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"config is missing field {exc}") from exc
        if kind not in KINDS:
            raise ConfigError(f"unknown mechanism kind {kind!r}; known: {', '.join(KINDS)}")
        if not (isinstance(objective, (int, float)) and isinstance(method, str)
                and isinstance(loss, str) and isinstance(report, dict)
                and isinstance(params, dict) and all(isinstance(v, dict) for v in identity.values())):
            raise ConfigError("config fields have the wrong types")
        if w.shape != beta.shape or w.ndim != 1:
            raise ConfigError(f"w {w.shape} and beta {beta.shape} must be vectors of one length")
        strategy = d.get("strategy")
        if (kind == "strategy") != (version == STRATEGY_VERSION) or \
                (kind == "strategy") != isinstance(strategy, dict):
            raise ConfigError(f"a {kind} config is version {STRATEGY_VERSION if kind == 'strategy' else 2}"
                              " and has a design.strategy object exactly when its kind is "
                              "'strategy'")
        _check_params(kind, params)
        sigma, rho = None, None
        if (kind == "gaussian") != (d.get("noise", "laplace") == "gaussian"):
            raise ConfigError("a config has design.noise 'gaussian' exactly when its kind is "
                              "'gaussian'")
        if kind == "gaussian":
            if d.get("notion") != "zcdp" or "sigma" not in d or "rho" not in d:
                raise ConfigError("a gaussian config has design.notion 'zcdp', design.sigma and "
                                  "design.rho")
            sigma = _ro(_float_array(d["sigma"], "sigma"))
            try:
                rho = check_rho(from_json(d["rho"]), "design.rho")
            except ValidationError as exc:
                raise ConfigError(str(exc)) from exc
        return cls(kind=kind, w=_ro(w), beta=_ro(beta), method=method, loss=loss,
                   objective=float(objective), report=from_json(report),
                   params=from_json(params), identity=identity,
                   strategy=from_json(strategy) if strategy is not None else None,
                   sigma=sigma, rho=rho, encoding=encoding)

    @classmethod
    def load(cls, path: str | os.PathLike, universe: Universe, metric: Metric,
             workload: Workload | ImplicitWorkload) -> MechanismConfig:
        """Read a config made for exactly these inputs and re-verify its privacy condition.

        Raises :class:`ConfigError` (unreadable, truncated, not JSON, unknown schema/version),
        :class:`ConfigMismatchError` (universe, metric or workload differ; the message names
        which) or :class:`PrivacyViolationError` (the stored parameters are not private for
        ``metric.constraint_set(universe)``, e.g. an edited beta).  Nothing is released.
        A strategy config made for an :class:`~dprivacy.ImplicitWorkload` loads with the same
        implicit workload (its fingerprint is its kind and sizes, not the written-out matrix's).
        """
        workload = as_workload(workload)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_BYTES:
                    raise ConfigError(f"mechanism config {str(path)!r} is {size / 2**30:.1f} GiB, "
                                      "larger than the 1 GiB dprivacy reads")
                text = fh.read(MAX_BYTES + 1).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read mechanism config {str(path)!r}: {exc}") from exc
        if len(text) > MAX_BYTES:
            raise ConfigError(f"mechanism config {str(path)!r} is larger than the 1 GiB dprivacy "
                              "reads")
        return cls.loads(text, universe, metric, workload, where=repr(str(path)))

    @classmethod
    def loads(cls, text: str, universe: Universe, metric: Metric, workload: Workload | ImplicitWorkload, *,
              where: str = "the config") -> MechanismConfig:
        """:meth:`load` from the JSON text itself (the same strict parsing and verification:
        NaN, Infinity, overflowing floats and integers beyond 2^53 are refused)."""
        workload = as_workload(workload)
        try:
            doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                             parse_int=_bounded_int)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not valid JSON (truncated or corrupted?): "
                              f"{exc}") from exc
        except RecursionError as exc:
            raise ConfigError(f"{where} is nested too deeply to be a mechanism config "
                              "(corrupted or hostile file)") from exc
        cfg = cls.from_dict(doc)
        return cfg.bind(workload, universe, metric)

    # ------------------------------------------------------------ verification
    def check_inputs(self, workload: Workload | ImplicitWorkload, universe: Universe, metric: Metric) -> None:
        """Raise :class:`ConfigMismatchError` naming the first input that differs."""
        parts = _identity_parts(universe, metric, workload, self.encoding)
        keys = {"universe": ("N", "fingerprint"),
                "metric": ("name", "params", "params_sha256", "fingerprint"),
                "workload": ("m", "N", "fingerprint")}
        for part, build in parts.items():
            want = self.identity.get(part, {})
            if part == "metric" and want.get("name") != metric.name:
                have = {"name": metric.name}  # another kind of metric: do not evaluate it
            else:
                have = to_json(build())
            for k in keys[part]:
                a, b = want.get(k), have.get(k)
                wanted, given = want.get("parts"), have.get("parts")
                if a != b and isinstance(wanted, dict) and isinstance(given, dict):
                    what = universe_difference({"N": want.get("N"), **wanted},
                                               {"N": have.get("N"), **given})
                    raise ConfigMismatchError(
                        f"the config was made for another universe ({what}); load it with the "
                        "universe it was exported for")
                if a != b:
                    raise ConfigMismatchError(
                        f"the config was made for another {part}: its {k} is {_short(a)} but the "
                        f"{part} given has {_short(b)}; load it with the {part} it was exported for"
                    )

    def bind(self, workload: Workload | ImplicitWorkload, universe: Universe,
             metric: Metric) -> MechanismConfig:
        """Check the inputs and the privacy condition; return a copy bound to these inputs."""
        self.check_inputs(workload, universe, metric)
        try:
            d: Design | StrategyDesign | GaussianDesign
            if self.kind == "strategy":
                d = strategy_from_json(self.strategy, workload, metric.constraint_set(universe),
                                       self.report)
            elif self.kind == "gaussian":  # every pair's budget: the exact l2 check on load
                assert self.sigma is not None and self.rho is not None
                d = GaussianDesign(self.sigma, self.rho, method=self.method, loss=self.loss,
                                   objective=self.objective, report=self.report,
                                   constraints=pair_constraint_set(metric, universe),
                                   unit=metric.fingerprint(universe))
            else:
                d = Design(self.w, self.beta, method=self.method, loss=self.loss,
                           objective=self.objective, report=self.report,
                           constraints=metric.constraint_set(universe))
            mech = _build(self.kind, workload, d, universe, metric, dict(self.params))
        except (ValidationError, ArithmeticError, TypeError, ValueError) as exc:
            # ArithmeticError / TypeError / ValueError: a hand-made from_dict document whose
            # values no check above foresaw; never surfaced as a raw Python error
            raise ConfigError(f"config parameters are invalid for {self.kind}: {exc}") from exc
        same = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("_bound", "identity", "encoding")}
        # verified against these inputs: from now on the config carries today's fingerprints
        # (a version-1 file re-saved is written in the current version)
        return MechanismConfig(**same, identity=_identity(universe, metric, workload),
                               encoding=ENCODING, _bound=(workload, universe, metric, mech))

    def design(self) -> Design | StrategyDesign | GaussianDesign:
        """The Design (with the constraint set of the bound universe and metric)."""
        if self._bound is None:
            raise ConfigError("this config is not bound to inputs: use load() or bind()")
        return self._bound[3].design

    def to_mechanism(self) -> Any:
        """The verified mechanism (DXLaplace, DXExponential, DXSmallDB or DXMWEM)."""
        if self._bound is None:
            raise ConfigError("this config is not bound to inputs: use load() or bind()")
        return self._bound[3]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MechanismConfig):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name))
                   for f in fields(self) if f.compare)

    __hash__ = None  # type: ignore[assignment]


def _check_params(kind: str, params: Mapping[str, Any]) -> None:
    """MWEM's ``T`` and SmallDB's ``size``: integers (not bools) in [1, MAX_PARAM]."""
    for name in PARAMS[kind]:
        if name not in params:
            continue
        v = params[name]
        if type(v) is not int or not 1 <= v <= MAX_PARAM:
            raise ConfigError(f"config parameter {name} = {_short(v)} of {kind}: expected an "
                              f"integer in [1, {MAX_PARAM}]")


def _ro(a: np.ndarray) -> np.ndarray:
    out = np.array(a, dtype=float, copy=True)
    out.setflags(write=False)
    return out


def _build(kind: str, workload: Workload | ImplicitWorkload, design: Any, universe: Universe, metric: Metric,
           params: Mapping[str, Any]) -> Any:
    """Construct (and so verify) the mechanism of ``kind`` against universe + metric."""
    cls = KINDS[kind]
    missing = [p for p in PARAMS[kind] if p not in params]
    if missing:
        raise ValidationError(f"{kind} needs parameter(s) {missing}")
    return cls(workload, design, universe=universe, metric=metric,
               **{k: params[k] for k in PARAMS[kind]})
