"""``pre``'s output is reduced to T's domain inside the sandbox, and the step keeps its schedule."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dprivacy.local import Code, MatrixRandomiser, PersonalBudget, ProductRandomiser, Query, UserAgent
from dprivacy.local.device.reduce import MARK, decode, domain_spec, record_size
from dprivacy.local.device.sandbox import Sandbox
from dprivacy.local.device.schedule import step_seconds

LABELS = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=["yes", {"a": [1, 2.5]}],
                          outputs=["yes", "no"])
BITS = ProductRandomiser([[0.75, 0.25], [0.25, 0.75]], length=4, domain="one_hot")


@pytest.mark.parametrize(("body", "want"), [
    ("return 'yes'", 0),
    ("return {'a': (1, 2.5)}", 1),          # tuples read as JSON lists, as json.dumps would
    ("return 'no'", None),
    ("return {'a': [1, 2.5], 'b': 0}", None),
    ("return float('nan')", None),
    ("return object()", None),
    ("raise ValueError('x')", None),
    ("x = []\n    for _ in range(100000):\n        x = [x]\n    return x", None),
    ("return 'y' * 10**7", None),
    ("return 10 ** 100000", None),
])
def test_labels_are_reduced_inside(sandbox: Sandbox, body: str, want: int | None) -> None:
    code = f"def pre(d, p, s):\n    {body}\n"
    t0 = time.monotonic()
    out = sandbox.run_reduced(code, "pre", [{}, {}, None], domain_spec(LABELS), time_limit=10.0)
    assert (out.value if out.ok else None) == want, out
    assert time.monotonic() - t0 < 5.0


@pytest.mark.parametrize(("value", "want"), [
    ("[0, 0, 1, 0]", [0, 0, 1, 0]), ("(0, 1, 0, 0)", [0, 1, 0, 0]), ("[0, 1, 1, 0]", None),
    ("[0, 0, 1]", None), ("[0, 0, True, 0]", None), ("[0, 0, 2, 0]", None), ("'0010'", None),
])
def test_vectors_are_reduced_inside(sandbox: Sandbox, value: str, want: list[int] | None) -> None:
    out = sandbox.run_reduced(f"def pre(d, p, s):\n    return {value}\n", "pre", [{}, {}, None],
                              domain_spec(BITS), time_limit=10.0)
    assert (out.value if out.ok else None) == want, out


def test_what_the_analyst_prints_or_forges_is_not_read(sandbox: Sandbox) -> None:
    spec = domain_spec(LABELS)
    noisy = "import os, sys\ndef pre(d, p, s):\n    print('x' * 100000)\n    os.write(2, b'junk')\n" \
            "    return 'yes'\n"
    assert sandbox.run_reduced(noisy, "pre", [{}, {}, None], spec, time_limit=10.0).value == 0
    # code that writes its own record to the result descriptor first only chooses the value
    forged = "import os\ndef pre(d, p, s):\n    for fd in range(3, 10):\n        try:\n" \
             "            os.write(fd, b'\\x1eRD00000001')\n        except OSError:\n" \
             "            pass\n    return 'yes'\n"
    out = sandbox.run_reduced(forged, "pre", [{}, {}, None], spec, time_limit=10.0)
    assert not out.ok or out.value in (0, 1)


def test_decode_reads_only_a_well_formed_record() -> None:
    spec = domain_spec(LABELS)
    assert record_size(spec) == len(MARK) + 9
    assert decode(MARK + b"D00000001", spec) == 1
    for raw in (b"", MARK + b"N", MARK + b"D00000002", MARK + b"D0000000g", MARK + b"D000000001",
                b"xxD00000001", MARK + b"D\xff0000001"):
        assert decode(raw, spec) is None
    vs = domain_spec(BITS)
    assert decode(MARK + b"D0000000000010000", vs) == [0, 0, 1, 0]
    assert decode(MARK + b"D0000000100010000", vs) is None   # two ones: not one-hot
    assert decode(MARK + b"D0000000000020000", vs) is None   # row 2 of a 2-row matrix


def _agent(tmp_path: Path, **kw) -> UserAgent:
    return UserAgent("u", {"smoker": "yes"}, PersonalBudget(tmp_path / "l.sqlite", "u", total=100.0),
                     sandbox=None, pad=True, step_budget=0.1, rng=0, **kw)


def _q(qid: str) -> Query:
    return Query(qid, LABELS, Code.builtin("field"), fields=("smoker",), t=0.2)


def test_a_step_lasts_its_schedule(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    t0 = time.monotonic()
    assert a.handle(_q("fast"))["status"] == "ok"
    took = time.monotonic() - t0
    assert step_seconds(_q("fast"), 0.1) <= took < step_seconds(_q("fast"), 0.1) + 0.15


def test_an_overrunning_step_replies_its_default_on_time(tmp_path: Path) -> None:
    def slow_policy(q: Query, data: dict) -> bool:
        time.sleep(2.0)
        return True

    a = _agent(tmp_path, private_policy=slow_policy)
    t0 = time.monotonic()
    r = a.handle(_q("slow"))
    took = time.monotonic() - t0
    assert r["status"] == "ok" and r["result"] in ("yes", "no")  # T of a random domain element
    assert step_seconds(_q("slow"), 0.1) <= took < step_seconds(_q("slow"), 0.1) + 0.15
