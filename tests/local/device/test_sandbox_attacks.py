"""Attacks on the sandbox from inside, each run for real: every one must fail.

Reading the agent's environment, writing global kernel settings as root, ptrace/mount/unshare
and the other denied system calls, fork bombs and memory spread over children or threads.
A write that could succeed writes back the value it read, so even a failing defence changes
nothing on the machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dprivacy.local import Sandbox
from dprivacy.local.device.seccomp import DENIED, filter_program
from tests.local.sandbox_support import make_sandbox

ARGS: list = [{}, {}, None]


def _run(sb: Sandbox, code: str, memory_mb: int = 256) -> object:
    out = sb.run(code, "f", ARGS, time_limit=8.0, memory_mb=memory_mb)
    assert out.ok, out.reason
    return out.value


def test_the_agents_environment_is_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPRIVACY_AGENT_SECRET", "hunter2-secret")
    sb = make_sandbox(pad=False)  # started after the secret entered the agent's environment
    code = (
        "import os\n"
        "def f(d, p, s):\n"
        "    pids = sorted(x for x in os.listdir('/proc') if x.isdigit())\n"
        "    seen = {x: open(f'/proc/{x}/environ', 'rb').read().decode() for x in pids}\n"
        "    seen['cmdline'] = open('/proc/1/cmdline', 'rb').read().decode()\n"
        "    return {'pids': pids, 'me': os.getpid(), 'env': dict(os.environ), 'seen': seen}\n"
    )
    v = _run(sb, code)
    assert v["pids"] == ["1"] and v["me"] == 1  # the interpreter is PID 1: no init, no agent
    assert "hunter2-secret" not in json.dumps(v)
    assert set(v["env"]) <= {"PATH", "PYTHONHASHSEED", "PWD", "LC_CTYPE"}
    assert os.environ["DPRIVACY_AGENT_SECRET"] == "hunter2-secret"  # it was there to steal


def test_never_root_inside_and_kernel_settings_read_only() -> None:
    sb = make_sandbox(pad=False)
    before = open("/proc/sys/kernel/core_pattern").read()
    code = (
        "import os\n"
        "def f(d, p, s):\n"
        "    lines = open('/proc/self/status').read().splitlines()\n"
        "    st = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
        "    out = {'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),\n"
        "           'caps': [st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],\n"
        "           'no_new_privs': st['NoNewPrivs'].strip(), 'seccomp': st['Seccomp'].strip()}\n"
        "    for path in ('/proc/sys/kernel/core_pattern', '/proc/sys/kernel/hostname'):\n"
        "        try:\n"
        "            old = open(path).read()\n"
        "            with open(path, 'w') as fh:\n"
        "                fh.write(old)\n"
        "            out[path] = 'written'\n"
        "        except OSError as e:\n"
        "            out[path] = e.errno\n"
        "    return out\n"
    )
    v = _run(sb, code)
    assert v["uid"] == v["gid"] == 65534 and v["uid"] != 0
    assert v["caps"] == ["0000000000000000"] * 5
    assert v["no_new_privs"] == "1" and v["seccomp"] == "2"  # 2: a filter is installed
    import errno
    assert v["/proc/sys/kernel/core_pattern"] in (errno.EROFS, errno.EACCES)
    assert v["/proc/sys/kernel/hostname"] in (errno.EROFS, errno.EACCES)
    assert open("/proc/sys/kernel/core_pattern").read() == before


SYSCALLS = {
    # name: Python expression run inside; each would succeed, or fail otherwise, without the filter
    "ptrace": "libc.ptrace(0, 0, 0, 0)",  # PTRACE_TRACEME: allowed to any process by default
    "mount": "libc.mount(b'none', b'/proc', b'tmpfs', 0, None)",
    "unshare": "libc.unshare(0x10000000)",  # CLONE_NEWUSER
    "keyctl": "libc.syscall(250, 0, -3, 0)",  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": "libc.syscall(248, b'user', b'dprivacy', b'x', 1, -3)",
    "request_key": "libc.syscall(249, b'user', b'dprivacy', None, -3)",
    "perf_event_open": "libc.syscall(298, ctypes.create_string_buffer(128), 0, -1, -1, 0)",
    "bpf": "libc.syscall(321, 0, ctypes.create_string_buffer(128), 128)",
    "fork": "libc.syscall(57)",
    "memfd_create": "libc.syscall(319, b'x', 0)",
    "io_uring_setup": "libc.syscall(425, 4, ctypes.create_string_buffer(120))",
}


def test_denied_system_calls_fail_with_eperm() -> None:
    sb = make_sandbox(pad=False)
    body = "".join(
        f"    out[{name!r}] = (({expr}), ctypes.get_errno())\n" for name, expr in SYSCALLS.items())
    code = (
        "import ctypes, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def f(d, p, s):\n"
        "    out = {}\n" + body +
        "    for fam, typ in ((socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW),\n"
        "                     (socket.AF_INET6, socket.SOCK_RAW)):\n"
        "        try:\n"
        "            socket.socket(fam, typ).close()\n"
        "            out[f'socket {fam} {typ}'] = (0, 0)\n"
        "        except OSError as e:\n"
        "            out[f'socket {fam} {typ}'] = (-1, e.errno)\n"
        "    socket.socket().close()  # an ordinary socket (in an empty network namespace) is fine\n"
        "    return out\n"
    )
    v = _run(sb, code)
    import errno
    assert set(v) >= set(SYSCALLS) and len(v) == len(SYSCALLS) + 3
    assert all(rc == -1 and err == errno.EPERM for rc, err in v.values()), v


def test_fork_bomb_and_memory_over_children_are_bounded_per_query() -> None:
    """The issue's attack: 64 MiB per process, yet 200 MiB held by 150 forked children."""
    sb = make_sandbox(pad=False)
    code = (
        "import os, threading, time\n"
        "def f(d, p, s):\n"
        "    forks = 0\n"
        "    for _ in range(150):\n"
        "        try:\n"
        "            pid = os.fork()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if pid == 0:\n"
        "            b = bytearray(40 << 20)\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        forks += 1\n"
        "    held, lock, threads = [], threading.Lock(), []\n"
        "    def grab():\n"
        "        try:\n"
        "            b = bytearray(20 << 20)\n"
        "            with lock:\n"
        "                held.append(b)\n"
        "        except MemoryError:\n"
        "            pass\n"
        "    for _ in range(40):\n"
        "        try:\n"
        "            t = threading.Thread(target=grab)\n"
        "            t.start()\n"
        "            threads.append(t)\n"
        "        except RuntimeError:\n"
        "            break\n"
        "    for t in threads:\n"
        "        t.join()\n"
        "    return {'forks': forks, 'threads': len(threads), 'held_mib': 20 * len(held)}\n"
    )
    v = _run(sb, code, memory_mb=128)
    assert v["forks"] == 0  # the query is one process: no child holds memory outside its bound
    assert v["held_mib"] < 128  # all threads share the query's one address-space bound
    assert v["threads"] <= 40


def test_filter_program_shape() -> None:
    """One deny pair per system call of each table, plus the arch check, clone3, clone and socket."""
    x86 = [v[0] for v in DENIED.values() if v[0] is not None]
    arm = [v[1] for v in DENIED.values() if v[1] is not None]
    assert len(set(x86)) == len(x86) and len(set(arm)) == len(arm)
    assert len(filter_program("x86_64")) == 8 * (6 + 2 * len(x86) + 2 + 5 + 7 + 1)
    assert len(filter_program("aarch64")) == 8 * (4 + 2 * len(arm) + 2 + 5 + 7 + 1)
    with pytest.raises(Exception, match="x86-64 and arm64 only"):
        filter_program("riscv64")


def _descendants() -> dict[int, int]:
    """pid -> real uid of every process descending from this one (read from the host's /proc)."""
    parent, uid = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = dict(line.split(":", 1) for line in open(f"/proc/{d}/status") if ":" in line)
            except OSError:
                continue
            parent[int(d)], uid[int(d)] = int(st["PPid"]), int(st["Uid"].split()[0])
    out, me = {}, os.getpid()
    for pid in parent:
        p = pid
        while p in parent and p not in (0, 1, me):
            p = parent[p]
        if p == me and pid != me:
            out[pid] = uid[pid]
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root agent has no other uid to give its calls")
def test_a_root_agent_runs_each_call_under_a_fresh_unprivileged_uid() -> None:
    import threading

    from dprivacy.local.device.sandbox import UID_BASE, UID_SPAN

    sb = make_sandbox(pad=False)
    seen: list[dict[int, int]] = []
    done = threading.Event()
    t = threading.Thread(target=lambda: (sb.run("import time\ndef f(d, p, s):\n    time.sleep(3)\n"
                                                "    return 1", "f", ARGS, time_limit=8.0), done.set()))
    t.start()
    while not done.is_set():
        kids = _descendants()
        if len(kids) >= 2:
            seen.append(kids)
        done.wait(0.1)
    t.join()
    assert seen, "the sandbox's processes were never seen"
    uids = {u for kids in seen for u in kids.values()}
    assert len(uids) == 1 and UID_BASE <= uids.pop() < UID_BASE + UID_SPAN


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root agent hands its calls another uid")
def test_a_root_agent_runs_a_bwrap_kept_in_a_private_folder(tmp_path: Path) -> None:
    """A project cloned into a 0700 folder: the calls' uid cannot reach the wheel's bwrap there,
    so the agent runs a root-owned copy that nobody else can write, and analyst code still runs."""
    import shutil

    from dprivacy.local.device.sandbox import bwrap_path

    src = bwrap_path()
    assert src is not None
    pkg = Path(os.path.realpath(src)).parent.parent
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shutil.copytree(pkg, private / pkg.name)
    libs = pkg.parent / (pkg.name + ".libs")
    if libs.is_dir():
        shutil.copytree(libs, private / libs.name)
    hidden = private / pkg.name / Path(src).parent.name / Path(src).name
    sb = make_sandbox(bwrap=str(hidden), pad=False)
    assert sb.bwrap != str(hidden)
    copy = Path(sb.bwrap)
    assert copy.stat().st_uid == 0 and not copy.stat().st_mode & 0o022
    assert copy.parent.stat().st_uid == 0 and not copy.parent.stat().st_mode & 0o022
    assert sb.run("def f(x):\n    return x * 2", "f", [21], time_limit=5.0).value == 42
