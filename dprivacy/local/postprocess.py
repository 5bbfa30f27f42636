"""The analyst's side of PreTPost: check the devices' replies, then run ``post`` on them.

A device runs only ``pre`` (sandboxed, padded) and ``T`` (the library's code) and replies T's
output. The query's ``post`` runs here, on the analyst's machine, on the randomised outputs only:
Paper IV's post-processing argument (Theorem 1) needs ``post`` to see nothing but T's output, and
running it off the device is what guarantees it. On the device, ``post`` would share kernel state
with ``pre`` (the page cache, for one: no namespace isolates it), and ``pre`` has seen the data.

:func:`reply_problem` checks one device reply against its query (the reply schema);
:func:`apply_post` runs ``post`` on the valid replies. Analyst source code runs in this process,
unsandboxed: it is the analyst's own code on the analyst's own machine, and it sees only
randomised values.

Privacy condition: none here (post-processing of T's outputs is free, Paper IV Theorem 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.builtins import POSTS, derive_seed
from dprivacy.local.query import Code, Query
from dprivacy.noise import resolve_rng

__all__ = ["REPLY_KEYS", "apply_post", "post_function", "reply_problem"]

#: The keys of an answered device reply: nothing else may travel from a device.
REPLY_KEYS = frozenset({"query", "user", "status", "cost", "result"})


def reply_problem(query: Query, reply: Any) -> str | None:
    """Why ``reply`` is not a well-formed answer of a device to ``query`` (None if it is).

    An answered reply is exactly ``{"query", "user", "status": "ok", "cost", "result"}`` with
    ``cost == cost(T)`` and ``result`` an output of T: the device's answer carries T's output and
    nothing else.

    Examples
    --------
    >>> from dprivacy.local.case_studies import warner_query
    >>> q = warner_query("w", 1.0, "smoker", ["yes", "no"])
    >>> reply_problem(q, {"query": "w", "user": "u1", "status": "ok", "cost": 1.0, "result": "no"})
    >>> reply_problem(q, {"query": "w", "user": "u1", "status": "ok", "cost": 1.0, "result": "1234"})
    "result '1234' is not an output of T"
    """
    if not isinstance(reply, Mapping):
        return "a reply is a JSON object"
    if set(reply) != REPLY_KEYS:
        return f"an answered reply has exactly the keys {sorted(REPLY_KEYS)}, not {sorted(reply)}"
    if reply["status"] != "ok":
        return f"status {reply['status']!r} is not 'ok'"
    if reply["query"] != query.id:
        return f"reply to query {reply['query']!r}, not {query.id!r}"
    if not isinstance(reply["user"], str) or not reply["user"]:
        return "a reply names its user (a non-empty string)"
    c = reply["cost"]
    want = query.T.cost()
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isclose(
            c, want, rel_tol=1e-12, abs_tol=1e-12):
        return f"cost {c!r} is not cost(T) = {want!r}"
    if not query.T.has_output(reply["result"]):
        return f"result {reply['result']!r} is not an output of T"
    return None


def post_function(code: Code) -> Any:
    """The callable ``f(z, params, seed, rng)`` of a builtin or analyst ``post``."""
    if code.is_builtin:
        if code.name not in POSTS:
            raise ValidationError(f"unknown builtin post {code.name!r}; known: {sorted(POSTS)}")
        return POSTS[str(code.name)]
    ns: dict[str, Any] = {"__name__": "analyst_post"}
    exec(compile(str(code.source_code), "<analyst post>", "exec"), ns)  # noqa: S102 (the analyst's own code)
    fn = ns.get(code.entry)
    if not callable(fn):
        raise ValidationError(f"the post code defines no function {code.entry!r}")
    return lambda z, params, seed, rng: fn(z, params, seed)


def apply_post(query: Query, replies: Iterable[Mapping[str, Any]], *,
               rng: np.random.Generator | int | None = None, invalid: str = "raise") -> list[Any]:
    """``post(result, params, seed)`` for every answered reply, on the analyst's side.

    Parameters
    ----------
    query : Query
        The published query (its ``post`` may be None: the results are then returned as they are).
    replies : iterable of dict
        The devices' replies (as collected). Refusals (``status != "ok"``) are skipped.
    rng : numpy Generator, int or None
        Randomness of a randomised builtin post (public: it never meets the data).
    invalid : {"raise", "drop"}
        What to do with an answered reply that fails :func:`reply_problem`.

    Returns
    -------
    list
        One post-processed value per valid answered reply, in order. ``seed`` is the user's
        public seed ``derive_seed(query.seed, user)``, the one their ``pre`` saw.

    Examples
    --------
    >>> from dprivacy.local.case_studies import duchi_query
    >>> q = duchi_query("m", 1.0, "x")
    >>> c = q.T.cost()
    >>> ok = {"query": "m", "user": "u1", "status": "ok", "cost": c, "result": 1}
    >>> refused = {"query": "m", "user": "u2", "status": "rejected", "reason": "", "result": None}
    >>> out = apply_post(q, [ok, refused])
    >>> [round(v, 6) for v in out]  # 1 * (e + 1) / (e - 1)
    [2.163953]
    """
    if invalid not in ("raise", "drop"):
        raise ValidationError(f"invalid = {invalid!r}: use 'raise' or 'drop'")
    if not isinstance(query, Query):
        raise ValidationError("apply_post needs the published Query")
    post = None if query.post is None else post_function(query.post)
    g = resolve_rng(rng)
    out = []
    for r in replies:
        if isinstance(r, Mapping) and r.get("status") != "ok":
            continue
        problem = reply_problem(query, r)
        if problem is not None:
            if invalid == "raise":
                raise ValidationError(f"reply of user {r.get('user') if isinstance(r, Mapping) else '?'!r} "
                                      f"to query {query.id!r}: {problem}")
            continue
        z = r["result"]
        out.append(z if post is None else post(z, dict(query.params), derive_seed(query.seed, r["user"]), g))
    return out
