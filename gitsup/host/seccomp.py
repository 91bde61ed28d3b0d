"""The task sandbox's system call filter, host side: compiled once with libseccomp.

gitsup compiles the filter here (through pyseccomp, a ctypes binding of libseccomp) to a
classic BPF program and hands its bytes to the bootstrap in the sandbox description; the
bootstrap (standard library only) installs it with seccomp(2) right before it executes the
task's command. The program is the same for every spawn, so it is compiled once per process.

Denied calls fail with EPERM, never kill: tools probe for these calls and fall back.
`clone3` fails with ENOSYS (its flags are in a struct a filter cannot read), so the C
library falls back to `clone`, whose flags the filter checks. A system call of another
architecture (an `int 0x80` from a 64-bit process, x32) fails with ENOSYS too.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import tempfile

# Namespaces, kernel attack surface, other processes' memory, the mount table, the machine.
DENIED = (
    "unshare", "setns",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "mount", "umount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick",
    "move_mount", "open_tree", "mount_setattr", "chroot",
    "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "acct",
    "quotactl", "quotactl_fd", "open_by_handle_at", "name_to_handle_at",
)  # fmt: skip

# clone(2) flags that create a namespace (CLONE_NEWTIME shares its bit with the exit
# signal in clone(2)'s flags: only unshare and clone3 can ask for it, and both are denied)
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
AF_UNIX = 1
_LOW32 = 0xFFFFFFFF


def unavailable() -> str | None:
    """None when this host can filter system calls, else why not."""
    if "seccomp" in os.environ.get("GITSUP_SANDBOX_REFUSE", "").split(","):
        return "seccomp: refused (GITSUP_SANDBOX_REFUSE)"
    try:
        with open("/proc/self/status") as f:
            if not any(line.startswith("Seccomp:") for line in f):
                return "seccomp: the kernel has no seccomp filter support"
    except OSError:
        return "seccomp: /proc/self/status is not readable"
    try:
        program()
    except (ImportError, RuntimeError, OSError) as exc:
        return f"seccomp: cannot compile the filter with libseccomp ({exc})"
    return None


@functools.cache
def program() -> bytes:
    """The filter as a BPF program (struct sock_filter[]), for this machine's architecture.
    ImportError/RuntimeError without pyseccomp or libseccomp."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.ERRNO(errno.ENOSYS))
    f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree over the system call numbers

    def deny(name: str, *args: object, err: int = errno.EPERM) -> None:
        with contextlib.suppress(ValueError):  # not a system call on this architecture
            f.add_rule(sc.ERRNO(err), name, *args)

    for name in DENIED:
        deny(name)
    deny("clone3", err=errno.ENOSYS)
    for bit in CLONE_NEW.values():
        deny("clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    # socket(AF_UNIX, …): no connection to a host pathname socket, wherever it is; the
    # kernel reads only the low 32 bits of the int argument, and so does the filter
    deny("socket", sc.Arg(0, sc.MASKED_EQ, _LOW32, AF_UNIX))
    # personality(2): only the default (0) and the query (0xffffffff), i.e. all 32 bits
    # equal; deny any value with a bit that differs from bit 0 (one comparison per rule)
    for i in range(1, 32):
        deny("personality", sc.Arg(0, sc.MASKED_EQ, 1 | 1 << i, 1))
        deny("personality", sc.Arg(0, sc.MASKED_EQ, 1 | 1 << i, 1 << i))
    with tempfile.TemporaryFile() as t:
        f.export_bpf(t)
        t.seek(0)
        return t.read()
