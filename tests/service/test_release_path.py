"""The release path of a query: its response is built at the cutoff, before the deadline, on
every path (an answer, a refusal), so that at the deadline it only has to be written; the
owner's trace (``DPRIVACY_SERVICE_TRACE``) records when its bytes were written."""

from __future__ import annotations

import json
import time

import pytest

import dprivacy.service.app as app_module
from dprivacy.errors import BudgetExceededError
from dprivacy.remote import connect
from tests.service.conftest import KEYS


def test_responses_are_built_before_the_deadline_and_their_writes_traced(start, tmp_path,
                                                                          monkeypatch):
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("DPRIVACY_SERVICE_TRACE", str(trace))
    built: list[tuple[float, int]] = []

    class Recorded(app_module.JSONResponse):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            built.append((time.monotonic(), self.status_code))

    monkeypatch.setattr(app_module, "JSONResponse", Recorded)
    srv = start(query_seconds=0.3)
    v = connect(srv.url, key=KEYS["alice"]).table("visits")
    assert abs(v.noisy_count(0.5) - 200) < 40          # a real answer
    with pytest.raises(BudgetExceededError):           # a refusal, at the same deadline
        v.noisy_count(5.0)
    t_end = time.monotonic() + 5
    while time.monotonic() < t_end and (not trace.exists()
                                        or len(trace.read_text().splitlines()) < 2):
        time.sleep(0.02)  # the trace is appended a little after each response is written
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    assert [r["refused"] for r in recs] == [False, True]
    for rec in recs:
        assert rec["arrived"] < rec["cutoff"] < rec["deadline"] <= rec["released"] \
            <= rec["written"]
        # this query's response (200 or 409) was built between its cutoff and its deadline
        mine = [s for t, s in built if rec["cutoff"] <= t < rec["deadline"]]
        assert mine == [409 if rec["refused"] else 200]
