"""A seccomp-BPF filter for the sandbox, assembled without libseccomp (classic BPF, ``struct``).

bubblewrap loads the program from a file descriptor (``--seccomp FD``) just before it executes the
analyst's interpreter, so the filter binds the analyst's code and everything it could start, and
cannot be removed (seccomp filters are inherited and only ever added to).

The program (Linux ``Documentation/userspace-api/seccomp_filter.rst``):

1. kills the process unless the system-call ABI is the one the table below was written for
   (x86-64 or arm64; an i386 ``int 0x80``, an x32 or an arm32 call would otherwise bypass the
   numbers);
2. fails with ``EPERM`` the calls that reach kernel state shared outside the sandbox or enlarge
   the attack surface: ptrace, mount family, kernel keyring, perf, bpf, namespaces (unshare,
   setns), io_uring (its operations bypass seccomp), kernel modules, kexec, reboot, swap, clock
   setting, userfaultfd, memfd, file handles, cross-process memory access;
3. fails with ``EPERM`` the calls that watch what happens outside the sandbox or read global
   counters: inotify and fanotify (a watch on a file under ``/usr`` sees every program of the
   machine that opens it), ``sysinfo`` (free memory, page cache, load and process count of the
   whole machine), ``fcntl`` with ``F_NOTIFY`` (directory notifications) or ``F_SETLEASE``
   (a lease is broken when any other process opens the file), and file locks (``flock``,
   ``fcntl`` record locks): a lock on a file every sandbox can open (under ``/usr``) is seen at
   once by any other process of the machine, a channel between two queries running at the same
   time (two users' agents on one machine);
4. fails ``fork``/``vfork`` and any ``clone`` that does not create a thread: the query's code is
   one process, so its per-process limits (address space, CPU time) bound the whole query;
   ``clone3`` returns ``ENOSYS`` (glibc then falls back to ``clone``, which the filter can read);
5. fails every ``socket`` call, whatever its family (a query needs none: ``AF_VSOCK`` reaches the
   host through no network namespace, ``AF_NETLINK`` reads kernel events, ``AF_PACKET`` and raw
   sockets read frames), and ``socketpair`` for any family but ``AF_UNIX`` (an anonymous pair
   inside the process, which ``asyncio`` uses; it has no address anyone else can reach);
6. fails ``prctl(PR_SET_PDEATHSIG, ...)``: bubblewrap (``--die-with-parent``) sets the parent-death
   signal so that the query's process dies with the ``bwrap`` the agent kills at the time bound;
   code that cleared it would outlive the kill, asleep (using no CPU time) for as long as it
   liked, holding its memory and free to load the machine during later queries;
7. allows the rest.
"""
from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

__all__ = ["DENIED", "UnsupportedArchitectureError", "filter_program"]

# classic BPF opcodes (linux/filter.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_OFF_NR, _OFF_ARCH, _OFF_ARG0, _OFF_ARG1 = 0, 4, 16, 24

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_F_SETLEASE = 1024
_F_NOTIFY = 1026
#: fcntl commands denied: notifications, leases and record locks (F_GETLK, F_SETLK, F_SETLKW and
#: their open-file-description forms), which any process of the machine can see on a shared file
_FCNTL_DENIED = (_F_NOTIFY, _F_SETLEASE, 5, 6, 7, 36, 37, 38)
_PR_SET_PDEATHSIG = 1

#: Denied system calls: their numbers on x86-64 (asm/unistd_64.h) and on arm64
#: (asm-generic/unistd.h; arm64 has no fork, vfork, iopl, ioperm, modify_ldt, uselib or _sysctl).
DENIED: dict[str, tuple[int | None, int | None]] = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "kcmp": (312, 272),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "perf_event_open": (298, 241), "bpf": (321, 280), "userfaultfd": (323, 282),
    "unshare": (272, 97), "setns": (308, 268),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "syslog": (103, 116),
    "quotactl": (179, 60), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "adjtimex": (159, 171), "clock_adjtime": (305, 266), "vhangup": (153, 58),
    "lookup_dcookie": (212, 18), "fanotify_init": (300, 262), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "memfd_create": (319, 279),
    "fanotify_mark": (301, 263), "inotify_init": (253, None), "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27), "inotify_rm_watch": (255, 28), "sysinfo": (99, 179),
    "socket": (41, 198),
    "iopl": (172, None), "ioperm": (173, None), "modify_ldt": (154, None), "uselib": (134, None),
    "_sysctl": (156, None), "fork": (57, None), "vfork": (58, None), "flock": (73, 32),
}


@dataclass(frozen=True)
class _Abi:
    audit_arch: int
    column: int  # index into DENIED's pairs
    clone: int
    clone3: int
    socketpair: int
    fcntl: int
    prctl: int
    x32_bit: bool  # calls with this bit set use another ABI (x86-64's x32): killed


_ABIS = {
    "x86_64": _Abi(0xC000003E, 0, clone=56, clone3=435, socketpair=53, fcntl=72, prctl=157,
                   x32_bit=True),
    "aarch64": _Abi(0xC00000B7, 1, clone=220, clone3=435, socketpair=199, fcntl=25,
                    prctl=167, x32_bit=False),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


class UnsupportedArchitectureError(RuntimeError):
    """No system-call table for this machine: the sandbox refuses analyst code."""


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes:
    """The filter as bytes of ``struct sock_filter`` (what ``bwrap --seccomp FD`` reads).

    Parameters
    ----------
    machine : str, optional
        ``platform.machine()`` of the target (default: this machine's).

    Raises
    ------
    UnsupportedArchitectureError
        On a machine other than x86-64 and arm64 (no system-call table here).

    Examples
    --------
    >>> len(filter_program("x86_64")) % 8
    0
    """
    m = (machine or platform.machine()).lower()
    abi = _ABIS.get(_ALIASES.get(m, m))
    if abi is None:
        raise UnsupportedArchitectureError(
            f"no seccomp system-call table for {m!r} (x86-64 and arm64 only): analyst code is refused")
    eperm = _RET_ERRNO | errno.EPERM
    p = [
        _ins(_LD_W_ABS, _OFF_ARCH),
        _ins(_JEQ_K, abi.audit_arch, 1, 0),
        _ins(_RET_K, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, _OFF_NR),
    ]
    if abi.x32_bit:
        p += [_ins(_JGE_K, _X32_SYSCALL_BIT, 0, 1), _ins(_RET_K, _RET_KILL_PROCESS)]
    numbers = {pair[abi.column] for pair in DENIED.values()}
    for nr in sorted(n for n in numbers if n is not None):
        p += [_ins(_JEQ_K, nr, 0, 1), _ins(_RET_K, eperm)]
    p += [_ins(_JEQ_K, abi.clone3, 0, 1), _ins(_RET_K, _RET_ERRNO | errno.ENOSYS)]
    # clone: allowed only with CLONE_THREAD in its flags (arg 0, low 32 bits)
    p += [_ins(_JEQ_K, abi.clone, 0, 4), _ins(_LD_W_ABS, _OFF_ARG0),
          _ins(_JSET_K, _CLONE_THREAD, 1, 0), _ins(_RET_K, eperm), _ins(_RET_K, _RET_ALLOW)]
    # socketpair(domain, ...): AF_UNIX only
    p += [_ins(_JEQ_K, abi.socketpair, 0, 4), _ins(_LD_W_ABS, _OFF_ARG0),
          _ins(_JEQ_K, _AF_UNIX, 1, 0), _ins(_RET_K, eperm), _ins(_RET_K, _RET_ALLOW)]
    # fcntl(fd, cmd, ...): no directory notifications, no leases, no record locks
    n = len(_FCNTL_DENIED)
    p += [_ins(_JEQ_K, abi.fcntl, 0, n + 3), _ins(_LD_W_ABS, _OFF_ARG1)]
    p += [_ins(_JEQ_K, cmd, n - i, 0) for i, cmd in enumerate(_FCNTL_DENIED)]
    p += [_ins(_RET_K, _RET_ALLOW), _ins(_RET_K, eperm)]
    # prctl(option, ...): the parent-death signal bubblewrap set stays (the kill reaches the code)
    p += [_ins(_JEQ_K, abi.prctl, 0, 4), _ins(_LD_W_ABS, _OFF_ARG0),
          _ins(_JEQ_K, _PR_SET_PDEATHSIG, 0, 1), _ins(_RET_K, eperm), _ins(_RET_K, _RET_ALLOW)]
    p.append(_ins(_RET_K, _RET_ALLOW))
    return b"".join(p)
