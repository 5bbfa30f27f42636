"""Attacks on the sandbox from inside, each run for real: every one must fail.

Reading the agent's environment, writing global kernel settings as root, ptrace/mount/unshare
and the other denied system calls, sockets of every family (vsock, netlink, packet, raw),
watching the machine (inotify, machine-wide /proc entries), fork bombs, threads beyond the cap
and memory spread over children or threads.
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
    # /proc/sys is masked by an empty read-only tmpfs: the files are not even there to write
    assert v["/proc/sys/kernel/core_pattern"] in (errno.ENOENT, errno.EROFS, errno.EACCES)
    assert v["/proc/sys/kernel/hostname"] in (errno.ENOENT, errno.EROFS, errno.EACCES)
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
    # watching the machine: a watch on a file under /usr sees every program that opens it
    "inotify_init1": "libc.inotify_init1(0)",
    "inotify_init": "libc.syscall(253)",
    "fanotify_init": "libc.syscall(300, 0, 0)",
    "sysinfo": "libc.sysinfo(ctypes.create_string_buffer(256))",
    "inotify_add_watch": "libc.syscall(254, -1, b'/usr', 0x20)",  # EBADF without the filter
    "fanotify_mark": "libc.syscall(301, -1, 1, 0x20, -100, b'/usr')",  # EBADF without the filter
    "fcntl F_NOTIFY": "libc.fcntl(os.open('/usr', os.O_RDONLY), 1026, 0x80000001)",
    "fcntl F_SETLEASE": "libc.fcntl(os.open('/usr/bin', os.O_RDONLY), 1024, 0)",
    "socketpair AF_INET": "libc.socketpair(2, 1, 0, ctypes.create_string_buffer(8))",
}


def test_denied_system_calls_fail_with_eperm() -> None:
    sb = make_sandbox(pad=False)
    body = "".join(
        f"    out[{name!r}] = (({expr}), ctypes.get_errno())\n" for name, expr in SYSCALLS.items())
    code = (
        "import ctypes, os, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def f(d, p, s):\n"
        "    out = {}\n" + body +
        "    for fam, typ in SOCKETS:\n"
        "        try:\n"
        "            socket.socket(fam, typ).close()\n"
        "            out[f'socket {fam} {typ}'] = (0, 0)\n"
        "        except OSError as e:\n"
        "            out[f'socket {fam} {typ}'] = (-1, e.errno)\n"
        "    a, b = socket.socketpair()  # an anonymous AF_UNIX pair (asyncio's) is fine\n"
        "    a.sendall(b'x')\n"
        "    assert b.recv(1) == b'x'\n"
        "    return out\n"
    ).replace("SOCKETS", repr(SOCKETS))
    v = _run(sb, code)
    import errno
    assert set(v) >= set(SYSCALLS) and len(v) == len(SYSCALLS) + len(SOCKETS)
    assert all(rc == -1 and err == errno.EPERM for rc, err in v.values()), v


#: (family, type) of sockets tried from inside: every family fails, the host-reaching ones included
#: (AF_VSOCK = 40 talks to the host or hypervisor with no network namespace in between,
#: AF_NETLINK = 16 reads kernel events, AF_PACKET = 17 and raw sockets read frames).
SOCKETS = [(40, 1), (40, 2), (16, 3), (16, 2), (17, 3), (2, 3), (10, 3), (2, 1), (2, 2), (10, 1),
           (1, 1), (1, 2), (38, 5)]


def test_vsock_cannot_hold_a_port_the_device_needs() -> None:
    """A sandboxed AF_VSOCK listener would hold a port on the host's vsock address space (no
    network namespace covers vsock); inside, the socket cannot even be created."""
    sb = make_sandbox(pad=False)
    code = (
        "import socket\n"
        "def f(d, p, s):\n"
        "    try:\n"
        "        v = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\n"
        "        v.bind((socket.VMADDR_CID_ANY, 40123))\n"
        "        v.listen(1)\n"
        "        return 'bound'\n"
        "    except OSError as e:\n"
        "        return e.errno\n"
    )
    import errno
    assert _run(sb, code) == errno.EPERM


def test_inotify_cannot_see_programs_run_outside() -> None:
    """A watch on the interpreter's own files would see the device run Python; the watch cannot
    be made, and the host opening those files meanwhile shows nothing inside."""
    import subprocess
    import sys
    import threading

    sb = make_sandbox(pad=False)
    target = os.path.realpath(sb.python)
    code = (
        "import ctypes, os, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def f(d, p, s):\n"
        f"    fd = libc.inotify_init1(os.O_NONBLOCK)\n"
        "    if fd < 0:\n"
        "        return ['no inotify', ctypes.get_errno()]\n"
        f"    w = libc.inotify_add_watch(fd, {target!r}.encode(), 0x20)  # IN_OPEN\n"
        "    time.sleep(1.5)\n"
        "    try:\n"
        "        return ['events', len(os.read(fd, 4096)), w]\n"
        "    except BlockingIOError:\n"
        "        return ['events', 0, w]\n"
    )
    out: list = []
    t = threading.Thread(target=lambda: out.append(_run(sb, code)))
    t.start()
    for _ in range(6):  # the host runs the same interpreter while the sandboxed code watches
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run(["cat", target], stdout=subprocess.DEVNULL, check=True)
    t.join()
    import errno
    assert out == [["no inotify", errno.EPERM]]


def test_machine_wide_proc_entries_are_masked() -> None:
    """Interrupt and CPU counters, memory and load figures, the boot id and every other
    machine-wide /proc entry read as nothing inside; the query's own /proc/self still works."""
    sb = make_sandbox(pad=False)
    probe = ["/proc/interrupts", "/proc/stat", "/proc/softirqs", "/proc/meminfo", "/proc/vmstat",
             "/proc/loadavg", "/proc/uptime", "/proc/locks", "/proc/diskstats", "/proc/cpuinfo",
             "/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/random/entropy_avail",
             "/proc/sys/fs/file-nr", "/proc/sys/fs/inode-nr", "/proc/pressure/cpu",
             "/proc/self/status"]
    code = (
        "import os\n"
        "def f(d, p, s):\n"
        "    out = {}\n"
        f"    for path in {probe!r}:\n"
        "        try:\n"
        "            with open(path, 'rb') as fh:\n"
        "                out[path] = len(fh.read())\n"
        "        except OSError as e:\n"
        "            out[path] = -e.errno\n"
        "    out['sys'] = os.listdir('/proc/sys')\n"
        "    return out\n"
    )
    v = _run(sb, code)
    assert v.pop("/proc/self/status") > 100 and v.pop("sys") == []
    readable_on_host = [p for p in probe[:-1] if os.path.exists(p)]
    assert len(readable_on_host) >= 10  # the probe means something on this machine
    assert all(v[p] <= 0 for p in readable_on_host), v  # nothing read: empty, EACCES or ENOENT
    from dprivacy.local.device.sandbox import proc_masks
    masked = dict(proc_masks())
    assert masked["/proc/interrupts"] is False and masked["/proc/sys"] is True
    assert not any(name.rsplit("/", 1)[1].isdigit() for name in masked)


def test_thread_cap_counts_the_query_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that is not root: its user already runs more processes than the cap, yet the
    query runs, and it cannot start more than ``MAX_TASKS`` tasks (its thread and 15 more).

    A root agent's calls are made with a chosen unprivileged uid that owns those processes, so
    ``bwrap`` runs exactly as a non-root agent's would; a non-root test run uses its own uid.
    """
    import secrets
    import subprocess

    from dprivacy.local.device import sandbox as sandbox_module

    if os.geteuid() == 0:
        uid = sandbox_module.UID_BASE - 1 - secrets.randbelow(1 << 20)
        monkeypatch.setattr(sandbox_module, "_fresh_uid", lambda: uid)
        ids: dict = {"user": uid, "group": uid, "extra_groups": []}
    else:
        ids = {}
    cap = sandbox_module.MAX_TASKS
    others = [subprocess.Popen(["sleep", "60"], **ids) for _ in range(3 * cap)]
    try:
        sb = make_sandbox(pad=False)
        code = (
            "import threading\n"
            "def f(d, p, s):\n"
            "    threading.stack_size(1 << 18)\n"
            "    ev, n = threading.Event(), 0\n"
            f"    for _ in range({4 * cap}):\n"
            "        try:\n"
            "            threading.Thread(target=ev.wait).start()\n"
            "            n += 1\n"
            "        except RuntimeError:\n"
            "            break\n"
            "    ev.set()\n"
            "    return n\n"
        )
        started = _run(sb, code, memory_mb=4096)
    finally:
        for p in others:
            p.kill()
            p.wait()
    assert started == cap - 1


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
    assert len(filter_program("x86_64")) == 8 * (6 + 2 * len(x86) + 2 + 5 + 5 + 12 + 5 + 1)
    assert len(filter_program("aarch64")) == 8 * (4 + 2 * len(arm) + 2 + 5 + 5 + 12 + 5 + 1)
    assert {"socket", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
            "sysinfo"} <= set(DENIED)
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


def _processes_named(name: str) -> list[int]:
    """Pids of this machine's processes whose name (``comm``) is ``name``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == name:
                        out.append(int(d))
            except OSError:
                continue
    return out


@pytest.mark.parametrize("filtered", [True, False], ids=["filter-denies", "direct-kill"])
def test_code_cannot_outlive_the_kill_at_its_time_bound(filtered: bool, monkeypatch) -> None:
    """Clearing the parent-death signal bubblewrap sets would let the query's process survive the
    kill of ``bwrap`` at the time bound (reparented to init, asleep, holding its memory, free to
    load the machine during later queries). The filter denies it, and nothing of the call is left
    running after the bound. Without that rule in the filter (``direct-kill``) the agent still
    kills the sandboxed process itself, by the id ``bwrap --info-fd`` reports."""
    import secrets
    import time

    from dprivacy.local.device import seccomp
    from dprivacy.local.device.reduce import domain_spec
    from dprivacy.local.randomiser import MatrixRandomiser

    if not filtered:
        monkeypatch.setattr(seccomp, "_PR_SET_PDEATHSIG", 0x7FFF)  # an option no prctl has
    sb = make_sandbox(pad=False)
    name = "dpx" + secrets.token_hex(5)
    code = (
        "import ctypes, time\n"
        "def f(d, p, s):\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        f"    libc.prctl(15, b'{name}', 0, 0, 0)\n"  # PR_SET_NAME: findable from outside
        "    libc.prctl(1, 0, 0, 0, 0)\n"  # PR_SET_PDEATHSIG = 0
        "    time.sleep(60)\n"
        "    return 0\n"
    )
    T = MatrixRandomiser([[0.75, 0.25], [0.25, 0.75]], inputs=[0, 1])  # noqa: N806
    try:
        out = sb.run_reduced(code, "f", ARGS, domain_spec(T), time_limit=1.5)
        assert not out.ok
        deadline = time.monotonic() + 2.0
        while _processes_named(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_named(name) == []
    finally:
        for pid in _processes_named(name):  # a failing defence leaves nothing behind either
            os.kill(pid, 9)
    errno_code = (
        "import ctypes\n"
        "def f(d, p, s):\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    return [libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno(), libc.prctl(15, b'x', 0, 0, 0)]\n"
    )
    assert _run(sb, errno_code) == ([-1, 1, 0] if filtered else [0, 0, 0])  # EPERM; others work


def test_file_locks_are_denied() -> None:
    """A lock on a file every sandbox can open is a channel between two queries running at the
    same time (user A's ``pre`` held ``flock`` on ``/usr/bin/env`` iff its bit was 1 and user B's
    read it with ``LOCK_NB``: 4/4 bits). ``flock`` and every fcntl record-lock command fail;
    other fcntl commands still work."""
    import errno

    sb = make_sandbox(pad=False)
    code = (
        "import fcntl, os, struct\n"
        "def f(d, p, s):\n"
        "    fd = os.open('/usr/bin/env', os.O_RDONLY)\n"
        "    out = {}\n"
        "    try:\n"
        "        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
        "        out['flock'] = 0\n"
        "    except OSError as e:\n"
        "        out['flock'] = e.errno\n"
        "    lk = struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0)\n"
        "    for cmd in (5, 6, 7, 36, 37, 38):\n"
        "        try:\n"
        "            fcntl.fcntl(fd, cmd, lk + bytes(16))\n"
        "            out[cmd] = 0\n"
        "        except OSError as e:\n"
        "            out[cmd] = e.errno\n"
        "    out['getfd'] = fcntl.fcntl(fd, fcntl.F_GETFD) >= 0\n"
        "    return out\n"
    )
    v = _run(sb, code)
    assert v.pop("getfd") is True
    assert v == {k: errno.EPERM for k in v} and len(v) == 7, v
