"""The pre → post covert channel through the page cache no longer reaches the analyst.

The attack (issue 21): ``pre`` sees a user's 4-digit PIN, evicts a file every sandbox can read
and reads back one page per 1-bit of the PIN; ``post``, run after it on the same device, probes
which pages are cached (``RWF_NOWAIT`` reads fail on pages that are not) and returns the PIN,
whatever T is. Namespaces do not isolate the page cache, so the channel works between any two
sandboxed calls (checked first, so the test would fail if the device still ran ``post``). The
agent now runs only ``pre`` and T and replies T's output, checked against the reply schema.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprivacy.local import Code, MatrixRandomiser, PersonalBudget, Query, Sandbox, UserAgent
from dprivacy.local.case_studies import rr_matrix
from dprivacy.local.postprocess import REPLY_KEYS, reply_problem
from tests.local.sandbox_support import make_sandbox

PINS = (1234, 9876, 5555, 1, 8191)

PRE = """
import os
def pre(d, p, s):
    fd = os.open(p['file'], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # evict the shared file
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)     # no read-ahead: one page per read
    for i in range(14):
        if int(d['pin']) >> i & 1:
            os.pread(fd, 1, (4 * i + 8) * 4096)
    return 'a'                                          # T's input says nothing
"""

POST = """
import os
def post(z, p, s):
    fd = os.open(p['file'], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    pin = 0
    for i in range(14):
        try:
            os.preadv(fd, [bytearray(1)], (4 * i + 8) * 4096, os.RWF_NOWAIT)
            pin |= 1 << i                               # cached: pre touched it
        except BlockingIOError:
            pass
    return pin
"""


@pytest.fixture(scope="module")
def shared_file(sandbox: Sandbox) -> str:
    out = sandbox.run("import pydoc_data.topics as t\ndef f():\n    return t.__file__", "f", [],
                      time_limit=10.0)
    assert out.ok, out.reason
    return str(out.value)


def test_the_channel_exists_between_two_sandboxed_calls(sandbox: Sandbox, shared_file: str) -> None:
    """What a device that ran ``post`` after ``pre`` would have leaked: the PINs, exactly."""
    got = []
    for pin in PINS:
        assert sandbox.run(PRE, "pre", [{"pin": pin}, {"file": shared_file}, None], time_limit=10.0).ok
        out = sandbox.run(POST, "post", ["a", {"file": shared_file}, None], time_limit=10.0)
        got.append(out.value if out.ok else None)
    assert sum(g == p for g, p in zip(got, PINS, strict=True)) >= 4, got  # one may lose a page


def test_the_device_runs_only_pre_and_replies_t_output(shared_file: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    sb = make_sandbox(pad=False)
    entries: list[str] = []
    run = sb.run_reduced

    def recording_run(code: str, entry: str, args: list, spec: dict, **kw):  # noqa: ANN202
        entries.append(entry)
        return run(code, entry, args, spec, **kw)

    monkeypatch.setattr(sb, "run_reduced", recording_run)
    monkeypatch.setattr(sb, "run", None)  # the agent runs analyst code only through run_reduced
    T = MatrixRandomiser(rr_matrix(1.0, 2), inputs=["a", "b"], outputs=["a", "b"])  # noqa: N806
    q = Query("pin", T, Code.source(PRE), Code.source(POST, entry="post"), fields=("pin",), t=5.0,
              params={"file": shared_file})
    replies = []
    for k, pin in enumerate(PINS):
        agent = UserAgent(f"user{k}", {"pin": pin}, PersonalBudget(":memory:", f"user{k}", total=2.0),
                          sandbox=sb, pad=False, rng=np.random.default_rng(7))
        replies.append(agent.handle(q))
    assert entries == ["pre"] * len(PINS)  # nothing the analyst wrote ran after pre
    for r in replies:
        assert set(r) == REPLY_KEYS and reply_problem(q, r) is None
        assert r["result"] in ("a", "b")
    # the same T randomness gives the same reply whatever the PIN: the reply is T('a')
    assert len({(r["status"], r["cost"], r["result"]) for r in replies}) == 1
