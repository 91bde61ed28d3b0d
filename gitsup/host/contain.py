"""Containment: cgroup v2 per worker, network namespaces for checks and process workers.

cgroup v2 (Linux): gitsup finds the writable v2 hierarchy (`/sys/fs/cgroup`, or the hybrid
mount at `/sys/fs/cgroup/unified`), creates one cgroup per worker below its own cgroup, and
the worker joins it *before* it executes: the argv is prefixed with the bootstrap
(`python -m gitsup.host.bootstrap`), which writes its own pid to `cgroup.procs` (and enters the
network namespace, if any) and then execs the real command. Nothing the worker starts,
`setsid()` daemons included, can leave the cgroup. Cleanup writes `cgroup.kill` (fallback:
freeze, SIGKILL every pid, thaw), verifies `cgroup.procs` is empty, then removes the cgroups
bottom-up.

Each cgroup is bounded (`Limits`: pids.max, the memory limit), in the v2 tree or, for a
controller a hybrid host binds to v1, in a v1 cgroup of the same name that the bootstrap joins
too; `Cgroup.limit_hits` reads what the kernel refused or killed. `Cgroup.freeze`/`thaw` hold
a worker between turns (docs/containment.md).

Without cgroups (mode `off`, or `auto` on a host without a writable v2 tree) a worker is
contained by its process group plus a psutil sweep of its descendants. That is weaker:
a descendant that calls `setsid()` and is reparented to init escapes both.

Network namespaces (pyroute2): acceptance checks and process workers run in a fresh
namespace with only loopback up; agents in one whose only way out is the egress gate
(gitsup/host/egress.py). `[isolation] network`: auto (default), none, host. Each is named
`gitsup-<task>-<supervisor pid>-<hex>` so that doctor and recover find what a dead
supervisor left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitsup.errors import GitsupError
from gitsup.names import TASK_MARKER

if TYPE_CHECKING:
    import psutil

_CANDIDATE_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


@dataclass(frozen=True)
class Limits:
    """Bounds on one cgroup: its number of tasks (pids.max) and its memory in bytes
    (memory.max). None: no bound."""

    pids: int | None = None
    memory: int | None = None


@dataclass(frozen=True)
class Cgroup:
    path: Path
    inode: int
    # cgroup v1 directories of the same name, for a controller this host binds to v1 (a
    # hybrid hierarchy): the worker joins them too, and the limit lives there.
    v1: tuple[Path, ...] = ()
    # What is bounded, and where: (controller, value, the directory holding the limit).
    limits: tuple[tuple[str, int, Path], ...] = ()
    # Each limit asked for that this host could not apply, with why.
    weaker: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    def join_dirs(self) -> list[Path]:
        """Every cgroup directory a process of this cgroup joins (the v2 one first)."""
        return [self.path, *self.v1]

    def describe_limits(self) -> dict[str, object]:
        return {
            what: {"max": value, "where": "cgroup v2" if d == self.path else f"cgroup v1 {d}"}
            for what, value, d in self.limits
        }

    # --- freezing -------------------------------------------------------------------------

    def freeze(self, *, timeout: float = 5.0) -> bool:
        """Stop every process inside (cgroup.freeze); True once `cgroup.events` says frozen."""
        return self._set_frozen(True, timeout)

    def thaw(self, *, timeout: float = 5.0) -> bool:
        return self._set_frozen(False, timeout)

    def frozen(self) -> bool:
        return self._events(self.path / "cgroup.events").get("frozen") == 1

    def _set_frozen(self, want: bool, timeout: float) -> bool:
        """Ask for `want` (cgroup.freeze); True once `cgroup.events` says it holds."""
        try:
            (self.path / "cgroup.freeze").write_text("1" if want else "0")
        except OSError:
            return False
        end = time.monotonic() + timeout
        while True:
            if self.frozen() == want:
                return True
            if time.monotonic() >= end or not self.path.exists():
                return False
            time.sleep(0.005)

    # --- limits ---------------------------------------------------------------------------

    @staticmethod
    def _events(path: Path) -> dict[str, int]:
        out: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                k, _, v = line.partition(" ")
                if v.strip().lstrip("-").isdigit():
                    out[k] = int(v)
        return out

    def limit_hits(self) -> list[tuple[str, str]]:
        """The limits this cgroup ran into, as (controller, one sentence): a fork refused at
        pids.max (`pids.events` max), a process the kernel killed at the memory limit (`oom_kill` of
        `memory.events`, or of `memory.oom_control` on cgroup v1)."""
        hits: list[tuple[str, str]] = []
        for what, value, d in self.limits:
            if what == "pids":
                n = self._events(d / "pids.events").get("max", 0)
                if n:
                    why = (
                        f"limit: the task reached pids.max {value} (the kernel refused {n} fork(s))"
                    )
                    hits.append((what, why))
            elif what == "memory":
                events = d / ("memory.events" if d == self.path else "memory.oom_control")
                n = self._events(events).get("oom_kill", 0)
                if n:
                    hits.append(
                        (
                            what,
                            f"limit: the task reached its memory limit {format_size(value)} "
                            f"(memory.max; the kernel killed {n} process(es))",
                        )
                    )
        return hits

    def procs(self) -> list[int]:
        """Every pid in this cgroup and its descendants."""
        pids: list[int] = []
        for d in self._tree():
            with contextlib.suppress(OSError):
                pids += [int(x) for x in (d / "cgroup.procs").read_text().split()]
        return pids

    def _tree(self) -> list[Path]:
        out: list[Path] = []
        if not self.path.exists():
            return out
        for root, dirs, _files in os.walk(self.path, topdown=True):
            out.append(Path(root))
            dirs[:] = [d for d in dirs]
        return out

    def exists(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def empty(self) -> bool:
        return not self.procs()

    def kill(self, *, timeout: float = 5.0) -> bool:
        """Kill everything inside; True when verified empty."""
        if not self.path.exists():
            return True
        killfile = self.path / "cgroup.kill"
        if killfile.exists():
            with contextlib.suppress(OSError):
                killfile.write_text("1")
        else:  # kernels before 5.14: freeze, kill every pid, thaw
            freeze = self.path / "cgroup.freeze"
            with contextlib.suppress(OSError):
                freeze.write_text("1")
            for pid in self.procs():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                freeze.write_text("0")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.empty():
                return True
            for pid in self.procs():  # stragglers that raced the kill
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        return self.empty()

    def remove(self) -> bool:
        """rmdir bottom-up; only empty cgroups can be removed."""
        ok = True
        for d in sorted(self._tree(), key=lambda p: len(p.parts), reverse=True):
            # a cgroup whose processes were just killed stays busy until the kernel has
            # released them (cgroup.procs is already empty then): retry for a moment
            for attempt in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or attempt == 49:
                        ok = False
                        break
                    time.sleep(0.02)
        # emptied with the v2 cgroup (the same processes); found by name when this Cgroup was
        # read back from a record that did not list them
        for d in self.v1 or v1_companions(self.name):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a process still exiting
                    time.sleep(0.02)
        return ok

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"path": str(self.path), "inode": self.inode}
        if self.v1:
            out["v1"] = [str(d) for d in self.v1]
        return out


def _own_cgroup_v2() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:] or "/"
    except OSError:
        return None
    return None


def _cgroup2_mounts() -> list[str]:
    mounts: list[str] = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                mounts.append(left.split(" ")[4])
    except OSError:
        pass
    return mounts or [m for m in _CANDIDATE_MOUNTS if Path(m, "cgroup.controllers").exists()]


def find_cgroup_base() -> Path | None:
    """A writable directory in the cgroup v2 tree where gitsup may create worker cgroups.

    GITSUP_CGROUP_ROOT overrides the search (a path, or "none" for a host without one)."""
    forced = os.environ.get("GITSUP_CGROUP_ROOT")
    if forced is not None:
        if forced == "none" or not Path(forced, "cgroup.procs").exists():
            return None
        return Path(forced)
    own = _own_cgroup_v2()
    if own is None:
        return None
    for mount in _cgroup2_mounts():
        base = Path(mount) / own.lstrip("/")
        if not (base / "cgroup.procs").exists():
            continue
        probe = base / f"gitsup-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return base
    return None


class CgroupUnavailable(GitsupError):
    pass


def _base_dir(base: Path) -> Path:
    d = base / "gitsup"
    d.mkdir(exist_ok=True)
    return d


def create_cgroup(name: str, base: Path | None = None, limits: Limits | None = None) -> Cgroup:
    """A new cgroup `name` under gitsup's directory of the v2 tree, bounded by `limits`.

    A limit goes into the v2 cgroup when its controller can be enabled there (`+pids`,
    `+memory` in the parents' `cgroup.subtree_control`); on a hybrid host that binds the
    controller to a v1 hierarchy, into a v1 cgroup of the same name that the worker joins
    too. A limit neither can hold is named in `weaker`."""
    b = base or find_cgroup_base()
    if b is None:
        raise CgroupUnavailable("no writable cgroup v2 hierarchy on this host")
    parent = _base_dir(b)
    path = parent / name
    path.mkdir()
    cg = Cgroup(path, os.stat(path).st_ino)
    if limits is None:
        return cg
    v1: list[Path] = []
    applied: list[tuple[str, int, Path]] = []
    weaker: list[str] = []
    for what, value in (("pids", limits.pids), ("memory", limits.memory)):
        if value is None:
            continue
        where, why = _limit_v2(b, parent, path, what, value)
        if where is None:
            where, why1 = _limit_v1(name, what, value)
            if where is not None:
                v1.append(where)
            else:
                why = f"{why}; {why1}"
        if where is None:
            weaker.append(f"{what} limit not enforced: {why}")
        else:
            applied.append((what, value, where))
    return Cgroup(path, cg.inode, tuple(v1), tuple(applied), tuple(weaker))


_V2_FILE = {"pids": "pids.max", "memory": "memory.max"}
_V1_FILE = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}


def _limit_v2(
    base: Path, parent: Path, path: Path, what: str, value: int
) -> tuple[Path | None, str]:
    """Write the limit in the v2 cgroup, enabling the controller on the way down."""
    for d in (base, parent):
        try:
            enabled = (d / "cgroup.subtree_control").read_text().split()
            if what not in enabled:
                (d / "cgroup.subtree_control").write_text(f"+{what}")
        except OSError as exc:
            if what not in (d / "cgroup.controllers").read_text().split():
                return None, f"the {what} controller is not available in cgroup v2 at {d}"
            return None, f"cannot enable the {what} controller at {d}: {exc.strerror}"
    try:
        (path / _V2_FILE[what]).write_text(str(value))
    except OSError as exc:
        return None, f"cannot write {_V2_FILE[what]}: {exc.strerror}"
    return path, ""


def _v1_hierarchy(controller: str) -> Path | None:
    """This process's cgroup directory in the v1 hierarchy that holds `controller`."""
    own = None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, rel = line.split(":", 2)
            if controller in ctrls.split(","):
                own = rel
    except (OSError, ValueError):
        return None
    if own is None:
        return None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(" "), right.split(" ")
        if len(rfields) < 3 or rfields[0] != "cgroup" or controller not in rfields[2].split(","):
            continue
        root, mount = fields[3], fields[4]
        rel = own
        if root != "/" and (own == root or own.startswith(root + "/")):
            rel = own[len(root) :]
        d = Path(mount) / rel.lstrip("/")
        if d.is_dir():
            return d
    return None


def _limit_v1(name: str, what: str, value: int) -> tuple[Path | None, str]:
    own = _v1_hierarchy(what)
    if own is None:
        return None, f"and no cgroup v1 hierarchy holds {what} either"
    d = own / "gitsup" / name
    try:
        d.parent.mkdir(exist_ok=True)
        d.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        return None, f"cannot create a cgroup in the v1 {what} hierarchy {own}: {exc.strerror}"
    try:
        (d / _V1_FILE[what]).write_text(str(value))
        swap = d / "memory.memsw.limit_in_bytes"
        if what == "memory" and swap.exists():  # no escape into swap
            swap.write_text(str(value))
    except OSError as exc:
        with contextlib.suppress(OSError):
            d.rmdir()
        return None, f"cannot write {_V1_FILE[what]} in {d}: {exc.strerror}"
    return d, ""


def v1_companions(name: str) -> list[Path]:
    """The cgroup v1 directories named `name` that gitsup made for limits on this host."""
    out = []
    for what in ("pids", "memory"):
        own = _v1_hierarchy(what)
        if own is not None and (own / "gitsup" / name).is_dir():
            out.append(own / "gitsup" / name)
    return out


def format_size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def resolve_mode(mode: str) -> Path | None:
    """The cgroup base for `mode` (auto|required|off); raises for required-but-missing."""
    if mode == "off":
        return None
    base = find_cgroup_base()
    if base is None and mode == "required":
        raise CgroupUnavailable(
            'cgroup containment is required ([isolation] cgroup = "required") but this host has '
            "no writable cgroup v2 hierarchy",
            hint='run as a user allowed to create cgroups, or set [isolation] cgroup = "auto"',
        )
    return base


def list_gitsup_cgroups(base: Path | None = None) -> list[Cgroup]:
    b = base or find_cgroup_base()
    if b is None or not (b / "gitsup").is_dir():
        return []
    out = []
    for d in sorted((b / "gitsup").iterdir()):
        if d.is_dir():
            with contextlib.suppress(OSError):
                out.append(Cgroup(d, os.stat(d).st_ino))
    return out


def cgroup_from_dict(d: object) -> Cgroup | None:
    if isinstance(d, dict) and isinstance(d.get("path"), str) and isinstance(d.get("inode"), int):
        v1 = d.get("v1")
        dirs = tuple(Path(p) for p in v1 if isinstance(p, str)) if isinstance(v1, list) else ()
        return Cgroup(Path(d["path"]), int(d["inode"]), dirs)
    return None


# --- the bootstrap argv ---------------------------------------------------------------------


def bootstrap_argv(
    argv: list[str],
    *,
    cgroup: Cgroup | None,
    netns: str | None,
    sandbox: Sequence[str] = (),
    new_netns: bool = False,
) -> list[str]:
    """`sandbox`: the bootstrap's `--sandbox JSON` arguments (gitsup.host.sandbox.SandboxPlan.argv);
    `new_netns` (with `netns` None): the bootstrap makes a loopback-only network namespace of
    the command's own."""
    if cgroup is None and netns is None and not sandbox and not new_netns:
        return argv
    from gitsup.host.proc import gitsup_python

    # Runs as root in the task's worktree, before the sandbox: only gitsup's own code.
    pre = gitsup_python("gitsup.host.bootstrap", stdlib_only=True)
    if cgroup is not None:
        for d in cgroup.join_dirs():
            pre += ["--cgroup", str(d)]
    if netns is not None:
        pre += ["--netns", netns]
    elif new_netns:
        pre.append("--new-netns")
    return [*pre, *sandbox, "--", *argv]


# --- network namespaces ----------------------------------------------------------------------


NETNS_DIR = "/var/run/netns"


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library for pyroute2's namespace calls. Given none, pyroute2 looks it up with
    `ctypes.util.find_library`, which runs `ldconfig -p` in each child it forks: two
    processes per namespace."""
    return ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def isolated_netns(label: str) -> Iterator[str]:
    """A fresh network namespace with only loopback up; yields its path; removed afterwards."""
    try:
        from pyroute2 import NetNS, netns
    except ImportError as exc:  # pragma: no cover - dependency
        raise GitsupError("network isolation needs pyroute2") from exc
    name = f"gitsup-{label}-{os.getpid()}-{os.urandom(3).hex()}"
    try:
        netns.create(name, libc=_libc())
    except (OSError, Exception) as exc:
        raise GitsupError(
            f"cannot create a network namespace: {exc}",
            hint='network = "none" needs CAP_SYS_ADMIN; use network = "host" here',
        ) from exc
    try:
        ns = NetNS(name, libc=_libc())
        try:
            idx = ns.link_lookup(ifname="lo")
            if idx:
                ns.link("set", index=idx[0], state="up")
        finally:
            ns.close()
        yield os.path.join(NETNS_DIR, name)
    finally:
        with contextlib.suppress(Exception):
            netns.remove(name, libc=_libc())


def netns_available() -> str | None:
    """None when this host can create network namespaces, else why not (cheap: a thread
    unshares its own network namespace and ends)."""
    import importlib.util

    if importlib.util.find_spec("pyroute2") is None:
        return "pyroute2 is not installed"
    return unshare_netns_refused()


def unshare_netns_refused() -> str | None:
    """None when this process may unshare a network namespace (what the bootstrap's
    `--new-netns` does; pyroute2 not needed), else why not."""
    import threading

    err: list[str] = []

    def probe() -> None:
        if _libc().unshare(0x40000000) != 0:  # CLONE_NEWNET, this thread only
            err.append(os.strerror(ctypes.get_errno()))

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    if err:
        return f"cannot create network namespaces ({err[0]}; needs CAP_SYS_ADMIN)"
    return None


@dataclass(frozen=True)
class NamedNetns:
    name: str
    label: str
    pid: int

    @property
    def path(self) -> str:
        return os.path.join(NETNS_DIR, self.name)


def list_gitsup_netns() -> list[NamedNetns]:
    """gitsup's named network namespaces: gitsup-<label>-<pid>-<hex>."""
    try:
        names = sorted(os.listdir(NETNS_DIR))
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith("gitsup-"):
            continue
        head, pid, _hex = [*name[7:].rsplit("-", 2), "", ""][:3]
        if head and pid.isdigit():
            out.append(NamedNetns(name, head, int(pid)))
    return out


def remove_netns(name: str) -> bool:
    from pyroute2 import netns

    try:
        netns.remove(name, libc=_libc())
    except Exception:
        return False
    return not os.path.exists(os.path.join(NETNS_DIR, name))


def executable_problems(path: str) -> list[str]:
    """A worker executable must exist, be executable, and not be writable by everyone."""
    import stat

    try:
        st = os.stat(path)
    except OSError:
        return [f"worker executable {path} not found"]
    problems = []
    if not os.access(path, os.X_OK):
        problems.append(f"worker executable {path} is not executable")
    if st.st_mode & stat.S_IWOTH:
        problems.append(f"worker executable {path} is world-writable")
    return problems


def sweep_marked(task: str, *, grace: float = 2.0, var: str = TASK_MARKER) -> list[int]:
    """Kill processes that carry the task's marker (`var`, GITSUP_TASK) in their environment:
    the fallback that catches `setsid` descendants when there is no cgroup."""
    import psutil

    found = marked_processes(task, var=var)
    for p in found:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(found, timeout=grace)
    return [p.pid for p in found]


def marked_processes(task: str, *, var: str = TASK_MARKER) -> list[psutil.Process]:
    """Processes (other than this one) whose environment carries `var`=<task>."""
    import psutil

    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(var) == task:
                found.append(p)
    return found
