"""Who is pushing: a task (its worktree, its worker, anything carrying its marker) or not.

Standard library only. A pusher is inside a task when:
- `GITSUP_TASK` is set in the environment (the supervisor marks every worker);
- the repository's git dir is a linked worktree named after a task id that has a
  record under `$GIT_COMMON_DIR/sup/tasks/<id>/`;
- the cwd (or `$PWD`) is inside a task worktree recorded there;
- an ancestor process is a recorded task worker, or has its cwd in a task
  worktree (Linux `/proc`; elsewhere this check is skipped).

The server-side gate cannot see the client's repository; it checks the
environment (inherited over local transports) and, on Linux, the cwd of the
`git` processes that lead to it (the pushing `git push` for a local path remote).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from gitsup.boundary.evaluate import Pusher
from gitsup.names import RECORD_FILE, TASK_MARKER

_HEX = frozenset("0123456789abcdef")


def is_task_id(name: str) -> bool:
    """`YYYYMMDD-xxxxxx` (gitsup.ids), checked without importing `re`."""
    return (
        len(name) == 15
        and name[8] == "-"
        and name[:8].isdigit()
        and name[:8].isascii()
        and set(name[9:]) <= _HEX
    )


_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "busybox"})


class TaskRef(NamedTuple):
    id: str
    worktree: str
    worker_pid: int | None
    worker_start: float | None


def _within(path: str, root: str) -> bool:
    if not root:
        return False
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def _real(path: str) -> str:
    try:
        return os.path.realpath(path)
    except OSError:
        return path


def task_records(common_dir: str) -> list[TaskRef]:
    """The tasks recorded in this repository (read lazily; one small JSON file each)."""
    tasks = os.path.join(common_dir, "sup", "tasks")
    try:
        names = os.listdir(tasks)
    except OSError:
        return []
    out: list[TaskRef] = []
    for name in names:
        if not is_task_id(name):
            continue
        import json

        try:
            with open(os.path.join(tasks, name, RECORD_FILE), "rb") as fh:
                raw = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(raw, dict):
            continue
        worker = raw.get("worker") if isinstance(raw.get("worker"), dict) else {}
        pid = worker.get("pid") if isinstance(worker, dict) else None
        start = worker.get("start_time") if isinstance(worker, dict) else None
        wt = raw.get("worktree")
        out.append(
            TaskRef(
                id=name,
                worktree=_real(wt) if isinstance(wt, str) and wt else "",
                worker_pid=pid if isinstance(pid, int) else None,
                worker_start=float(start) if isinstance(start, int | float) else None,
            )
        )
    return out


def task_of_git_dir(git_dir: str, common_dir: str) -> str | None:
    """The task whose linked worktree `git_dir` is (`<common>/worktrees/<task id>`), or
    whose private Git dir it is (`<common>/sup/tasks/<task id>/git`)."""
    parent, name = os.path.split(os.path.normpath(git_dir))
    if name == "git":
        tasks, task = os.path.split(parent)
        if (
            os.path.basename(tasks) == "tasks"
            and os.path.basename(os.path.dirname(tasks)) == "sup"
            and is_task_id(task)
            and os.path.exists(os.path.join(parent, RECORD_FILE))
        ):
            return task
        return None
    if os.path.basename(parent) != "worktrees" or not is_task_id(name):
        return None
    if os.path.exists(os.path.join(common_dir, "sup", "tasks", name, RECORD_FILE)):
        return name
    return None


def task_of_path(path: str) -> str | None:
    """Is `path` inside a gitsup task worktree (of any repository)? Reads `.git` files only."""
    d = os.path.abspath(path)
    while True:
        dotgit = os.path.join(d, ".git")
        if os.path.isdir(dotgit):
            return None  # a main checkout
        if os.path.isfile(dotgit):
            try:
                with open(dotgit, encoding="utf-8", errors="replace") as fh:
                    text = fh.read().strip()
                if not text.startswith("gitdir:"):
                    return None
                gd = os.path.join(d, text[len("gitdir:") :].strip())
                try:
                    with open(os.path.join(gd, "commondir"), encoding="utf-8") as fh:
                        common = os.path.realpath(os.path.join(gd, fh.read().strip()))
                except FileNotFoundError:
                    common = os.path.realpath(gd)  # a task's private Git dir
            except OSError:
                return None
            return task_of_git_dir(os.path.realpath(gd), common)
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


# --- processes (Linux /proc) -------------------------------------------------------------


class Proc(NamedTuple):
    pid: int
    ppid: int
    comm: str
    exe: str
    cwd: str
    start: float | None  # seconds since the epoch, like psutil's create_time


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def read_proc(pid: int, boot: float | None) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm is in parentheses and may contain spaces or parentheses itself.
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        ppid = int(fields[1])
        ticks = int(fields[19])
    except (IndexError, ValueError):
        return None
    start = None if boot is None else boot + ticks / os.sysconf("SC_CLK_TCK")
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return Proc(pid, ppid, comm, exe, cwd, start)


def ancestors(limit: int = 64) -> Iterator[Proc]:
    """The parent, grandparent, ... of this process (nothing where /proc is missing)."""
    if not os.path.isdir("/proc/self"):
        return
    boot = _boot_time()
    pid = os.getppid()
    for _ in range(limit):
        if pid <= 1:
            return
        p = read_proc(pid, boot)
        if p is None:
            return
        yield p
        pid = p.ppid


def _is_git(p: Proc) -> bool:
    return os.path.basename(p.exe) == "git" or p.comm.startswith("git")


def _is_shell(p: Proc) -> bool:
    return os.path.basename(p.exe) in _SHELLS or p.comm in _SHELLS


# --- the two sides -------------------------------------------------------------------------


def _env_task(env: Mapping[str, str]) -> Pusher | None:
    task = env.get(TASK_MARKER, "").strip()
    if task:
        return Pusher(task, f"{TASK_MARKER} is set")
    return None


def client_pusher(
    *, git_dir: str, common_dir: str, env: Mapping[str, str], cwd: str, walk: bool = True
) -> Pusher:
    """The pusher as seen by the pre-push hook in the pushing repository."""
    found = _env_task(env)
    if found:
        return found
    task = task_of_git_dir(git_dir, common_dir)
    if task:
        return Pusher(task, "pushing from its worktree")
    records = task_records(common_dir)
    if not records:
        return Pusher()
    here = {_real(cwd), _real(env.get("PWD", cwd))}
    for r in records:
        if any(_within(h, r.worktree) for h in here):
            return Pusher(r.id, f"the working directory is inside {r.worktree}")
    if walk:
        workers = {r.worker_pid: r for r in records if r.worker_pid}
        for p in ancestors():
            r_w = workers.get(p.pid)
            if r_w is not None and (
                r_w.worker_start is None or p.start is None or abs(p.start - r_w.worker_start) < 1.0
            ):
                return Pusher(r_w.id, f"process {p.pid} is the task's worker")
            cwd_p = _real(p.cwd) if p.cwd else ""
            for r in records:
                if cwd_p and _within(cwd_p, r.worktree):
                    return Pusher(r.id, f"process {p.pid} ({p.comm}) works in {r.worktree}")
    return Pusher()


def server_pusher(*, env: Mapping[str, str], walk: bool = True) -> Pusher:
    """The pusher as seen by the pre-receive gate on the receiving repository."""
    found = _env_task(env)
    if found:
        return found
    if not walk:
        return Pusher()
    prev_git = True  # the hook's own parent chain starts at git receive-pack (maybe via sh)
    for p in ancestors(limit=12):
        if _is_git(p):
            prev_git = True
            task = task_of_path(p.cwd) if p.cwd else None
            if task:
                return Pusher(task, f"the pushing git process works in task {task}'s worktree")
            continue
        if _is_shell(p) or prev_git:
            # a shell between git processes (or the launcher); look one step further
            prev_git = False
            continue
        break
    return Pusher()
