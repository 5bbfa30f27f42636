"""The schema of a user's reply, checked by the aggregator before it is stored.

A reply is ``{"query", "user", "status", ...}``:

* ``status = "ok"``: exactly the keys of :data:`dprivacy.local.postprocess.REPLY_KEYS`;
  ``cost`` must equal cost(T) of the published query (what the user was charged, Paper IV
  Def. 3) and ``result`` must be one of T's outputs (:meth:`Randomiser.has_output`: a label of
  a matrix randomiser; for a product randomiser a list with one output index per coordinate).
  Devices reply T's output only; the analyst runs the query's ``post`` on it
  (:func:`dprivacy.local.postprocess.apply_post`);
* ``status = "rejected"``: a ``reason`` (text) and the user's ``result`` (any JSON, or null).

Anything else (an unknown status or key, a wrong cost, an output T cannot produce, a reply of
more than :data:`~dprivacy.local.limits.MAX_REPLY_BYTES`, text that is not UTF-8, a value nested
too deep) is refused with a one-line reason.

Privacy condition: none (the aggregator only sees replies, which are already randomised).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from dprivacy.errors import ValidationError
from dprivacy.local.aggregator.errors import ForbiddenError
from dprivacy.local.limits import MAX_REPLY_BYTES, check_json_value
from dprivacy.local.query import Query

__all__ = ["MAX_REPLY_BYTES", "check_reply", "largest_answer", "output_checker"]

_KEYS = frozenset({"query", "user", "status", "result", "cost", "reason"})


def output_checker(query: Query) -> Callable[[Any], bool]:
    """A predicate: is ``result`` an output of the query's randomiser T (what a device replies)."""
    return query.T.has_output


def largest_answer(query: Query, user_chars: int = 128) -> int:
    """Bytes of JSON of the largest answered reply to ``query`` (T's longest output, the query's
    id, a user id of ``user_chars`` characters and the cost), as :func:`check_reply` counts them.

    A query whose answers cannot fit :data:`MAX_REPLY_BYTES` (a product randomiser of tens of
    thousands of coordinates) would charge every device and have every reply refused; the
    aggregator refuses it at publish instead.

    Examples
    --------
    >>> from dprivacy.local.case_studies import warner_query
    >>> largest_answer(warner_query("w", 1.0, "x", ["yes", "no"])) < 300
    True
    """
    from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser

    T = query.T  # noqa: N806 (the paper's symbol)
    if isinstance(T, ProductRandomiser):
        outs = [len(str(int(k) - 1)) for k in T._sizes(2)]
        longest = sum(outs) + 2 * len(outs)  # "[a, b, ...]": each index and its ", "
    elif isinstance(T, MatrixRandomiser) and T.outputs is not None:
        longest = max(len(json.dumps(o, allow_nan=False)) for o in T.outputs)
    else:  # pragma: no cover (every randomiser of a query is one of the two)
        return 0
    rest = json.dumps({"query": query.id, "user": "u" * user_chars, "status": "ok",
                       "cost": T.cost(), "result": None}, allow_nan=False)
    return len(rest) - len("null") + longest


def check_reply(reply: Any, *, device: str, query: Query, cost: float,
                is_output: Callable[[Any], bool]) -> dict[str, Any]:
    """The reply as stored (``user`` set to the authenticated ``device``), or ValidationError.

    Parameters
    ----------
    reply : JSON object
    device : str
        The user whose credential sent the reply; a reply naming another user is refused
        (:class:`ForbiddenError`).
    query : Query
        The published query it answers.
    cost : float
        cost(T) of that query, as computed when it was published.
    is_output : callable
        :func:`output_checker` of the query.
    """
    if not isinstance(reply, dict):
        raise ValidationError("a reply is a JSON object")
    extra = sorted(set(reply) - _KEYS)
    if extra:
        raise ValidationError(f"a reply has no key {extra[0]!r} (keys: {', '.join(sorted(_KEYS))})")
    if reply.get("user", device) != device:
        raise ForbiddenError("the reply names another user than the device whose credential sent it")
    check_json_value(reply, "a reply", max_depth=34, max_nodes=(1 << 17) + 64)
    if reply.get("query") != query.id:
        raise ValidationError("the reply's query id is not the query it was sent for")
    try:
        text = json.dumps(reply, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"a reply is plain JSON (no NaN or infinity): {exc}") from exc
    if len(text) > MAX_REPLY_BYTES:
        raise ValidationError(f"a reply of {len(text)} bytes: at most {MAX_REPLY_BYTES}")
    out: dict[str, Any] = {"query": query.id, "user": device, "status": reply.get("status")}
    if out["status"] == "ok":
        c = reply.get("cost")
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isclose(
                float(c), cost, rel_tol=1e-9, abs_tol=1e-12):
            raise ValidationError(f"cost = {str(c)[:30]}: the query's cost(T) is {cost!r}")
        if not is_output(reply.get("result")):
            raise ValidationError("the result is not an output of the query's randomiser T")
        if "reason" in reply:
            raise ValidationError("an answered reply has no reason")
        out["cost"] = float(c)
    elif out["status"] == "rejected":
        reason = reply.get("reason", "")
        if not isinstance(reason, str):
            raise ValidationError("a rejection's reason is text")
        out["reason"] = reason
        if "cost" in reply:
            raise ValidationError("a rejected reply charged nothing: it has no cost")
    else:
        raise ValidationError(f"status = {str(out['status'])[:20]!r}: 'ok' or 'rejected'")
    out["result"] = reply.get("result")
    return out
