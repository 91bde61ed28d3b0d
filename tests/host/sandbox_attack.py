"""A hostile task: tries every way out of its sandbox and reports each result.

    python sandbox_attack.py LABEL TARGETS.json [--then-commit] [--grandchild]

Each attempt is recorded as "ESCAPED ..." when it worked and "blocked: ..." otherwise, in
$TMPDIR/attack-LABEL.json (the task's private temp dir, which the test reads afterwards)
and on stdout; each attempt's result is also appended to $TMPDIR/attack-LABEL.jsonl the
moment it is known, so that what ran is on record whatever fails afterwards. With --grandchild the attacks also run in a double-forked, setsid()
grandchild; with --then-commit the task then does its real work and commits it.
Standard library only: it runs with whatever Python the task has.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import pathlib
import socket
import subprocess
import sys
import time


def _blocked(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"blocked: {errno.errorcode.get(exc.errno, exc.errno)}"
    return f"blocked: {type(exc).__name__}: {exc}"


# where each attempt's result goes the moment it is known ($TMPDIR/attack-LABEL.jsonl, one
# {"attack": name, "result": ...} per line): whatever fails later, what ran is on record
_progress: list[str] = []


def attempt(results: dict[str, str], name: str, fn: object) -> None:
    try:
        detail = fn()  # type: ignore[operator]
    except BaseException as exc:  # every failure is a result
        results[name] = _blocked(exc)
    else:
        results[name] = f"ESCAPED {detail if detail is not None else ''}".strip()
    if _progress:
        with open(_progress[0], "a") as f:
            f.write(json.dumps({"attack": name, "result": results[name]}) + "\n")


def _append(path: str, data: bytes = b"# sandbox escape\n") -> None:
    with open(path, "ab") as f:
        f.write(data)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _git(*args: str) -> None:
    res = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise PermissionError(f"git {args[0]} exited {res.returncode}: {res.stderr.strip()[-200:]}")


def _user_ref(common: str, ref: str) -> str:
    res = subprocess.run(
        ["git", f"--git-dir={common}", "rev-parse", "-q", "--verify", ref],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return res.stdout.strip()


def _git_against_user_ref(common: str, ref: str, *args: str) -> str:
    """Run git in the task (its own repository) and judge by the user's ref: a task with a
    private Git dir may change its own refs; the user's must not move."""
    before = _user_ref(common, ref)
    _git(*args)
    if _user_ref(common, ref) == before:
        raise PermissionError(f"only the task's own repository changed; the user's {ref} did not")
    return f"moved the user's {ref}"


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f"read {len(f.read())} bytes"


def _read_some(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return f"read {len(os.read(fd, 512))} bytes"
    except BlockingIOError:
        return "opened"
    finally:
        os.close(fd)


def _connect(path: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(3)
        s.connect(path)
        with contextlib.suppress(OSError):  # the listener may have closed: connecting is it
            s.sendall(b"escaped\n")
        return "connected"
    finally:
        s.close()


def _own_cgroup() -> str:
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise LookupError("no cgroup v2 line")


def _move_cgroup(cgroup_root: str) -> str:
    own = _own_cgroup().strip("/")
    parent = os.path.dirname(own)
    for target in (parent, ""):
        _write(os.path.join(cgroup_root, target, "cgroup.procs"), str(os.getpid()).encode())
        if _own_cgroup().strip("/") != own:
            return f"moved to /{target}"
    raise PermissionError("still in its own cgroup")


def _setns(path: str) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)
    return "entered"


def _run(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise PermissionError(f"{argv[0]} exited {res.returncode}: {res.stderr.strip()[-200:]}")
    return "ran"


def _mount(target: str) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    os.makedirs(target, exist_ok=True)
    if libc.mount(b"none", target.encode(), b"tmpfs", 0, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return "mounted"


def _rewrite_same(path: str) -> str:
    """Write a file's current content back: harmless if it works, and proves it did."""
    data = pathlib.Path(path).read_bytes()
    _write(path, data)
    return "wrote"


def _replace_object(path: str) -> str:
    tmp = path + ".evil"
    _write(tmp, b"not the object\n")
    os.replace(tmp, path)
    return "replaced"


def _via_link(target: str, make: object) -> str:
    """Link a protected file into the writable worktree, then write through the link."""
    link = os.path.join(os.getcwd(), f"link-attack-{make.__name__}")  # type: ignore[attr-defined]
    try:
        make(target, link)  # type: ignore[operator]
        _append(link)
    finally:
        if os.path.lexists(link):
            os.unlink(link)
    return "wrote through a link"


def _abstract(name: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(3)
        s.connect("\0" + name)
        return "connected"
    finally:
        s.close()


_libc = ctypes.CDLL(None, use_errno=True)
_NR = {  # x86_64, aarch64
    "io_uring_setup": (425, 425),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "clone": (56, 220),
    "add_key": (248, 217),
}
CLONE_NEW = {
    "ns": 0x00020000, "cgroup": 0x02000000, "uts": 0x04000000, "ipc": 0x08000000,
    "user": 0x10000000, "pid": 0x20000000, "net": 0x40000000, "time": 0x00000080,
}  # fmt: skip


def _sys(name: str, *args: object) -> int:
    nr = _NR[name][0 if os.uname().machine == "x86_64" else 1]
    res = _libc.syscall(nr, *args)
    if res < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return int(res)


def _fd_syscall(name: str, *args: object) -> str:
    os.close(_sys(name, *args))
    return f"{name} gave a descriptor"


def _in_child(fn: object) -> str:
    """Run `fn` in a forked child (a namespace it enters stays there); the child's exit
    status carries the errno."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()  # type: ignore[operator]
        except OSError as exc:
            code = exc.errno or 1
        except BaseException:
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise OSError(code, os.strerror(code) if code < 255 else "failed")
    return "done"


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _clone_newuser() -> str:
    """clone(2) with CLONE_NEWUSER (a raw system call: the child only exits)."""
    pid = _sys("clone", CLONE_NEW["user"] | 17, 0, 0, 0, 0)  # SIGCHLD
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "a child in a new user namespace"


def _perf_event_open() -> str:
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 4).value = 128  # size
    ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 5) | (1 << 6)  # no kernel, no hv
    # PERF_TYPE_SOFTWARE (1), PERF_COUNT_SW_CPU_CLOCK (0): this process, any CPU
    ctypes.c_uint32.from_buffer(attr, 0).value = 1
    return _fd_syscall("perf_event_open", attr, 0, -1, -1, 0)


def _bpf() -> str:
    # BPF_PROG_LOAD of a socket filter that returns 0: mov r0, 0; exit
    insns = (ctypes.c_uint64 * 2)(0x00000000000000B7, 0x0000000000000095)
    lic = ctypes.create_string_buffer(b"GPL")
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = 1  # BPF_PROG_TYPE_SOCKET_FILTER
    ctypes.c_uint32.from_buffer(attr, 4).value = 2
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(insns)
    ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(lic)
    return _fd_syscall("bpf", 5, attr, 128)


def _keyctl() -> str:
    # add_key("user", "gitsup-attack", "x", 1, KEY_SPEC_PROCESS_KEYRING)
    _sys("add_key", b"user", b"gitsup-attack", b"x", 1, -2)
    return "added a key"


def _ptrace_sibling() -> str:
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        if _libc.ptrace(16, pid, 0, 0) != 0:  # PTRACE_ATTACH
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        os.waitpid(pid, 0)
        _libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
        return f"attached to {pid}"
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def _cmdlines() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = pathlib.Path("/proc", name, "cmdline").read_bytes()
            except OSError:
                continue
            out[int(name)] = raw.replace(b"\0", b" ").decode(errors="replace")
    return out


def _supervisor(goal: str) -> int:
    """The supervisor's pid: the parent (without a PID namespace), else any visible
    process whose command line holds the task's goal."""
    ppid = os.getppid()
    procs = _cmdlines()
    for pid in [ppid, *procs]:
        if goal in procs.get(pid, ""):
            return pid
    raise ProcessLookupError(
        f"no visible process has the goal in its command line ({len(procs)} visible)"
    )


def _outside_process(marker: str) -> str:
    seen = [pid for pid, cmd in _cmdlines().items() if marker in cmd]
    if not seen:
        raise ProcessLookupError("no process outside the task is visible")
    return f"saw pid {seen[0]}"


def _status_fields() -> dict[str, str]:
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def _privileges() -> str:
    """What the process itself sees: NoNewPrivs 1, no effective capability, a seccomp filter."""
    st = _status_fields()
    weak = {
        k: st.get(k)
        for k, good in (("NoNewPrivs", "1"), ("CapEff", "0000000000000000"), ("Seccomp", "2"))
        if st.get(k) != good
    }
    if weak:
        return f"weak: {weak}"
    raise PermissionError("NoNewPrivs 1, CapEff 0, Seccomp 2")


def attacks(t: dict[str, object]) -> dict[str, str]:
    r: dict[str, str] = {}
    common = str(t["common_dir"])
    home = str(t["home"])
    a = attempt
    a(r, "write_checkout", lambda: _append(os.path.join(str(t["checkout"]), "calc.py")))
    a(r, "write_home_gitconfig", lambda: _append(os.path.join(home, ".gitconfig")))
    a(r, "write_repo_config", lambda: _append(os.path.join(common, "config")))
    a(r, "write_hook", lambda: _write(os.path.join(common, "hooks", "pre-push"), b"#!/bin/sh\n"))
    a(r, "write_packed_refs", lambda: _append(os.path.join(common, "packed-refs")))
    main_file = os.path.join(common, "refs", "heads", "main")
    a(r, "write_main_ref", lambda: _write(main_file, (str(t["evil_commit"]) + "\n").encode()))
    a(
        r,
        "git_update_ref_main",
        lambda: _git_against_user_ref(
            common, "refs/heads/main", "update-ref", "refs/heads/main", str(t["evil_commit"])
        ),
    )
    notes = os.path.join(common, "refs", "notes", "sup")
    a(r, "write_notes_ref", lambda: _write(notes, (str(t["evil_commit"]) + "\n").encode()))
    a(
        r,
        "git_notes_forge",
        lambda: _git_against_user_ref(
            common, "refs/notes/sup", "notes", "--ref=sup", "add", "-f", "-m", "forged", "HEAD"
        ),
    )
    a(r, "push_remote_main", lambda: _git("push", str(t["remote"]), "HEAD:refs/heads/main"))
    if t.get("replace_object"):
        a(r, "replace_object", lambda: _replace_object(str(t["object"])))
    a(r, "overwrite_object", lambda: _append(str(t["object"])))
    a(r, "hardlink_repo_config", lambda: _via_link(os.path.join(common, "config"), os.link))
    a(r, "symlink_repo_config", lambda: _via_link(os.path.join(common, "config"), os.symlink))
    a(r, "rewrite_dotgit_file", lambda: _write(".git", b"gitdir: /elsewhere\n"))
    a(r, "remove_dotgit_file", lambda: os.unlink(".git"))
    a(r, "read_ssh_key", lambda: _read(os.path.join(home, ".ssh", "id_ed25519")))
    a(r, "read_integration_key", lambda: _read(str(t["integration_key"])))
    a(r, "read_etc_shadow", lambda: _read("/etc/shadow"))
    a(r, "read_kernel_log", lambda: _read_some("/dev/kmsg"))
    if t.get("block_device"):
        a(r, "read_block_device", lambda: _read_some(str(t["block_device"])))
    goal = str(t["goal"])
    a(r, "read_supervisor_environ", lambda: _read(f"/proc/{_supervisor(goal)}/environ"))
    a(r, "read_supervisor_cmdline", lambda: _read(f"/proc/{_supervisor(goal)}/cmdline"))
    a(r, "signal_supervisor", lambda: os.kill(_supervisor(goal), 0))
    a(r, "see_outside_process", lambda: _outside_process(str(t["outside_marker"])))
    a(r, "weak_privileges", _privileges)
    a(r, "move_cgroup", lambda: _move_cgroup(str(t["cgroup_root"])))
    a(r, "write_cgroupfs", lambda: _rewrite_same(os.path.join(
        str(t["cgroup_root"]), _own_cgroup().strip("/"), "cgroup.max.depth")))  # fmt: skip
    a(r, "write_proc_sys", lambda: _rewrite_same("/proc/sys/kernel/domainname"))
    a(r, "setns_init_net", lambda: _setns("/proc/1/ns/net"))
    a(r, "setns_init_mnt", lambda: _setns("/proc/1/ns/mnt"))
    a(r, "nsenter_init", lambda: _run(["nsenter", "-t", "1", "-n", "-m", "true"]))
    a(r, "unshare_user", lambda: _run(["unshare", "-U", "-r", "true"]))
    for kind, flag in CLONE_NEW.items():
        a(r, f"unshare_{kind}_ns", lambda flag=flag: _in_child(lambda: _unshare(flag)))
    a(r, "unshare_user_then_all", lambda: _in_child(lambda: _unshare(sum(CLONE_NEW.values()))))
    a(r, "clone_newuser", _clone_newuser)
    a(r, "io_uring_setup", lambda: _fd_syscall("io_uring_setup", 1, (ctypes.c_uint8 * 120)()))
    a(r, "bpf_prog_load", _bpf)
    a(r, "perf_event_open", _perf_event_open)
    a(r, "userfaultfd", lambda: _fd_syscall("userfaultfd", 1 | os.O_CLOEXEC))  # user mode only
    a(r, "keyctl_add_key", _keyctl)
    a(r, "ptrace_sibling", _ptrace_sibling)
    a(r, "mount_tmpfs", lambda: _mount(os.path.join(os.environ["TMPDIR"], "mnt-attack")))
    for i, sock in enumerate(t["sockets"]):  # type: ignore[attr-defined]
        a(r, f"connect_host_socket_{i}", lambda sock=sock: _connect(str(sock)))
    a(r, "connect_abstract_socket", lambda: _abstract(str(t["abstract"])))
    record = os.path.join(common, "sup", "tasks", os.environ["GITSUP_TASK"], "task.json")
    a(r, "write_supervisor_record", lambda: _append(record))
    return r


def progress(label: str) -> None:
    """Record each attempt of `label` in $TMPDIR/attack-LABEL.jsonl as it completes."""
    path = pathlib.Path(os.environ["TMPDIR"]) / f"attack-{label}.jsonl"
    path.unlink(missing_ok=True)
    _progress[:] = [str(path)]


def report(label: str, results: dict[str, str]) -> None:
    out = pathlib.Path(os.environ["TMPDIR"]) / f"attack-{label}.json"
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    os.replace(tmp, out)
    print(json.dumps({label: results}, sort_keys=True), flush=True)


def main() -> None:
    label, targets_file = sys.argv[1], sys.argv[2]
    t = json.loads(pathlib.Path(targets_file).read_text())
    progress(label)
    report(label, attacks(t))
    if "--grandchild" in sys.argv:
        done = pathlib.Path(os.environ["TMPDIR"]) / "attack-grandchild.json"
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                try:
                    progress("grandchild")
                    report("grandchild", attacks(t))
                finally:
                    os._exit(0)
            os._exit(0)
        os.wait()
        end = time.monotonic() + 60
        while not done.exists() and time.monotonic() < end:
            time.sleep(0.05)
    if "--then-commit" in sys.argv:
        p = pathlib.Path("calc.py")
        p.write_text(p.read_text().replace("a - b", "a + b"))
        subprocess.run(["git", "commit", "-q", "-am", "fix add"], check=True)
        print("fixed and committed", flush=True)


if __name__ == "__main__":
    main()
