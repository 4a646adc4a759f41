"""What Linux gives to confine a process, through ctypes syscalls: namespaces (``unshare(2)``),
Landlock (filesystem, TCP and IPC scoping) and a seccomp filter.

Each function applies one layer to the calling process, for good, and returns a short
description of what it set, or raises :class:`Refused` with why the kernel would not (an old
kernel, a layer compiled out, a threaded process, a container that forbids it).  The caller
(:mod:`kernel_forge.common.sandbox`) decides what to try and reports which layers hold.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import struct

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
MS_REC, MS_PRIVATE = 0x4000, 1 << 18

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on every architecture
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
#: every filesystem right of ABI 1 (bits 0-12), then what later ABIs add
_FS_BY_ABI = {1: (1 << 13) - 1, 2: FS_REFER, 3: FS_TRUNCATE, 5: FS_IOCTL_DEV}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

#: (audit arch, {syscall: number}) of the architectures the seccomp filter knows
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
                            "socket": 41, "ptrace": 101, "io_uring_setup": 425}),
    "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "socket": 198,
                             "ptrace": 117, "io_uring_setup": 425}),
}
CLONE_THREAD = 0x00010000
EPERM, ENOSYS = 1, 38


class Refused(OSError):
    """The kernel (or this platform) would not apply a layer; the message says why."""


def _libc():
    if not platform.system() == "Linux":
        raise Refused(f"not Linux ({platform.system()})")
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    lib.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return lib


def _fail(what: str) -> Refused:
    err = ctypes.get_errno()
    return Refused(f"{what}: {os.strerror(err)} (errno {err})")


# ------------------------------------------------------------------------------ namespaces

def unshare_namespaces() -> str:
    """New user (where needed), network and mount namespaces: no network but a loopback that is
    down, and mounts private to the process.  Call before any thread starts."""
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNET | CLONE_NEWNS
    if _unshare(libc, CLONE_NEWUSER | flags):
        _map_ids(uid, gid)
        kinds = "user+network+mount"
    elif _unshare(libc, flags):                  # root where user namespaces are refused
        kinds = "network+mount"
    else:
        raise _fail("unshare")
    libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)      # nothing mounted here reaches the host
    return kinds


def _unshare(libc, flags: int) -> bool:
    """``os.unshare`` (Python 3.12+), else the libc call; False (errno set) where refused."""
    if hasattr(os, "unshare"):
        try:
            os.unshare(flags)
            return True
        except OSError as exc:
            ctypes.set_errno(exc.errno or 0)
            return False
    return libc.unshare(flags) == 0


def _map_ids(uid: int, gid: int) -> None:
    """The process keeps its own uid and gid inside its user namespace (files it may create in its
    private folder are its own)."""
    for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError:
            pass


# ------------------------------------------------------------------------------ Landlock

def landlock_abi() -> int:
    """The kernel's Landlock ABI version; :class:`Refused` without Landlock."""
    libc = _libc()
    v = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if v < 0:
        raise _fail("Landlock")
    return int(v)


def landlock(read: list[str], write: list[str]) -> str:
    """Restrict this process to reading (files and folders) under ``read`` and to everything but
    executing under ``write``; nothing may be executed anywhere.  From ABI 4 no TCP bind or
    connect, from ABI 6 no signal or abstract socket out of the sandbox."""
    libc = _libc()
    abi = landlock_abi()
    handled = 0
    for version, bits in _FS_BY_ABI.items():
        if abi >= version:
            handled |= bits
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("<QQQ", handled, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise _fail("landlock_create_ruleset")
    try:
        file_rights = FS_READ_FILE | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        for paths, rights in ((read, FS_READ_FILE | FS_READ_DIR), (write, handled & ~FS_EXECUTE)):
            for p in paths:
                _add_rule(libc, fd, p, rights & handled, file_rights)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _fail("prctl(NO_NEW_PRIVS)")
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(fd)
    return f"ABI {abi}" + (", no TCP" if net else "") + (", no signal out" if scoped else "")


def _add_rule(libc, ruleset: int, path: str, rights: int, file_rights: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return                                  # a path that is not there needs no rule
    try:
        if not os.path.isdir(path):
            rights &= file_rights               # a file takes only the rights of files
        rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, pfd), 12)
        if libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                        rule, ctypes.c_uint32(0)) != 0:
            raise _fail(f"landlock_add_rule {path}")
    finally:
        os.close(pfd)


# ------------------------------------------------------------------------------ seccomp

def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def seccomp_filter() -> str:
    """A seccomp filter: no new program (execve), no new process (fork, vfork, clone without
    CLONE_THREAD; clone3 says ENOSYS so that threads fall back to clone), no socket, no ptrace,
    no io_uring.  Everything else is allowed."""
    libc = _libc()
    machine = platform.machine()
    if machine not in _SECCOMP_ARCH:
        raise Refused(f"no seccomp filter for {machine}")
    arch, nr = _SECCOMP_ARCH[machine]
    LD, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, deny, nosys = 0x7FFF0000, 0x00050000 | EPERM, 0x00050000 | ENOSYS
    prog = [_bpf(LD, 0, 0, 4), _bpf(JEQ, 1, 0, arch), _bpf(RET, 0, 0, deny),      # another ABI: refused
            _bpf(LD, 0, 0, 0), _bpf(JGE, 0, 1, 0x40000000), _bpf(RET, 0, 0, deny)]  # x32 calls: refused
    prog += [_bpf(JEQ, 0, 4, nr["clone"]), _bpf(LD, 0, 0, 16), _bpf(JSET, 0, 1, CLONE_THREAD),
             _bpf(RET, 0, 0, allow), _bpf(RET, 0, 0, deny)]
    prog += [_bpf(JEQ, 0, 1, nr["clone3"]), _bpf(RET, 0, 0, nosys)]
    for name in ("fork", "vfork", "execve", "execveat", "socket", "ptrace", "io_uring_setup"):
        if name in nr:
            prog += [_bpf(JEQ, 0, 1, nr[name]), _bpf(RET, 0, 0, deny)]
    prog.append(_bpf(RET, 0, 0, allow))
    code = b"".join(prog)
    filt = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
        raise _fail("seccomp")
    return "no exec, fork, socket, ptrace, io_uring"
