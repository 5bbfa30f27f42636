"""The user agent: Paper IV Algorithm 1 (User Procedure) on the user's own machine.

For a query ⟨t, pre, T, post⟩ the agent

1. replays the stored reply if it answered this query id before, in this process or any other
   on the same ledger, before or after a restart (no new cost, no fresh randomness);
2. prices T (``cost(T)``, Def. 3) and applies the **public policy** (data-independent): fields,
   time and memory bounds, analyst code allowed, per-query cost cap;
3. charges the cost to every covering personal budget in one durable all-or-nothing ledger
   transaction that also records the query id as answered; if any budget cannot pay, it
   refuses and nothing is charged. No data is touched before this commit. A query with
   builtin ``pre`` is charged to the total, its fields' and its event's budgets; a query with
   analyst code to the total and to *every* field and event budget, because analyst code can
   pass what it saw to a later ``pre`` through kernel state no sandbox clears (the page cache);
4. runs the **private policy** (may read the data; on "reject" a random dummy enters pre),
   ``pre`` (a builtin, or analyst code in the sandbox with the query's time and memory bounds,
   whose output is reduced to an element of T's domain inside the sandbox), **domain
   enforcement** (an output outside T's domain, an error, a time-out or an exhausted memory
   bound becomes a uniformly random element of T's domain), and ``T``. With ``pad=True`` the
   whole step, from the call of :meth:`UserAgent.handle` to its return, lasts
   :func:`~dprivacy.local.device.schedule.step_seconds` of the query; a step not done by then
   returns the default, T of a random domain element drawn before the data was read;
5. stores the reply with the charge and replies **T's output itself**.

``post`` does not run on the device: the analyst runs it on the replies
(:func:`dprivacy.local.postprocess.apply_post`). Nothing the analyst wrote runs on the device
after ``pre`` of the same query; the reply is exactly ``{query, user, status, cost, result}``
with ``result`` an output of T. ``pre`` receives the public seed ``derive_seed(query.seed, user)``.

What the analyst sees (reply, status, rejection reason, timing) depends on the data only
through T's output. Privacy condition: the user's loss is at most the sum of the costs charged
to their budgets (Paper IV Prop. 2 and Theorems 1-3).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dprivacy.errors import ValidationError
from dprivacy.local.builtins import PRES, derive_seed
from dprivacy.local.device.budget import PersonalBudget
from dprivacy.local.device.policy import PublicPolicy
from dprivacy.local.device.reduce import domain_spec
from dprivacy.local.device.sandbox import PAD_SLACK, Sandbox, SandboxUnavailableError
from dprivacy.local.device.schedule import STEP_BUDGET, step_seconds, t_bound
from dprivacy.local.limits import DEFAULT_LIMITS, fit_refusal
from dprivacy.local.query import Query
from dprivacy.local.randomiser import MatrixRandomiser
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
        Make every answered step last exactly :func:`step_seconds` of its query, from the moment
        :meth:`handle` starts to the moment it returns (timing channel).
    step_budget : float
        Seconds of the schedule for the agent's own work (parsing, pricing, the ledger, reading
        the sandbox's record); default :data:`dprivacy.local.device.schedule.STEP_BUDGET`.
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
                 step_budget: float = STEP_BUDGET,
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
        if not (isinstance(step_budget, (int, float)) and 0 < step_budget <= 60):
            raise ValidationError(f"step_budget = {step_budget!r}: seconds in (0, 60]")
        self.step_budget = float(step_budget)
        self.reject = reject
        self._rng = resolve_rng(secrets.randbits(128) if rng is None else rng)
        self.history: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ public procedure
    def handle(self, query: Query | Mapping[str, Any]) -> dict[str, Any]:
        """Answer one query (Algorithm 1); returns the reply ``{query, user, status, cost, result}``.

        Never raises on a bad or hostile query: a malformed or refused query gets
        ``status="rejected"`` with a public reason and charges nothing. With ``pad=True`` an
        answered query's output is ready :func:`step_seconds` after this call started, whatever
        ``pre`` did (it is then stored in the ledger and returned); a step not done by then
        returns the default (T of a random domain element drawn before the data was read).
        """
        start = time.monotonic()
        raw_id = query.id if isinstance(query, Query) else \
            (query.get("id", "") if isinstance(query, Mapping) else "")
        qid = raw_id if isinstance(raw_id, str) and len(raw_id) <= DEFAULT_LIMITS.max_id else ""
        if qid and qid in self.history:
            return self.history[qid]
        try:
            if qid:
                done = self._replay(qid)
                if done is not None:
                    return done
            q = query if isinstance(query, Query) else Query.from_dict(query)
            c = q.T.cost()
            reason = self.policy.check(q, c, self.schema) or self._code_problem(q)
        except Exception as exc:  # noqa: BLE001 (any failure on a hostile query is a refusal)
            return self._rejected(qid, f"malformed query: {type(exc).__name__}: {exc}", None)
        if reason is None:
            charged = self.budget.charge_query(q.id, c, fields=q.fields, event=q.event,
                                               label=f"{self.user}:{q.id}", code=q.needs_sandbox)
            if charged == "answered":  # another process on this ledger answered it meanwhile
                return self._replay(q.id) or self._rejected(q.id, "already answered", None)
            if charged == "refused":
                reason = "personal budget exhausted"
        if reason is not None:
            return self._rejected(q.id, reason, q)
        # the budget is committed: from here on no refusal, no error
        z = self._scheduled(q, start + step_seconds(q, self.step_budget)) if self.pad else \
            self._randomise(q, self._rng, None)
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
        return fit_refusal({"query": qid, "user": self.user, "status": "rejected",
                            "reason": reason, "result": result})

    def _dummy(self, q: Query, rng: np.random.Generator) -> dict[str, Any] | None:
        if all(f in self.domains for f in q.fields):
            return {f: self.domains[f][int(rng.integers(len(self.domains[f])))] for f in q.fields}
        return None

    def _scheduled(self, q: Query, deadline: float) -> Any:
        """T's output at ``deadline`` exactly: the step's, or the default if it is not done.

        The default (T of a uniformly random domain element) is drawn before any data is read.
        The step runs in a worker thread with its own generator; a late step's result is dropped
        (its sandboxed ``pre`` is killed at its own bound).
        """
        seeds = self._rng.integers(0, 2**63, size=2)
        fallback_rng, step_rng = np.random.default_rng(seeds[0]), np.random.default_rng(seeds[1])
        default = q.T.apply(q.T.random_input(fallback_rng), fallback_rng)
        box: list[Any] = []
        finished = threading.Event()

        def work() -> None:
            try:
                box.append(self._randomise(q, step_rng, deadline))
            except BaseException as exc:  # noqa: BLE001 (the default answers instead)
                log.debug("query %s: the step failed (%s)", q.id, type(exc).__name__)
            finally:
                finished.set()

        threading.Thread(target=work, name=f"step-{q.id[:40]}", daemon=True).start()
        finished.wait(max(0.0, deadline - time.monotonic()))
        left = deadline - time.monotonic()
        if left > 0:
            time.sleep(left)
        if box:
            return box[0]
        log.warning("query %s: the step overran its schedule; the default reply leaves", q.id)
        return default

    def _randomise(self, q: Query, rng: np.random.Generator, deadline: float | None) -> Any:
        """Private policy, pre, domain enforcement and T.

        A sandboxed ``pre`` gets what is left of ``q.t`` (and never more than the schedule
        leaves it before ``deadline``); its output is reduced to T's domain inside the sandbox.
        """
        start = time.monotonic()
        use_data = True
        if self.private_policy is not None:
            try:
                use_data = bool(self.private_policy(q, self._data))
            except Exception:  # noqa: BLE001
                use_data = False
        pre_in = {f: self._data[f] for f in q.fields} if use_data else self._dummy(q, rng)
        v: Any = None
        if pre_in is not None:
            seconds = q.t - (time.monotonic() - start)
            if deadline is not None:
                seconds = min(seconds, deadline - time.monotonic() - PAD_SLACK - t_bound(q.T)
                              - self.step_budget / 2)
            ok, v = self._pre(q, pre_in, seconds, rng)
            if not ok:
                v = None
        try:
            inside = q.T.contains(v)
        except Exception:  # noqa: BLE001
            inside = False
        if not inside:
            v = q.T.random_input(rng)
        return q.T.apply(v, rng)

    def _pre(self, q: Query, data: dict[str, Any], seconds: float,
             rng: np.random.Generator) -> tuple[bool, Any]:
        """Run ``pre`` on ``data``: a builtin, or analyst code in the sandbox bounded by
        ``seconds`` and reduced there to an element of T's domain; (False, None) on any failure."""
        params, seed = dict(q.params), derive_seed(q.seed, self.user)
        try:
            if q.pre.is_builtin:
                return True, PRES[str(q.pre.name)](data, params, seed, rng)
            assert self.sandbox is not None and q.pre.source_code is not None
            if seconds <= 0:
                return False, None
            out = self.sandbox.run_reduced(q.pre.source_code, q.pre.entry, [data, params, seed],
                                           domain_spec(q.T), time_limit=float(seconds),
                                           memory_mb=q.memory_mb)
            if not out.ok:
                log.debug("query %s: pre failed (%s)", q.id, out.reason)
                return False, None
            if isinstance(q.T, MatrixRandomiser):
                assert q.T.inputs is not None  # set by the randomiser
                return True, q.T.inputs[int(out.value)]
            return True, out.value
        except Exception as exc:  # noqa: BLE001 (any failure is mapped, never revealed)
            log.debug("query %s: pre failed (%s)", q.id, type(exc).__name__)
            return False, None
