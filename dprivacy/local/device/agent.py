"""The user agent: Paper IV Algorithm 1 (User Procedure) on the user's own machine.

For a query ⟨t, pre, T, post⟩ the agent

1. replays the stored reply if it answered this query id before, in this process or any other
   on the same ledger, before or after a restart (no new cost, no fresh randomness);
2. prices T (``cost(T)``, Def. 3) and applies the **public policy** (data-independent): fields,
   time and memory bounds, analyst code allowed, per-query cost cap;
3. charges the cost to every covering personal budget (total / per field / per event) in one
   durable all-or-nothing ledger transaction that also records the query id as answered; if any
   budget cannot pay, it refuses and nothing is charged. No data is touched before this commit;
4. runs the **private policy** (may read the data; on "reject" a random dummy enters pre),
   ``pre`` (a builtin, or analyst code in the sandbox with the query's time and memory bounds),
   **domain enforcement** (an output outside T's domain, an error, a time-out or an exhausted
   memory bound becomes a uniformly random element of T's domain), and ``T``; with ``pad=True``
   this block always lasts ``t`` seconds;
5. stores the reply with the charge and replies **T's output itself**.

``post`` does not run on the device: the analyst runs it on the replies
(:func:`dprivacy.local.postprocess.apply_post`). Nothing the analyst wrote runs on the device
after ``pre``, so nothing can read back what ``pre`` left in state the sandbox does not isolate
(the page cache, for one); the reply is exactly ``{query, user, status, cost, result}`` with
``result`` an output of T. ``pre`` receives the public seed ``derive_seed(query.seed, user)``.

What the analyst sees (reply, status, rejection reason, timing) depends on the data only
through T's output. Privacy condition: the user's loss is at most the sum of the costs charged
to their budgets (Paper IV Prop. 2 and Theorems 1-3).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dprivacy.errors import DPrivacyError, ValidationError
from dprivacy.local.builtins import PRES, derive_seed
from dprivacy.local.device.budget import PersonalBudget
from dprivacy.local.device.policy import PublicPolicy
from dprivacy.local.device.sandbox import PAD_SLACK, Sandbox, SandboxUnavailableError
from dprivacy.local.query import Query
from dprivacy.noise import resolve_rng

__all__ = ["UserAgent"]

log = logging.getLogger(__name__)


class UserAgent:
    """One user's agent (Paper IV Alg. 1).

    Parameters
    ----------
    user : str
        The user's public id.
    data : mapping field -> JSON value
        The private data.
    budget : PersonalBudget
        Durable personal budgets (total, per field, per event).
    policy : PublicPolicy
        Data-independent accept/reject rules.
    private_policy : callable(Query, data) -> bool, optional
        May read the data; False feeds a random dummy to ``pre`` instead of the data.
    domains : mapping field -> sequence, optional
        Value domain of each field, used to draw the dummy; without it the dummy is a random
        element of T's domain.
    sandbox : Sandbox, None or "auto"
        Where analyst code runs. ``"auto"`` builds a bubblewrap sandbox and, if none works,
        refuses analyst code (never runs it unsandboxed). None refuses analyst code.
    pad : bool
        Make the data-touching block last exactly the query's ``t`` seconds (timing channel).
    reject : callable(Query, reason) -> JSON, optional
        What a rejection returns (default None).
    rng : numpy Generator, int or None
        Randomness of T and the dummy (default: seeded from the OS; seeds are for simulations).

    Examples
    --------
    >>> from dprivacy.local import MatrixRandomiser, Query, Code
    >>> T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=[True, False], outputs=[True, False])
    >>> a = UserAgent("u1", {"smoker": True}, PersonalBudget(":memory:", "u1", total=2.0),
    ...               sandbox=None, pad=False, rng=0)
    >>> r = a.handle(Query("q1", T, Code.builtin("field"), fields=("smoker",)))
    >>> r["status"], r["result"] in (True, False)
    ('ok', True)
    >>> a.handle(Query("q2", T, Code.builtin("field"), fields=("smoker",)))["status"]
    'rejected'
    """

    def __init__(self, user: str, data: Mapping[str, Any], budget: PersonalBudget, *,
                 policy: PublicPolicy | None = None,
                 private_policy: Callable[[Query, Mapping[str, Any]], bool] | None = None,
                 domains: Mapping[str, Sequence[Any]] | None = None,
                 sandbox: Sandbox | None | str = "auto", pad: bool = True,
                 reject: Callable[[Query, str], Any] | None = None,
                 rng: np.random.Generator | int | None = None) -> None:
        if not isinstance(data, Mapping) or not data:
            raise ValidationError("data must be a non-empty mapping of field -> value")
        if not isinstance(budget, PersonalBudget):
            raise ValidationError("budget must be a PersonalBudget")
        self.user = str(user)
        self._data = dict(data)
        self.schema = frozenset(self._data)
        self.budget = budget
        self.policy = policy or PublicPolicy()
        self.private_policy = private_policy
        self.domains = {k: list(v) for k, v in (domains or {}).items()}
        for k, v in self.domains.items():
            if not v:
                raise ValidationError(f"domains[{k!r}] is empty: a dummy needs at least one value")
        if sandbox == "auto":
            try:
                sandbox = Sandbox(pad=False)
            except SandboxUnavailableError as exc:
                log.warning("no sandbox: analyst code will be refused (%s)", exc)
                sandbox = None
        elif sandbox is not None and not isinstance(sandbox, Sandbox):
            raise ValidationError("sandbox must be a Sandbox, None or 'auto'")
        self.sandbox = sandbox
        self.pad = bool(pad)
        self.reject = reject
        self._rng = resolve_rng(secrets.randbits(128) if rng is None else rng)
        self.history: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ public procedure
    def handle(self, query: Query | Mapping[str, Any]) -> dict[str, Any]:
        """Answer one query (Algorithm 1); returns the reply ``{query, user, status, cost, result}``.

        Never raises on a bad or hostile query: a malformed or refused query gets
        ``status="rejected"`` with a public reason and charges nothing.
        """
        qid = str(query.id if isinstance(query, Query) else (query or {}).get("id", ""))
        if qid and qid in self.history:
            return self.history[qid]
        if qid:
            done = self._replay(qid)
            if done is not None:
                return done
        try:
            q = query if isinstance(query, Query) else Query.from_dict(query)
            c = q.T.cost()
        except (DPrivacyError, ValueError, TypeError, KeyError) as exc:
            return self._rejected(qid, f"malformed query: {exc}", None)
        reason = self.policy.check(q, c, self.schema) or self._code_problem(q)
        if reason is None:
            charged = self.budget.charge_query(q.id, c, fields=q.fields, event=q.event,
                                               label=f"{self.user}:{q.id}")
            if charged == "answered":  # another process on this ledger answered it meanwhile
                return self._replay(q.id) or self._rejected(q.id, "already answered", None)
            if charged == "refused":
                reason = "personal budget exhausted"
        if reason is not None:
            return self._rejected(q.id, reason, q)
        z = self._randomise(q)  # the budget is committed: from here on no refusal, no error
        reply = {"query": q.id, "user": self.user, "status": "ok", "cost": c, "result": z}
        try:
            self.budget.store_reply(q.id, reply)
        except Exception as exc:  # noqa: BLE001 (a restart then says the reply was lost)
            log.warning("query %s: the reply could not be stored (%s)", q.id, type(exc).__name__)
        self.history[q.id] = reply
        return reply

    def _replay(self, qid: str) -> dict[str, Any] | None:
        """The stored reply of an answered query id, a refusal if its reply was lost, else None."""
        charged, reply = self.budget.answered(qid)
        if not charged:
            return None
        if reply is None:  # charged, then stopped before storing: never answer it a second time
            return self._rejected(qid, "already answered (its reply was lost when the agent stopped)",
                                  None)
        self.history[qid] = reply
        return reply

    def remaining(self) -> dict[str, float]:
        """Remaining personal budgets (public state)."""
        return self.budget.remaining()

    # ------------------------------------------------------------------ steps
    def _code_problem(self, q: Query) -> str | None:
        if q.pre.is_builtin and q.pre.name not in PRES:
            return f"unknown builtin {q.pre.name!r}"
        if q.needs_sandbox and self.sandbox is None:
            return "no working sandbox on this device: analyst code is refused"
        return None

    def _rejected(self, qid: str, reason: str, q: Query | None) -> dict[str, Any]:
        result = None
        if self.reject is not None and q is not None:
            try:
                result = self.reject(q, reason)
            except Exception:  # noqa: BLE001 (the user's function; its failure is public-only)
                result = None
        return {"query": qid, "user": self.user, "status": "rejected", "reason": reason,
                "result": result}

    def _dummy(self, q: Query) -> dict[str, Any] | None:
        if all(f in self.domains for f in q.fields):
            return {f: self.domains[f][int(self._rng.integers(len(self.domains[f])))] for f in q.fields}
        return None

    def _randomise(self, q: Query) -> Any:
        """Private policy, pre, domain enforcement and T, padded to ``q.t + PAD_SLACK`` seconds.

        Sandboxed code gets what is left of ``q.t`` (it is killed by then); the slack hides the
        kill, so a ``pre`` that runs into the bound takes as long as one that returns.
        """
        start = time.monotonic()
        try:
            use_data = True
            if self.private_policy is not None:
                try:
                    use_data = bool(self.private_policy(q, self._data))
                except Exception:  # noqa: BLE001
                    use_data = False
            pre_in = {f: self._data[f] for f in q.fields} if use_data else self._dummy(q)
            v: Any = None
            if pre_in is not None:
                ok, v = self._pre(q, pre_in, q.t - (time.monotonic() - start))
                if not ok:
                    v = None
            try:
                inside = q.T.contains(v)
            except Exception:  # noqa: BLE001
                inside = False
            if not inside:
                v = q.T.random_input(self._rng)
            return q.T.apply(v, self._rng)
        finally:
            if self.pad:
                left = q.t + PAD_SLACK - (time.monotonic() - start)
                if left > 0:
                    time.sleep(left)

    def _pre(self, q: Query, data: dict[str, Any], seconds: float) -> tuple[bool, Any]:
        """Run ``pre`` on ``data``: a builtin, or analyst code in the sandbox bounded by ``seconds``;
        (False, None) on any failure."""
        params, seed = dict(q.params), derive_seed(q.seed, self.user)
        try:
            if q.pre.is_builtin:
                return True, PRES[str(q.pre.name)](data, params, seed, self._rng)
            assert self.sandbox is not None and q.pre.source_code is not None
            if seconds <= 0:
                return False, None
            out = self.sandbox.run(q.pre.source_code, q.pre.entry, [data, params, seed],
                                   time_limit=float(seconds), memory_mb=q.memory_mb, pad=False)
            if not out.ok:
                log.debug("query %s: pre failed (%s)", q.id, out.reason)
            return out.ok, out.value
        except Exception as exc:  # noqa: BLE001 (any failure is mapped, never revealed)
            log.debug("query %s: pre failed (%s)", q.id, type(exc).__name__)
            return False, None
