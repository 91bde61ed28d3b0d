"""The worker bootstrap: join a cgroup and/or a network namespace, sandbox, then exec.

    python -m gitsup.host.bootstrap [--cgroup DIR]... [--netns PATH | --new-netns]
                                    [--sandbox JSON] -- ARGV...

Runs before the real command executes, so no descendant of it can start outside the
cgroup, the namespace or the sandbox. Order: join the cgroup, enter the network namespace
(`--netns`: a named one; `--new-netns`: a fresh one of its own with only loopback, up, which
ends with the last process in it), then (with --sandbox) private mount and PID namespaces,
no_new_privs, Landlock, every capability dropped and the system call filter, then exec. Standard library only; exits 126
when it cannot contain.

With a PID namespace the pid gitsup spawned stays outside and waits; its child is the
namespace's init (its own /proc, reaps orphans) and forks the process that execs the
command; the outer process ends as that one did (docs/sandbox.md).

The sandbox JSON (built by gitsup.host.sandbox) says exactly what to enforce; the bootstrap
enforces all of it or fails (it never silently does less than the record claims):

    {"mountns": bool, "pidns": bool, "seccomp": "FILE" or "", "landlock": bool, "caps": bool,
     "read": [path...], "listed": [dir...], "write": [path...], "deny": [glob...],
     "hide": [dir...], "ro": [path...], "rw_mounts": [dir...], "fanout": [dir...],
     "include": [{"lower", "upper", "work", "root", "path"}...],
     "scratch": [dir...]}

`read`/`write`: Landlock hierarchies (missing paths are skipped); `deny`: globs removed
from the `read` hierarchies that contain them (the hierarchy is split into its other
entries; gitsup.host.sandbox does that once per task and passes the split `read` with the
directories that stay listable in `listed`); `fanout`: object directories whose 256
loose-object subdirectories are writable; `hide`: directories covered by an empty tmpfs in the mount namespace (their
`read`/`write` sub-paths are bound back); `ro`: paths bound read-only over themselves.
`include`: overlays mounted in the worktree, each over a directory of the main checkout
(`_mount_includes`; docs/environments.md). `seccomp`: a file holding the BPF program
gitsup.host.seccomp compiled. `scratch`: directories (with the mount namespace only) given a
writable tmpfs of the namespace's own (`/dev/shm`). `observe`: a file
where the process about to exec writes what it sees of itself (`observed`), for the record.
GITSUP_SANDBOX_REFUSE=landlock,mountns,pidns,seccomp (a testing knob) makes the bootstrap
refuse those.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

TYPE_CHECKING = False  # typing's own would import typing (and re with it) at every spawn
if TYPE_CHECKING:
    import re
    import signal
    from typing import Any
else:
    try:  # the C module that signal wraps in enums (which would cost a tenth of the start-up)
        import _signal as signal
    except ImportError:
        import signal

# Every spawn of a task's process starts this interpreter, so it imports only what each one
# needs: not json, fnmatch, re, typing or signal's enums (together about a third of its
# start-up; `_loads`, `_denied_re`: the deny globs are split host-side).

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000

# mount(2)
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_NOEXEC = 8
# statvfs f_flag bits that are also mount flags: nodev, noexec, noatime, nodiratime
_KEPT_FLAGS = 4 | 8 | 1024 | 2048
ST_RELATIME = 4096

# prctl(2)
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# securebits: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off), NO_CAP_AMBIENT_RAISE, each locked
SECUREBITS_LOCKED = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)

# Landlock (syscall numbers are the same on every architecture gitsup runs on)
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REFER = 1 << 13
FS_TRUNCATE = 1 << 14
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)


def _fail(msg: str) -> None:
    sys.stderr.write(f"gitsup bootstrap: {msg}\n")
    sys.stderr.flush()
    os._exit(126)


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def _refused(what: str) -> bool:
    return what in os.environ.get("GITSUP_SANDBOX_REFUSE", "").split(",")


# --- Landlock -------------------------------------------------------------------------------


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""
    v = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return int(v) if v > 0 else 0


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_DENIED_RE: dict[tuple[str, ...], re.Pattern[str]] = {}


def _denied_re(deny: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression for the globs and everything below them (cached)."""
    pattern = _DENIED_RE.get(deny)
    if pattern is None:
        import fnmatch
        import re

        parts = [fnmatch.translate(g) for g in deny]
        parts += [fnmatch.translate(g.rstrip("/") + "/*") for g in deny]
        if len(_DENIED_RE) >= 64:
            _DENIED_RE.clear()
        pattern = _DENIED_RE[deny] = re.compile("|".join(parts) or "(?!)")
    return pattern


def denied(path: str, deny: list[str]) -> bool:
    """`path` is a denied glob or lies below one."""
    return _denied_re(tuple(deny)).match(path) is not None


def covers(path: str, deny: list[str]) -> bool:
    """A denied glob lies below the directory `path`."""
    prefix = path.rstrip("/") + "/"
    return any(g.startswith(prefix) for g in deny)


def expand_read(paths: list[str], deny: list[str]) -> tuple[list[str], list[str]]:
    """`paths` minus every `deny` glob: a path that is denied or lies below a denied one is
    left out, a hierarchy that contains a denied path is replaced by its entries
    (recursively), leaving out the denied ones. Symlinks are judged by what they point to
    (Landlock follows them). Returns those hierarchies and the split directories (which stay
    listable). Used for the writable hierarchies too."""
    out: list[str] = []
    listed: list[str] = []

    def walk(p: str, is_dir: bool, link: bool) -> None:
        real = os.path.realpath(p) if link else p
        if denied(p, deny) or (real != p and denied(real, deny)):
            return
        if real != p and covers(real, deny):
            if not os.path.isdir(real):
                return
            p, is_dir = real, True  # a link to a directory that holds a denied path
        if not is_dir or not covers(p, deny):
            out.append(p)
            return
        try:
            entries = list(os.scandir(p))
        except OSError:
            return
        listed.append(p)
        for e in entries:
            walk(e.path, e.is_dir(follow_symlinks=False), e.is_symlink())

    for p in paths:
        # a top-level path may have a link anywhere in it; an entry met while splitting only
        # in its last component
        walk(p, os.path.isdir(p) and not os.path.islink(p), True)
    return out, listed


def _landlock(read: list[str], write: list[str], deny: list[str], listed: list[str]) -> int:
    abi = landlock_abi()
    if abi < 1 or _refused("landlock"):
        _fail("Landlock is not available on this host")
    rights = _fs_rights(abi)
    attr = _RulesetAttr(rights, 0, 0)
    size = 8
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    rfd = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if rfd < 0:
        _fail(f"cannot create a Landlock ruleset: {_err()}")
    read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    if deny:
        read, more = expand_read(read, deny)
        listed = [*listed, *more]
    for paths, allowed in ((read, read_rights), (listed, FS_READ_DIR), (write, rights)):
        for p in paths:
            try:
                fd = os.open(p, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist needs no rule
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                mask = allowed if is_dir else allowed & FILE_RIGHTS
                rule = _PathBeneath(mask, fd)
                if _libc.syscall(
                    SYS_LANDLOCK_ADD_RULE, rfd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0
                ):
                    _fail(f"cannot add a Landlock rule for {p}: {_err()}")
            finally:
                os.close(fd)
    if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, rfd, 0):
        _fail(f"cannot enforce the Landlock ruleset: {_err()}")
    os.close(rfd)
    return abi


# --- the mount namespace --------------------------------------------------------------------


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if _libc.mount(
        None if src is None else src.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        flags,
        None if data is None else data.encode(),
    ):
        _fail(f"cannot mount {target}: {_err()}")


def _under(path: str, d: str) -> bool:
    return path == d or path.startswith(d.rstrip("/") + "/")


def _covered(path: str, dirs: list[str]) -> bool:
    return any(_under(path, d) for d in dirs)


def _write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount_ns(
    cfg: dict[str, list[str]],
    *,
    pidns: bool = False,
    include: list[dict[str, str]] | None = None,
) -> None:
    """A private mount namespace: the host's sockets and temp dirs hidden under empty tmpfs,
    the task's own paths bound back (read-only unless writable), `ro` paths read-only, the
    `include` overlays mounted in the worktree (`_mount_includes`).
    `pidns`: a PID namespace too, which this process's next child enters as its init."""
    if _refused("mountns"):
        _fail("mount namespaces are not available on this host")
    if pidns and _refused("pidns"):
        _fail("PID namespaces are not available on this host")
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS if os.geteuid() == 0 else CLONE_NEWNS | CLONE_NEWUSER
    if pidns:
        flags |= CLONE_NEWPID
    if _libc.unshare(flags):
        what = "mount and PID namespaces" if pidns else "a mount namespace"
        _fail(f"cannot create {what}: {_err()}")
    if flags & CLONE_NEWUSER:
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_file("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    hide = [h for h in cfg.get("hide", []) if os.path.isdir(h) and not os.path.islink(h)]
    ro = [p for p in cfg.get("ro", []) if os.path.exists(p)]
    ops: list[tuple[str, str]] = [(h, "tmpfs") for h in hide]
    ops += [(p, "read") for p in cfg.get("read", []) if _covered(p, hide) and os.path.exists(p)]
    ops += [(p, "ro") for p in ro]
    # writable: bound back read-write when hidden or inside a read-only bind, unless a
    # writable bind around it covers it already (`rw_mounts`: writable at the mount level
    # only; Landlock narrows them)
    rw = [p for p in cfg.get("rw_mounts", []) if os.path.exists(p)]
    rw += [p for p in cfg.get("write", []) if os.path.exists(p) and not _covered(p, rw)]
    rw = [p for p in rw if _covered(p, [*hide, *ro])]
    masks = [*hide, *ro]
    layers = _open_includes(include or [])  # before anything hides the main checkout or sup/

    def needs_bind(p: str) -> bool:
        # covered by a writable bind with nothing hidden or read-only in between
        return not any(
            q != p
            and _under(p, q)
            and not any(m != q and _under(m, q) and _under(p, m) for m in masks)
            for q in rw
        )

    ops += [(p, "write") for p in rw if needs_bind(p)]
    # a readable path that is writable, or visible through a writable bind, needs no
    # read-only bind of its own
    ops = [(p, k) for p, k in ops if k != "read" or (p not in rw and needs_bind(p))]
    # parents first; at one path: tmpfs, then read, then write, then ro
    rank = {"tmpfs": 0, "read": 1, "write": 2, "ro": 3}
    ops.sort(key=lambda o: (o[0].rstrip("/").count("/"), rank[o[1]]))
    fds: dict[str, int] = {}
    for p, kind in ops:
        if kind != "tmpfs" and p not in fds:
            try:
                fds[p] = os.open(p, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                _fail(f"cannot open {p}: {exc.strerror}")
    for p, kind in ops:
        if kind == "tmpfs":
            if not os.path.isdir(p):
                continue  # below a directory hidden already (and not bound back)
            _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64m")
            continue
        fd = fds[p]
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        if not os.path.lexists(p):
            try:
                if is_dir:
                    os.makedirs(p, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
            except OSError as exc:
                _fail(f"cannot create the mount point {p}: {exc.strerror}")
        _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC, None)
        if kind != "write":
            # keep the flags a user namespace may not clear (nodev, noexec, atime…)
            kept = os.statvfs(p).f_flag
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (kept & _KEPT_FLAGS)
            if kept & ST_RELATIME:
                flags |= MS_RELATIME
            _mount(None, p, None, flags, None)
    for fd in fds.values():
        os.close(fd)
    _mount_includes(layers, ro=ro, userns=os.geteuid() != 0)
    # The working directory still points into the host's mounts: enter it again by name,
    # so that relative paths (`..` included) see the namespace's view, not the host's.
    try:
        cwd = os.getcwd()
        os.chdir(cwd)
    except OSError as exc:
        _fail(f"cannot enter the working directory in the mount namespace: {exc.strerror}")


# --- include: the main checkout's ignored paths, copy-on-write --------------------------------
#
# Each entry of the description's `include` is {"lower": DIR, "upper": DIR, "work": DIR,
# "root": DIR, "path": REL}: an overlay whose only lower layer is a directory of the main
# checkout (never written: overlayfs writes only to its upper layer) and whose upper layer is
# the task's own (under its private dir, which the mount namespace hides), mounted at `path`
# below the worktree `root`. Each mount gets a work dir of its own below `work`.


def _include_list(value: object) -> list[dict[str, str]]:
    if value is None:
        return []
    keys = ("lower", "upper", "work", "root", "path")
    if not isinstance(value, list) or not all(
        isinstance(e, dict) and all(isinstance(e.get(k), str) and e[k] for k in keys) for e in value
    ):
        _fail("the sandbox description's include is not a list of overlays")
    return value  # type: ignore[return-value]


def open_beneath(root: str, rel: str, *, create: bool = False) -> int:
    """An O_PATH descriptor of the directory `root/rel`, each component below `root` opened
    without following a link (a link, a file or, unless `create`, a missing component is an
    OSError); `create` makes the missing ones (mode 0755)."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.split("/"):
            if part in ("", ".", ".."):
                raise OSError(22, f"{rel!r} is not a plain relative path")
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_includes(include: list[dict[str, str]]) -> list[tuple[str, str, int, int, int]]:
    """(root, path, lower, upper, work) of each overlay, its layers opened while the host's
    paths are still in view; the work dir is a new one for this mount."""
    out: list[tuple[str, str, int, int, int]] = []
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    for e in include:
        try:
            lower = os.open(e["lower"], flags)
            upper = os.open(e["upper"], flags | os.O_NOFOLLOW)
            work = os.path.join(e["work"], f"{os.getpid()}-{os.urandom(4).hex()}")
            os.mkdir(work, 0o700)
            work_fd = os.open(work, flags | os.O_NOFOLLOW)
            out.append((e["root"], e["path"], lower, upper, work_fd))
        except OSError as exc:
            _fail(f"cannot include {e['lower']}: {exc.strerror}")
    return out


def _mount_includes(
    layers: list[tuple[str, str, int, int, int]], *, ro: list[str], userns: bool
) -> None:
    """Mount each overlay at its path in the worktree, entered from the worktree's top without
    following links (a link or a file on the way fails; a missing directory is made unless
    the worktree is read-only). Read-only where the worktree is (the reviewer's)."""
    for root, path, lower, upper, work in layers:
        target = os.path.join(root, path)
        read_only = _covered(target, ro)
        try:
            where = open_beneath(root, path, create=not read_only)
        except OSError as exc:
            _fail(f"cannot mount the include at {target}: {exc.strerror or exc}")
        data = (
            f"lowerdir=/proc/self/fd/{lower},upperdir=/proc/self/fd/{upper},"
            f"workdir=/proc/self/fd/{work},index=off"
        )
        if userns:
            data += ",userxattr"
        flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
        _mount("overlay", f"/proc/self/fd/{where}", "overlay", flags, data)
        for fd in (where, lower, upper, work):
            os.close(fd)


def _scratch_mounts(dirs: list[str]) -> None:
    """A writable tmpfs of the namespace's own (sticky, world-writable like /dev/shm, 64 MiB
    at most, charged to the task's cgroup) over each of `dirs`: POSIX semaphores and shared
    memory (`multiprocessing`) work, and nothing of the host's is there."""
    for d in dirs:
        if os.path.isdir(d) and not os.path.islink(d):
            _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")


# --- privileges -----------------------------------------------------------------------------


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _no_new_privs() -> None:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        _fail(f"cannot set no_new_privs: {_err()}")


def _drop_caps() -> None:
    """Every capability out of every set, securebits locked so exec as uid 0 regains none."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    if _libc.prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED, 0, 0, 0) and os.geteuid() == 0:
        _fail(f"cannot lock securebits: {_err()}")
    for cap in range(last + 1):
        dropped = _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0
        if not dropped and ctypes.get_errno() != 22 and os.geteuid() == 0:
            _fail(f"cannot drop capability {cap} from the bounding set: {_err()}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    nr = SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        _fail(f"capset: unknown architecture {os.uname().machine}")
    hdr = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _libc.syscall(nr, ctypes.byref(hdr), data):
        _fail(f"cannot drop capabilities: {_err()}")


# --- the PID namespace -----------------------------------------------------------------------

# Signals gitsup (and a terminal) send to the task's process group: the task's own
# process gets them directly, so the bootstrap's two waiting processes only outlive them.
_GROUP_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM,
)  # fmt: skip


def _outlive_group_signals() -> None:
    for sig in _GROUP_SIGNALS:
        signal.signal(sig, lambda *_: None)


def _exit_like(status: int) -> None:
    """Exit the way a child with this wait status ended (killed by a signal: the same signal)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 126)


def _release_stdio(devnull: int) -> None:
    """A waiting process keeps no copy of the task's stdin, stdout and stderr: the reader of
    its output sees the end when the task closes them."""
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def _enter_pid_ns() -> tuple[int, int]:
    """Fork into the PID namespace `_mount_ns` created. This process (the pid gitsup
    spawned, outside the namespace) waits and exits like the child; the child, PID 1 inside,
    mounts the namespace's own /proc and returns the pipe on which it reports the task's
    wait status (its `_init` ends the namespace with it), and /dev/null."""
    _outlive_group_signals()
    r, w = os.pipe()
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    pid = os.fork()
    if pid:
        os.close(w)
        _release_stdio(devnull)
        _, status = os.waitpid(pid, 0)
        data = os.read(r, 4)
        if len(data) == 4:
            status = int.from_bytes(data, "little")
        _exit_like(status)
    os.close(r)
    # the pid gitsup spawned killed alone: the namespace ends with it
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    return w, devnull


# what the command starts with: the default for every signal Python or the bootstrap changed
_RESET_SIGNALS = (*_GROUP_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ)


def _init(report: int, devnull: int, cmd: list[str]) -> None:
    """PID 1 of the task's namespace: start the command (posix_spawn: no copy of this
    interpreter), reap every orphan, and end with the command's wait status when it exits
    (the kernel then kills what is left in the namespace). Never returns."""
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ, setsigdef=_RESET_SIGNALS)
    except OSError as exc:
        sys.stderr.write(f"gitsup bootstrap: cannot run {cmd[0]!r}: {exc.strerror}\n")
        os._exit(127)
    _release_stdio(devnull)
    # the task cannot open this init's /proc entries (its descriptors, its memory)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            os._exit(126)
        if child == pid:
            os.write(report, status.to_bytes(4, "little"))
            _exit_like(status)


# --- the system call filter -------------------------------------------------------------------


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _read_filter(path: str) -> bytes:
    """The BPF program gitsup compiled (gitsup.host.seccomp), read before the mount
    namespace hides gitsup's task directory."""
    if _refused("seccomp"):
        _fail("seccomp is not available on this host")
    try:
        with open(path, "rb") as f:
            prog = f.read()
    except OSError as exc:
        _fail(f"cannot read the system call filter {path}: {exc.strerror}")
    if not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        _fail(f"the system call filter {path} is not a BPF program")
    return prog


def _seccomp(prog: bytes) -> None:
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0):
        _fail(f"cannot install the system call filter: {_err()}")


# --- what the task's process sees of itself -----------------------------------------------------


def _ns(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def env_digest(name: str, value: str) -> str:
    """What the observed report says of one environment variable: a digest of name and value
    (compared with the variables the allowlist removed; the values stay out of the record)."""
    import hashlib  # only when the report is asked for: the bootstrap's imports are its cost

    return hashlib.sha256(f"{name}={value}".encode()).hexdigest()[:16]


def observed(before: dict[str, str]) -> dict[str, object]:
    """The sandbox as this process sees it (`/proc/self/status`, its namespaces, its
    environment), which the command inherits; `before`: the namespaces the bootstrap
    started in."""
    status: dict[str, str] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                status[k] = v.strip()
    except OSError:
        pass
    caps = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
    try:
        own_proc = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        own_proc = False
    return {
        "no_new_privs": status.get("NoNewPrivs") == "1",
        "caps_dropped": all(k in status and int(status[k], 16) == 0 for k in caps),
        "seccomp": status.get("Seccomp") == "2",
        # a PID namespace of its own, and a /proc that shows it
        "pid_ns": bool(before.get("pid")) and _ns("pid") != before["pid"] and own_proc,
        "mount_ns": bool(before.get("mnt")) and _ns("mnt") != before["mnt"],
        "env": {k: env_digest(k, v) for k, v in os.environ.items()},
    }


def apply_sandbox(cfg: dict[str, object]) -> tuple[int, int] | None:
    """Enforce the sandbox description on this process (see the module docstring). With a
    PID namespace this forks: it returns in the namespace's init, with what `_init` needs
    (the status pipe and /dev/null); else None, ready to exec."""
    paths = {
        k: [str(p) for p in v] for k, v in cfg.items() if isinstance(v, list) and k != "include"
    }
    seccomp = cfg.get("seccomp")
    prog = _read_filter(seccomp) if isinstance(seccomp, str) and seccomp else None
    observe = cfg.get("observe")
    obs_fd, before = -1, {}
    if isinstance(observe, str) and observe:
        before = {k: _ns(k) for k in ("pid", "mnt")}
        try:  # opened before the mount namespace hides gitsup's task directory
            obs_fd = os.open(observe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            _fail(f"cannot open {observe}: {exc.strerror}")
    pidns = bool(cfg.get("pidns"))
    report = devnull = -1
    if cfg.get("mountns"):
        _mount_ns(paths, pidns=pidns, include=_include_list(cfg.get("include")))
        _scratch_mounts(paths.get("scratch", []))
        if pidns:
            report, devnull = _enter_pid_ns()
    elif pidns:
        _fail("a PID namespace needs the mount namespace (for its /proc)")
    elif cfg.get("include"):
        _fail("the include overlays need the mount namespace")
    _no_new_privs()
    if cfg.get("landlock"):
        # its own terminal (a tmux pane), by name too; no other terminal
        ttys = []
        for fd in (0, 1, 2):
            try:
                ttys.append(os.ttyname(fd))
            except OSError:
                continue
        fanout = [os.path.join(d, f"{i:02x}") for d in paths.get("fanout", []) for i in range(256)]
        _landlock(
            paths.get("read", []),
            [*paths.get("write", []), *paths.get("scratch", []), *fanout, *ttys],
            paths.get("deny", []),
            paths.get("listed", []),
        )
    if cfg.get("caps", True):
        _drop_caps()
    if prog is not None:
        _seccomp(prog)
    if obs_fd >= 0:  # the command inherits all of it (as PID 2 with a PID namespace)
        os.write(obs_fd, _dumps(observed(before)).encode())
        os.close(obs_fd)
    return (report, devnull) if report >= 0 else None


def _dumps(value: object) -> str:
    """JSON of the observation (booleans, numbers, strings and objects of them) without importing
    json: strings through the C encoder json itself uses."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        try:
            from _json import encode_basestring_ascii
        except ImportError:  # another Python: the json package
            import json

            return json.dumps(value)
        return str(encode_basestring_ascii(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dumps(str(k))}: {_dumps(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot report {type(value).__name__}")


class _Scanning:
    """What the C JSON scanner reads of a decoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(f"not JSON: {name}")


def _loads(text: str) -> Any:
    """json.loads(text) through the C scanner that json itself uses, without importing json
    and re. ValueError when it is not JSON."""
    try:
        from _json import make_scanner
    except ImportError:  # another Python: the json package
        import json

        return json.loads(text)
    ws = " \t\n\r"
    start = len(text) - len(text.lstrip(ws))
    try:
        value, end = make_scanner(_Scanning())(text, start)  # type: ignore[arg-type]
    except StopIteration as exc:
        raise ValueError("not JSON") from exc
    if text[end:].strip(ws):
        raise ValueError("not JSON: extra data")
    return value


# ioctl(2) on a socket: an interface's flags
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1


def _new_netns() -> None:
    """A network namespace of this process's own, with its loopback interface up (the
    kernel gives it 127.0.0.1 and ::1) and no other interface: what a check reaches is
    itself. Nothing names the namespace: it ends with the last process in it."""
    if _libc.unshare(CLONE_NEWNET):
        _fail(f"cannot create a network namespace: {_err()}")
    sock = _libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if sock < 0:
        _fail(f"cannot bring loopback up: {_err()}")
    ifreq = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: name[16], then the flags
    if _libc.ioctl(sock, SIOCGIFFLAGS, ifreq):
        _fail(f"cannot bring loopback up: {_err()}")
    flags = int.from_bytes(ifreq.raw[16:18], sys.byteorder) | IFF_UP
    ctypes.memmove(ctypes.addressof(ifreq) + 16, flags.to_bytes(2, sys.byteorder), 2)
    if _libc.ioctl(sock, SIOCSIFFLAGS, ifreq):
        _fail(f"cannot bring loopback up: {_err()}")
    os.close(sock)


def main(argv: list[str]) -> None:
    netns = sandbox = None
    new_netns = False
    cgroups: list[str] = []  # the v2 cgroup, then v1 ones holding limits (a hybrid host)
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--cgroup" and i + 1 < len(argv):
            cgroups.append(argv[i + 1])
            i += 2
        elif argv[i] == "--netns" and i + 1 < len(argv):
            netns = argv[i + 1]
            i += 2
        elif argv[i] == "--new-netns":
            new_netns = True
            i += 1
        elif argv[i] == "--sandbox" and i + 1 < len(argv):
            sandbox = argv[i + 1]
            i += 2
        else:
            _fail(f"unknown argument {argv[i]!r}")
    cmd = argv[i + 1 :]
    if not cmd:
        _fail("no command")
    for cgroup in cgroups:
        try:
            fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError as exc:
            _fail(f"cannot join cgroup {cgroup}: {exc.strerror}")
    if netns is not None:
        try:
            fd = os.open(netns, os.O_RDONLY)
        except OSError as exc:
            _fail(f"cannot open network namespace {netns}: {exc.strerror}")
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            _fail(f"cannot enter network namespace {netns}: {_err()}")
        os.close(fd)
    elif new_netns:
        _new_netns()
    if sandbox is not None:
        try:
            cfg = _loads(sandbox)
        except ValueError:
            _fail("the sandbox description is not JSON")
        if not isinstance(cfg, dict):
            _fail("the sandbox description is not an object")
        init = apply_sandbox(cfg)
        if init is not None:
            _init(*init, cmd)
    # the command gets the dispositions Python changed at startup back (as subprocess does)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"gitsup bootstrap: cannot run {cmd[0]!r}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
