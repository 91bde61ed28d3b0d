"""The task sandbox, host side: what the host supports, what a task may read and write,
the environment it gets, and the description the bootstrap enforces (gitsup/host/bootstrap.py).

Everything a task runs (the worker and its descendants, acceptance checks, the reviewer and
the decider) starts through the bootstrap with one `--sandbox` description. The rules are
data: the `[sandbox]` table of policies/default.toml, extended by a repository's
`.gitsup/policy.toml` `[sandbox]` table (additive: more readable/writable paths, more
allowed variables, more denied or hidden paths).

Modes (`[sandbox] mode` in the task spec, else git config `sup.sandbox`, else `auto`):
`auto` enforces what the host supports and records what is missing; `required` refuses to
run anything when something is missing; `off` runs as before (no sandbox).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from gitsup.errors import GitsupError
from gitsup.host.claude_config import ClaudeConfig, claude_config

Mode = Literal["auto", "required", "off"]
MODES: tuple[Mode, ...] = ("auto", "required", "off")
FEATURES = ("landlock", "mountns")

# Variables the sandbox always sets; the host's values never pass.
_FORCED = ("HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")


@dataclass(frozen=True)
class Rules:
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    def merged(self, other: Rules) -> Rules:
        return Rules(
            *(tuple(dict.fromkeys((*getattr(self, k), *getattr(other, k)))) for k in _KEYS)
        )


_KEYS = ("read", "write", "deny", "hide", "env")


def _rules_from(table: object, source: str) -> Rules:
    if not isinstance(table, Mapping):
        raise GitsupError(f"invalid policy file {source}: [sandbox] must be a table")
    values: dict[str, tuple[str, ...]] = {}
    for k, v in table.items():
        if k not in _KEYS:
            raise GitsupError(
                f"invalid policy file {source}: key 'sandbox.{k}': unknown key",
                hint="[sandbox] takes read, write, deny, hide and env (docs/sandbox.md)",
            )
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise GitsupError(f"invalid policy file {source}: key 'sandbox.{k}': a list of strings")
        if k != "env" and not all(x.startswith(("/", "~")) for x in v):
            raise GitsupError(
                f"invalid policy file {source}: key 'sandbox.{k}': paths must be absolute "
                "(or start with ~)"
            )
        values[k] = tuple(v)
    return Rules(**values)


@cache
def default_rules() -> Rules:
    import importlib.resources

    text = (importlib.resources.files("gitsup.policies") / "default.toml").read_text("utf-8")
    return _rules_from(tomllib.loads(text).get("sandbox", {}), "gitsup/policies/default.toml")


def load_rules(repo_root: Path | None) -> Rules:
    """Default rules plus `<repo_root>/.gitsup/policy.toml` [sandbox], if any."""
    rules = default_rules()
    if repo_root is None:
        return rules
    path = repo_root / ".gitsup" / "policy.toml"
    try:
        text = path.read_text("utf-8")
    except OSError:
        return rules
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GitsupError(f"policy file {path} is not valid TOML: {exc}") from None
    if "sandbox" not in data:
        return rules
    return rules.merged(_rules_from(data["sandbox"], str(path)))


# --- what the host supports -----------------------------------------------------------------


@dataclass(frozen=True)
class HostSupport:
    landlock_abi: int
    mountns: bool
    missing: tuple[str, ...]  # feature: why

    @property
    def landlock(self) -> bool:
        return self.landlock_abi > 0


def _refused() -> set[str]:
    return {x for x in os.environ.get("GITSUP_SANDBOX_REFUSE", "").split(",") if x}


def _has_cap_sys_admin() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 21))
    except (OSError, ValueError):
        pass
    return False


def _userns_allowed() -> bool:
    for f, bad in (("/proc/sys/kernel/unprivileged_userns_clone", "0"),
                   ("/proc/sys/user/max_user_namespaces", "0")):  # fmt: skip
        try:
            if Path(f).read_text().strip() == bad:
                return False
        except OSError:
            continue
    return True


def probe() -> HostSupport:
    """What this host can enforce. GITSUP_SANDBOX_REFUSE=landlock,mountns simulates a host
    without them (a testing knob; the bootstrap refuses them too)."""
    refused = _refused()
    missing: list[str] = []
    abi = 0
    if sys.platform == "linux":
        from gitsup.host.bootstrap import landlock_abi

        abi = landlock_abi()
    if "landlock" in refused:
        abi = 0
    if abi == 0:
        missing.append("landlock: the kernel offers no Landlock (needs Linux 5.13+, enabled LSM)")
    mountns = sys.platform == "linux" and (
        _has_cap_sys_admin() if os.geteuid() == 0 else _userns_allowed()
    )
    if "mountns" in refused:
        mountns = False
    if not mountns:
        missing.append("mountns: cannot create a private mount namespace (no CAP_SYS_ADMIN, "
                       "no unprivileged user namespaces)")  # fmt: skip
    return HostSupport(abi, mountns, tuple(missing))


# --- one task's sandbox ---------------------------------------------------------------------


@dataclass
class SandboxPlan:
    """The sandbox of one task: the bootstrap description, the environment, the report."""

    mode: Mode
    host: HostSupport
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    git_state: str = "shared"
    denied: list[str] = field(default_factory=list)
    # the task's private copy of Claude Code's config (gitsup/host/claude_config.py)
    claude_config: ClaudeConfig | None = None

    @property
    def active(self) -> bool:
        return self.mode != "off"

    @property
    def enforced(self) -> bool:
        """The kernel sandbox is fully in force (Landlock, mount namespace, privileges)."""
        return self.active and bool(self.config.get("landlock") and self.config.get("mountns"))

    def argv(self, *, read_only: bool = False, files: Sequence[str] = ()) -> list[str]:
        """The bootstrap arguments; `read_only`: the worktree too is read-only (reviewer);
        `files`: the command's own arguments, of which existing absolute file paths (a
        settings file gitsup wrote for it) become readable."""
        if not self.active:
            return []
        if self.claude_config is not None:
            self.claude_config.refresh()
        cfg = self.config
        extra = [a for a in files if os.path.isabs(a) and os.path.isfile(a)]
        if extra:
            cfg = dict(cfg, read=[*cfg["read"], *extra])
        if read_only:  # only its private dirs, the agent's config and devices stay writable
            wt, common, box = cfg["worktree"], cfg["common_dir"], cfg["box"]
            write = [
                p
                for p in cfg["write"]
                if not _under(p, wt) and (not _under(p, common) or _under(p, box))
            ]
            cfg = dict(cfg, write=write, fanout=[], rw_mounts=[], ro=[*cfg["ro"], wt])
        return ["--sandbox", json.dumps(cfg, separators=(",", ":"))]

    def report(self) -> dict[str, Any]:
        if not self.active:
            return {"mode": "off", "enforced": False, "weaker": ["sandbox off"]}
        weaker = [
            m.split(":")[0] + " not enforced: " + m.split(": ", 1)[1] for m in self.host.missing
        ]
        if self.git_state == "shared":
            weaker.append(
                "git_state shared: the task writes loose objects (objects/??/), "
                "refs/heads/sup/ and its worktree admin dir of the repository (an existing "
                "loose object can be replaced, other tasks' sup/ branches moved)"
            )
        weaker.append("pid namespace: not used (Landlock keeps other processes out of reach)")
        return {
            "mode": self.mode,
            "enforced": self.enforced,
            "landlock_abi": self.host.landlock_abi if self.config.get("landlock") else 0,
            "landlock_scopes": ["abstract_unix_socket", "signal"]
            if self.config.get("landlock") and self.host.landlock_abi >= 6
            else [],
            "fs_rules": {
                "read": len(self.config.get("read", [])),
                "write": [
                    *self.config.get("write", []),
                    *(os.path.join(d, "??") for d in self.config.get("fanout", [])),
                ],
                "deny": list(self.denied),
            },
            "no_new_privs": True,
            "caps_dropped": True,
            "mount_ns": bool(self.config.get("mountns")),
            "hidden": list(self.config.get("hide", [])) if self.config.get("mountns") else [],
            "env_allowlist": True,
            "git_state": self.git_state,
            "weaker": weaker,
        }


def describe_host(mode: Mode) -> str:
    """One line for `git sup doctor`: what a task started now gets."""
    if mode == "off":
        return "mode off: tasks run without a sandbox (environment, filesystem and privileges as gitsup's)"
    host = probe()
    parts = [
        f"Landlock ABI {host.landlock_abi} (fs rules; scopes: abstract sockets, signals)"
        if host.landlock_abi >= 6
        else (f"Landlock ABI {host.landlock_abi} (fs rules)" if host.landlock else ""),
        "private mount namespace" if host.mountns else "",
        "no_new_privs",
        "all capabilities dropped, securebits locked",
        "environment allowlist, private HOME and TMPDIR",
    ]
    text = f"mode {mode}: " + ", ".join(p for p in parts if p)
    if host.missing:
        verb = "tasks refuse to start" if mode == "required" else "weaker guarantee"
        text += f"; {verb}: " + "; ".join(host.missing)
    return text + "; Git state: private per task when <task dir>/git exists, else shared"


def resolve_mode(spec_mode: str | None, config_value: str | None) -> Mode:
    for value, where in ((spec_mode, "[sandbox] mode"), (config_value, "git config sup.sandbox")):
        if value is None or value == "":
            continue
        if value not in MODES:
            raise GitsupError(
                f"{where} is {value!r}; expected one of {', '.join(MODES)}",
            )
        return value
    return "auto"


def required_problems(plan: SandboxPlan) -> list[str]:
    if plan.mode != "required":
        return []
    return [f'sandbox is required ([sandbox] mode = "required") but {m}' for m in plan.host.missing]


def _under(p: str, d: str) -> bool:
    return p == d or p.startswith(d.rstrip("/") + "/")


def _expand(p: str, home: str) -> str:
    if p == "~" or p.startswith("~/"):
        p = home + p[1:]
    return os.path.realpath(p) if os.path.lexists(p) else os.path.normpath(p)


def _venv_roots(exe: str) -> list[str]:
    """The interpreter's own tree: a venv and the Python it was made from."""
    out: list[str] = []
    d = os.path.dirname(os.path.dirname(exe))
    cfg = os.path.join(d, "pyvenv.cfg")
    if os.path.isfile(cfg):
        out.append(d)
        try:
            for line in Path(cfg).read_text().splitlines():
                k, _, v = line.partition("=")
                if k.strip() == "home" and v.strip():
                    out.append(os.path.dirname(os.path.realpath(v.strip())))
        except OSError:
            pass
    return out


def program_paths(argvs: Iterable[Sequence[str]], path_env: str, cwd: Path) -> list[str]:
    """What the programs named by these argvs need to read: the executable's directory
    (and its real location), its venv, and any absolute path argument that exists."""
    out: list[str] = []
    for argv in argvs:
        if not argv:
            continue
        first = argv[0]
        exe = first if os.sep in first else shutil.which(first, path=path_env)
        if exe is not None:
            exe = str(cwd / exe) if not os.path.isabs(exe) else exe
            for e in (exe, os.path.realpath(exe)):
                out.append(os.path.dirname(e))
                out += _venv_roots(e)
                parts = Path(e).parts
                if "node_modules" in parts:  # an npm install: its whole node_modules tree
                    i = len(parts) - 1 - parts[::-1].index("node_modules")
                    out.append(str(Path(*parts[: i + 1])))
        for a in argv[1:]:
            if os.path.isabs(a) and os.path.exists(a):
                out.append(a)
    return out


def build_plan(
    *,
    mode: Mode,
    rules: Rules,
    worktree: Path,
    common_dir: Path,
    task_dir: Path,
    branch: str,
    env: Mapping[str, str],
    programs: Iterable[Sequence[str]] = (),
    keep_env: Iterable[str] = (),
    host: HostSupport | None = None,
    claude: bool = False,
) -> SandboxPlan:
    """The sandbox for one task. `env` is the environment gitsup would give the task
    without a sandbox; the plan's env is the allowlisted subset plus private dirs.
    `claude`: the task runs Claude Code (worker, reviewer or decider); it gets a private
    copy of the user's Claude Code config (gitsup/host/claude_config.py)."""
    host = host or probe()
    plan = SandboxPlan(mode=mode, host=host)
    if mode == "off":
        plan.env = dict(env)
        return plan
    home = os.environ.get("HOME") or os.path.expanduser("~")
    (task_dir / "sandbox").mkdir(parents=True, exist_ok=True)
    box = Path(os.path.realpath(task_dir / "sandbox"))
    private_home, private_tmp = box / "home", box / "tmp"
    for d in (private_home, private_tmp):
        d.mkdir(exist_ok=True)
    # the environment: an allowlist, private HOME and TMPDIR, no user or system git config
    patterns = [*rules.env, *keep_env]
    out = {
        k: v
        for k, v in env.items()
        if k not in _FORCED and any(fnmatch.fnmatchcase(k, p) for p in patterns)
    }
    out.update(
        HOME=str(private_home),
        TMPDIR=str(private_tmp),
        XDG_CONFIG_HOME=str(private_home / ".config"),
        XDG_CACHE_HOME=str(private_home / ".cache"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
    )
    plan.env = out
    # the filesystem
    wt = os.path.realpath(worktree)
    common = os.path.realpath(common_dir)
    git_dir = task_dir / "git"
    write: list[str] = [wt, str(private_home), str(private_tmp)]
    if git_dir.is_dir():
        plan.git_state = "private"
        write.append(os.path.realpath(git_dir))
    else:
        # Until the task has a Git dir of its own: what `git commit` on the task branch needs.
        # Loose objects only: the 256 fan-out directories, never objects/ itself (so no
        # info/alternates, commit-graph or packs can be planted there).
        admin = _worktree_admin_dir(worktree)
        parts = branch.split("/")[:-1]
        fanout = [Path(common, "objects", f"{i:02x}") for i in range(256)]
        shared = [
            Path(common, "refs", "heads", *parts),
            Path(common, "logs", "refs", "heads", *parts),
        ]
        for d in (*fanout, *shared):
            d.mkdir(parents=True, exist_ok=True)
        write += [str(d) for d in shared]
        if admin is not None:
            write.append(admin)
    # Claude Code's config: a private copy, never the user's (a task that does not run
    # Claude Code gets none, and no CLAUDE_CONFIG_DIR)
    out.pop("CLAUDE_CONFIG_DIR", None)
    if claude:
        plan.claude_config = claude_config(env, home, private_home)
        plan.claude_config.refresh()
        out.update(plan.claude_config.env())
    write += [_expand(p, home) for p in rules.write]
    # a diagnostics and testing knob of the person running gitsup (never of the task)
    extra = os.environ.get("GITSUP_SANDBOX_EXTRA_WRITE", "")
    write += [os.path.realpath(p) for p in extra.split(os.pathsep) if os.path.isabs(p)]
    read = [_expand(p, home) for p in rules.read] + [wt, common]
    read += program_paths(programs, out.get("PATH", ""), worktree)
    for entry in out.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry):
            real = os.path.realpath(entry)
            if real != "/" and not _under(home, real):
                read.append(_toolchain_root(real, home))
    read += [sys.prefix, sys.base_prefix]
    import gitsup

    read.append(os.path.dirname(os.path.dirname(os.path.realpath(gitsup.__file__))))
    hide = [_expand(p, home) for p in rules.hide] + [os.path.join(common, "sup")]
    hide = [h for h in hide if h not in _NEVER_HIDDEN]  # e.g. HOME=/ for a service user
    ro = [common]
    if plan.claude_config is not None:  # readable, never writable by the task
        ro.append(str(plan.claude_config.credentials))
    dotgit = os.path.join(wt, ".git")
    if os.path.isfile(dotgit):
        ro.append(dotgit)
    if plan.git_state == "shared":
        # the links between the worktree and the repository stay as gitsup made them
        admin = _worktree_admin_dir(worktree)
        if admin is not None:
            ro += [os.path.join(admin, "commondir"), os.path.join(admin, "gitdir")]
    from gitsup.host.bootstrap import expand_read

    deny = [_expand(p, home) if not any(c in p for c in "*?[") else p for p in rules.deny]
    deny += [_expand(p, home) for p in _secret_dirs(home)]
    # split once here, not at every spawn: the bootstrap gets the hierarchies to allow
    readable, listed = expand_read(_dedupe(p for p in read if p not in ("", "/")), deny)
    plan.denied = deny
    plan.config = {
        "mountns": host.mountns,
        "landlock": host.landlock,
        "caps": True,
        "worktree": wt,
        "common_dir": common,
        "box": str(box),
        "read": readable,
        "listed": listed,
        "write": _dedupe(write),
        "hide": _dedupe(hide),
        "ro": ro,
        # the bootstrap expands each to its 256 loose-object directories (a short argv:
        # the tmux worker passes it through a tmux command)
        "fanout": [os.path.join(common, "objects")] if plan.git_state == "shared" else [],
        "rw_mounts": [os.path.join(common, "objects")] if plan.git_state == "shared" else [],
    }
    return plan


_NEVER_HIDDEN = frozenset({"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/dev",
                           "/proc", "/sys", "/opt"})  # fmt: skip


def _toolchain_root(entry: str, home: str) -> str:
    """What a PATH entry needs to be usable: itself, or for a toolchain installed in the
    home (~/.pyenv/shims, ~/.cargo/bin, ~/.nvm/versions/...) its top directory there, whose
    shims run programs beside them. Never a directory that holds credentials."""
    if not home or home == "/" or not _under(entry, home) or entry == home:
        return entry
    top = os.path.join(home, os.path.relpath(entry, home).split(os.sep)[0])
    secrets = [_expand(p, home) for p in _secret_dirs(home)]
    shared = {os.path.join(home, d) for d in (".config", ".local", ".cache", "bin")}
    if top in shared or any(_under(top, sd) or _under(sd, top) for sd in secrets):
        return entry
    return top


def _secret_dirs(home: str) -> list[str]:
    """Where a user's credentials live: never readable, whatever else is allowed."""
    return [
        "~/.ssh",
        "~/.gnupg",
        "~/.aws",
        "~/.config/gcloud",
        "~/.config/gh",
        "~/.config/gitsup",
        "~/.git-credentials",
        "~/.netrc",
        "~/.docker",
        "~/.kube",
    ]


def _dedupe(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def _worktree_admin_dir(worktree: Path) -> str | None:
    """`<common>/worktrees/<name>` of a linked worktree (from its `.git` file)."""
    try:
        text = (worktree / ".git").read_text()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    p = text[len("gitdir:") :].strip()
    if not os.path.isabs(p):
        p = os.path.join(worktree, p)
    return os.path.realpath(p)
