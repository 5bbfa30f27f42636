"""A PreTPost query ⟨t, pre, T, post⟩ (Paper IV §3) and its JSON form.

``pre`` and ``post`` are either *builtins* (functions shipped with dprivacy, named and
parametrised) or analyst *source code*. ``pre(data, params, seed)`` runs on the user's device
(a builtin in the agent's process, analyst code only inside the sandbox) and sees only the data
fields the query lists in ``fields``. ``post(z, params, seed)`` runs on the analyst's side
(:func:`dprivacy.local.postprocess.apply_post`) on T's output ``z`` only: the device never runs
it and replies ``z`` itself. ``seed`` is public randomness shared by pre and post (Bassily–Smith,
Paper IV Alg. 3): user ``u`` gets ``derive_seed(seed, u)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.local.limits import check_query_json
from dprivacy.local.randomiser import Randomiser, randomiser_from_json

__all__ = ["Code", "Query"]


@dataclass(frozen=True)
class Code:
    """A pre- or post-processor: ``builtin`` name, or analyst ``source`` with an ``entry`` function.

    Examples
    --------
    >>> Code.builtin("field").is_builtin
    True
    >>> Code.source("def pre(d, p, s):\\n    return d['x']").is_builtin
    False
    """

    name: str | None = None
    source_code: str | None = None
    entry: str = "pre"

    def __post_init__(self) -> None:
        if (self.name is None) == (self.source_code is None):
            raise ValidationError("a processor is either a builtin name or analyst source code, not both")
        if self.source_code is not None and len(self.source_code) > 1 << 20:
            raise ValidationError("analyst source code above 1 MiB is refused")
        if not self.entry.isidentifier():
            raise ValidationError(f"entry = {self.entry!r}: expected a Python function name")

    @classmethod
    def builtin(cls, name: str) -> Code:
        return cls(name=name)

    @classmethod
    def source(cls, code: str, entry: str = "pre") -> Code:
        return cls(source_code=code, entry=entry)

    @property
    def is_builtin(self) -> bool:
        return self.name is not None

    def to_dict(self) -> dict[str, Any]:
        if self.name is not None:
            return {"builtin": self.name}
        return {"code": self.source_code, "entry": self.entry}

    @classmethod
    def from_dict(cls, d: Any) -> Code:
        if not isinstance(d, Mapping):
            raise ValidationError(
                "a processor is a JSON object {'builtin': name} or {'code': ..., 'entry': ...}")
        if "builtin" in d:
            return cls(name=str(d["builtin"]))
        if "code" in d:
            return cls(source_code=str(d["code"]), entry=str(d.get("entry", "pre")))
        raise ValidationError("a processor needs 'builtin' or 'code'")


@dataclass(frozen=True)
class Query:
    """The analyst's query ⟨t, pre, T, post⟩ with its public parameters.

    Parameters
    ----------
    id : str
    T : Randomiser
        The matrix whose cost the user pays (Paper IV Def. 3).
    pre : Code
        Runs on the device (sandboxed when it is analyst code).
    post : Code or None
        Runs on the analyst's side on T's outputs (:func:`dprivacy.local.postprocess.apply_post`);
        None keeps T's outputs. The device ignores it.
    t : float
        Time bound of ``pre`` in seconds (also the padded run time of the device's answer).
    memory_mb : int
        Memory bound of a sandboxed ``pre`` (all its threads together).
    fields : tuple of str
        The data fields ``pre`` may read (the user's per-field budgets are charged for them).
    event : str or None
        The event this query is about (event-level budgets).
    seed : int or None
        Public randomness shared by ``pre`` and ``post``.
    params : dict
        Public JSON parameters passed to ``pre`` and ``post``.
    publisher : str or None
        The analyst who published the query, as the aggregator authenticated them (it sets
        this field; a user's public policy may accept only some publishers).
    """

    id: str
    T: Randomiser  # noqa: N815 (the paper's symbol)
    pre: Code
    post: Code | None = None
    t: float = 1.0
    memory_mb: int = 256
    fields: tuple[str, ...] = ()
    event: str | None = None
    seed: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    publisher: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValidationError("a query needs a non-empty string id")
        if not isinstance(self.T, Randomiser):
            raise ValidationError("T must be a Randomiser (MatrixRandomiser or ProductRandomiser)")
        if not (isinstance(self.t, (int, float)) and math.isfinite(self.t) and 0 < self.t <= 600):
            raise ValidationError(f"t = {self.t!r}: the time bound is a number of seconds in (0, 600]")
        if not (isinstance(self.memory_mb, int) and 16 <= self.memory_mb <= 1 << 16):
            raise ValidationError(f"memory_mb = {self.memory_mb!r}: expected an integer in [16, 65536]")
        flds = tuple(self.fields)
        if not flds or not all(isinstance(f, str) and f for f in flds) or len(set(flds)) != len(flds):
            raise ValidationError("fields must list the distinct data fields pre reads (at least one)")
        object.__setattr__(self, "fields", flds)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or self.seed < 0):
            raise ValidationError(f"seed = {self.seed!r}: a seed is a non-negative integer")
        if self.publisher is not None and (not isinstance(self.publisher, str) or not self.publisher):
            raise ValidationError(f"publisher = {self.publisher!r}: an analyst's name (text) or None")
        try:
            json.dumps(dict(self.params), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"query params must be JSON: {exc}") from exc

    @property
    def needs_sandbox(self) -> bool:
        """True when ``pre`` is analyst source code (``post`` never runs on the device)."""
        return not self.pre.is_builtin

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "T": self.T.to_dict(), "pre": self.pre.to_dict(),
                "post": None if self.post is None else self.post.to_dict(), "t": self.t,
                "memory_mb": self.memory_mb, "fields": list(self.fields), "event": self.event,
                "seed": self.seed, "params": dict(self.params), "publisher": self.publisher}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> Query:
        """Rebuild (and re-validate) a query from :meth:`to_dict` output; the size caps of
        :mod:`dprivacy.local.limits` are checked first, before anything is built."""
        if isinstance(d, str):
            d = json.loads(d)
        if not isinstance(d, Mapping):
            raise ValidationError("a query is a JSON object")
        check_query_json(dict(d))
        try:
            return cls(id=d["id"], T=randomiser_from_json(d["T"]), pre=Code.from_dict(d["pre"]),
                       post=None if d.get("post") is None else Code.from_dict(d["post"]),
                       t=d.get("t", 1.0), memory_mb=d.get("memory_mb", 256),
                       fields=tuple(d.get("fields", ())), event=d.get("event"), seed=d.get("seed"),
                       params=d.get("params") or {}, publisher=d.get("publisher"))
        except KeyError as exc:
            raise ValidationError(f"a query lacks the key {exc}") from exc
