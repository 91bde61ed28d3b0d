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

import contextlib
import fnmatch
import json
import os
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from gitsup.errors import GitsupError
from gitsup.host.bootstrap import covers, denied, env_digest, expand_read
from gitsup.host.claude_config import ClaudeConfig, claude_config
from gitsup.layout import TASK_GIT_SHELL

Mode = Literal["auto", "required", "off"]
MODES: tuple[Mode, ...] = ("auto", "required", "off")
FEATURES = ("landlock", "mountns", "pidns", "seccomp")

# Variables the sandbox always sets; the host's values never pass.
_FORCED = ("HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")


@dataclass(frozen=True)
class Rules:
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    # the part a repository's `.gitsup/policy.toml` added (its env patterns are screened)
    repo: Rules | None = None

    def merged(self, other: Rules) -> Rules:
        both = {k: tuple(dict.fromkeys((*getattr(self, k), *getattr(other, k)))) for k in _KEYS}
        return Rules(**both, repo=other)


_KEYS = ("read", "write", "deny", "hide", "env")


def _rules_from(table: object, source: str) -> Rules:
    if not isinstance(table, Mapping):
        raise GitsupError(f"invalid policy file {source}: [sandbox] must be a table")
    values: dict[str, Any] = {}
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


# --- what no rule opens -----------------------------------------------------------------------

# Where credentials live: never readable, writable or executable by a task, whatever a rule
# says (a rule naming one of them, or a path below one, is refused; a rule naming a directory
# above one gets that directory without them). Not data: a policy file cannot remove them.
PROTECTED_PATHS: tuple[str, ...] = (
    # SSH and GPG
    "~/.ssh", "/etc/ssh/*key*", "~/.gnupg",
    # credential stores and keyrings
    "~/.git-credentials", "~/.config/git/credentials", "~/.netrc", "~/.docker", "~/.npmrc",
    "~/.pypirc", "~/.config/gh", "~/.config/hub", "~/.local/share/keyrings",
    "~/.local/share/kwalletd", "~/.password-store", "~/.cargo/credentials",
    "~/.cargo/credentials.toml", "~/.gem/credentials",
    # cloud credentials
    "~/.aws", "~/.config/gcloud", "~/.azure", "~/.kube",
    # gitsup's own config: the integration signing key, the allowed signers (also where
    # XDG_CONFIG_HOME puts it, and wherever the repository's Git config points: `protect`)
    "~/.config/gitsup",
    # the agent's login: a task that runs Claude Code reads a read-only copy of it in its
    # private HOME (gitsup/host/claude_config.py), never this one
    "~/.claude/.credentials.json",
)  # fmt: skip
CLAUDE_CREDENTIALS = "~/.claude/.credentials.json"

# Environment variables a repository's `[sandbox] env` never passes (globs, case-insensitive).
PROTECTED_ENV: tuple[str, ...] = (
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_ASKPASS*", "GPG_AGENT_INFO", "GNUPGHOME",
    "GIT_ASKPASS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_CONFIG*", "GIT_CREDENTIAL*",
    "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*_KEY", "*_KEY_*",
    "*APIKEY*", "*_AUTH", "*_AUTH_*", "AWS_*", "AZURE_*", "ARM_*", "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_*", "KUBECONFIG", "DOCKER_CONFIG", "DOCKER_AUTH_CONFIG", "NETRC", "VAULT_*",
    "NPM_CONFIG_*", "TWINE_*", "DBUS_SESSION_BUS_ADDRESS", "GNOME_KEYRING_*", "XDG_RUNTIME_DIR",
)  # fmt: skip


def gitsup_config_dir(env: Mapping[str, str], home: str) -> str:
    """`${XDG_CONFIG_HOME:-$HOME/.config}/gitsup` as gitsup itself sees it."""
    return os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "gitsup")


def protected_env(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name.upper(), g) for g in PROTECTED_ENV)


def _glob_path(p: str, home: str) -> list[str]:
    """A path or glob with `~` expanded, as written and with its symlinks resolved (the
    directories before the first glob character)."""
    if p == "~" or p.startswith("~/"):
        p = home + p[1:]
    p = os.path.normpath(p)
    cut = min((i for i, c in enumerate(p) if c in "*?["), default=-1)
    if cut < 0:
        return list(dict.fromkeys((p, os.path.realpath(p))))
    head, tail = os.path.split(p[:cut])
    real = os.path.join(os.path.realpath(head), tail + p[cut:]) if head else p
    return list(dict.fromkeys((p, real)))


def protected_globs(home: str, protect: Iterable[str] = (), *, agent: bool = False) -> list[str]:
    """The built-in protected paths for this home, plus `protect` (absolute paths), as globs;
    `agent`: for the agent's own config dir (its login file is the agent's to use)."""
    paths = [p for p in PROTECTED_PATHS if not (agent and p == CLAUDE_CREDENTIALS)]
    paths += [gitsup_config_dir(os.environ, home), *protect]
    return _dedupe(g for p in paths for g in _glob_path(p, home))


# --- what the host supports -----------------------------------------------------------------


@dataclass(frozen=True)
class HostSupport:
    landlock_abi: int
    mountns: bool
    missing: tuple[str, ...]  # feature: why
    pidns: bool = False
    seccomp: bool = False

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


@cache
def _pidns_works() -> bool:
    """Whether the bootstrap can create a PID namespace and mount its /proc. Root in the
    initial user namespace can (it has CAP_SYS_ADMIN: checked above); in a user namespace
    the kernel refuses a new /proc where the host's is partly covered (as in containers),
    so the bootstrap itself is tried once."""
    try:
        if os.geteuid() == 0 and Path("/proc/self/uid_map").read_text().split() == [
            "0",
            "0",
            "4294967295",
        ]:
            return True
    except OSError:
        pass
    from gitsup.host.proc import gitsup_python, run

    desc = json.dumps({"mountns": True, "pidns": True, "caps": False})
    argv = [*gitsup_python("gitsup.host.bootstrap", stdlib_only=True), "--sandbox", desc]
    try:
        res = run([*argv, "--", "true"], cwd="/", timeout=30)
    except (GitsupError, OSError):
        return False
    return res.returncode == 0


def probe() -> HostSupport:
    """What this host can enforce. GITSUP_SANDBOX_REFUSE=landlock,mountns,pidns,seccomp
    simulates a host without them (a testing knob; the bootstrap refuses them too)."""
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
    # the PID namespace's /proc is mounted in the mount namespace
    pidns = mountns and "pidns" not in refused and _pidns_works()
    if not pidns:
        missing.append("pidns: refused (GITSUP_SANDBOX_REFUSE)" if "pidns" in refused else
                       "pidns: cannot create a PID namespace with its own /proc")  # fmt: skip
    no_seccomp = None
    if sys.platform == "linux":
        from gitsup.host.seccomp import unavailable

        no_seccomp = unavailable()
    else:
        no_seccomp = "seccomp: Linux only"
    if no_seccomp is not None:
        missing.append(no_seccomp)
    return HostSupport(abi, mountns, tuple(missing), pidns=pidns, seccomp=no_seccomp is None)


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
    refused: list[str] = field(default_factory=list)  # rules not applied, and why
    # what the environment allowlist removed: name -> env_digest of the host's value
    dropped_env: dict[str, str] = field(default_factory=dict)
    # the task's private copy of Claude Code's config (gitsup/host/claude_config.py)
    claude_config: ClaudeConfig | None = None

    @property
    def active(self) -> bool:
        return self.mode != "off"

    @property
    def enforced(self) -> bool:
        """The kernel sandbox is fully in force (Landlock, mount and PID namespaces, the
        system call filter, privileges)."""
        cfg = self.config
        return self.active and all(cfg.get(k) for k in ("landlock", "mountns", "pidns", "seccomp"))

    @property
    def observed_file(self) -> Path:
        """Where the bootstrap of a process started with `observe` writes what it saw."""
        return Path(self.config["box"], "observed.json")

    def argv(
        self, *, read_only: bool = False, files: Sequence[str] = (), observe: bool = False
    ) -> list[str]:
        """The bootstrap arguments; `read_only`: the worktree too is read-only (reviewer);
        `files`: the command's own arguments, of which existing absolute file paths (a
        settings file gitsup wrote for it) become readable; `observe`: the process writes
        what it sees of its sandbox to `observed_file` (see `observe`)."""
        if not self.active:
            return []
        if self.claude_config is not None:
            self.claude_config.refresh()
        cfg = self.config
        if observe:
            self.observed_file.unlink(missing_ok=True)
            cfg = dict(cfg, observe=str(self.observed_file))
        extra = [
            a
            for a in files
            if os.path.isabs(a)
            and os.path.isfile(a)
            and not denied(a, self.denied)
            and not denied(os.path.realpath(a), self.denied)
        ]
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
        if self.git_state == "private" and not self.config.get("mountns"):
            weaker.append(
                "git shell writable: without a mount namespace the task can rewrite its Git "
                "dir's config, hooks and info (gitsup rewrites them when the task ends)"
            )
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
            "seccomp": bool(self.config.get("seccomp")),
            "pid_ns": bool(self.config.get("pidns")),
            "mount_ns": bool(self.config.get("mountns")),
            "hidden": list(self.config.get("hide", [])) if self.config.get("mountns") else [],
            "env_allowlist": True,
            "git_state": self.git_state,
            "weaker": weaker,
            "refused": list(self.refused),
        }

    def observe(self, report: dict[str, Any], alive: Callable[[], bool]) -> dict[str, Any]:
        """`report` with what the process started with `observe` saw of itself (NoNewPrivs,
        capabilities, seccomp, its namespaces) in place of what was asked; waits (bounded)
        while `alive()` for the bootstrap to write it. Nothing observed: those are false."""
        if not self.active:
            return report
        path = self.observed_file
        seen: dict[str, Any] = {}
        end = time.monotonic() + OBSERVE_TIMEOUT
        while True:
            try:
                seen = json.loads(path.read_text())
                break
            except (OSError, ValueError):
                pass
            if time.monotonic() > end or not alive():
                break
            time.sleep(0.01)
        keys = ("no_new_privs", "caps_dropped", "seccomp", "pid_ns", "mount_ns")
        out = dict(report, **{k: seen.get(k) is True for k in keys})
        out["enforced"] = bool(report.get("enforced")) and all(out[k] for k in keys)
        out["env_allowlist"] = self._env_allowlisted(seen.get("env"))
        if not seen:
            out["weaker"] = [*report.get("weaker", []), "not observed: the process did not "
                             "report what it saw of its sandbox"]  # fmt: skip
        return out

    def _env_allowlisted(self, seen: object) -> bool:
        """The process's environment (`observed`'s digests) has the private HOME and TMPDIR
        and none of the variables the allowlist removed with the host's value."""
        if not isinstance(seen, dict) or not seen:
            return False
        for name in ("HOME", "TMPDIR"):
            if name not in self.env or seen.get(name) != env_digest(name, self.env[name]):
                return False
        return not any(seen.get(k) == d for k, d in self.dropped_env.items())


OBSERVE_TIMEOUT = 10.0  # seconds; the bootstrap writes it within milliseconds


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
        "PID namespace" if host.pidns else "",
        "system call filter (seccomp)" if host.seccomp else "",
        "no_new_privs",
        "all capabilities dropped, securebits locked",
        "environment allowlist, private HOME and TMPDIR",
    ]
    text = f"mode {mode}: " + ", ".join(p for p in parts if p)
    if host.missing:
        verb = "tasks refuse to start" if mode == "required" else "weaker guarantee"
        text += f"; {verb}: " + "; ".join(host.missing)
    return text + (
        "; Git state: private per task when <task dir>/git exists (its config, hooks and "
        "info read-only), else shared"
    )


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


def require_enforced(plan: SandboxPlan, *, hint: str | None = None) -> None:
    """Refuse (GitsupError) a plan whose `required` mode this host cannot enforce."""
    problems = required_problems(plan)
    if problems:
        raise GitsupError("; ".join(problems), hint=hint)


def _under(p: str, d: str) -> bool:
    return p == d or p.startswith(d.rstrip("/") + "/")


def _expand(p: str, home: str) -> str:
    """`~` expanded, symlinks resolved (as far as the path exists)."""
    if p == "~" or p.startswith("~/"):
        p = home + p[1:]
    return os.path.realpath(p)


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
    protect: Iterable[str] = (),
) -> SandboxPlan:
    """The sandbox for one task. `env` is the environment gitsup would give the task
    without a sandbox; the plan's env is the allowlisted subset plus private dirs.
    `claude`: the task runs Claude Code (worker, reviewer or decider); it gets a private
    copy of the user's Claude Code config (gitsup/host/claude_config.py).
    `protect`: more paths no rule opens (the integration key and allowed-signers file the
    repository's Git config names), on top of PROTECTED_PATHS."""
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
    # the environment: an allowlist, private HOME and TMPDIR, no user or system git config;
    # the task's own global Git config is a file in its private HOME, which no `git` outside
    # the sandbox reads (the task's Git dir's config is gitsup's, read-only: see below)
    # what only the repository's policy file adds never passes a protected variable
    repo_env = set(rules.repo.env if rules.repo else ()) - set(default_rules().env)
    for pat in sorted(repo_env):
        if protected_env(pat):
            plan.refused.append(f"env {pat}: names protected variables (credentials, agents)")
    patterns = [p for p in (*rules.env, *keep_env) if p not in repo_env]
    own = [p for p in repo_env if not protected_env(p)]
    out: dict[str, str] = {}
    for k, v in env.items():
        if k in _FORCED:
            continue
        if any(fnmatch.fnmatchcase(k, p) for p in patterns):
            out[k] = v
        elif any(fnmatch.fnmatchcase(k, p) for p in own):
            if protected_env(k):
                plan.refused.append(f"env {k}: a protected variable; not passed")
            else:
                out[k] = v
    out.update(private_env(private_home, private_tmp, private_home / ".gitconfig"))
    plan.env = out
    plan.dropped_env = {k: env_digest(k, v) for k, v in env.items() if out.get(k) != v}
    _login_profiles(private_home, out)
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
    # what no rule opens: the rules' own deny globs, the protected paths
    deny = _dedupe(
        [g for p in rules.deny for g in _glob_path(p, home)] + protected_globs(home, protect)
    )
    # Claude Code's config: a private copy, never the user's (a task that does not run
    # Claude Code gets none, and no CLAUDE_CONFIG_DIR)
    out.pop("CLAUDE_CONFIG_DIR", None)
    if claude:
        plan.claude_config = claude_config(env, home, private_home)
        plan.claude_config.refresh()
        out.update(plan.claude_config.env())
    repo = rules.repo or Rules()
    write += _screen("write", rules.write, repo.write, home, deny, plan.refused)
    # a diagnostics and testing knob of the person running gitsup (never of the task)
    extra = os.environ.get("GITSUP_SANDBOX_EXTRA_WRITE", "")
    write += [os.path.realpath(p) for p in extra.split(os.pathsep) if os.path.isabs(p)]
    read = [*_screen("read", rules.read, repo.read, home, deny, plan.refused), wt, common]
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
    if plan.git_state == "private":
        # the shell of the task's Git dir (config, commondir, hooks, info) stays gitsup's:
        # the person's `git` in the worktree reads it, so nothing the task writes runs there
        real_git = os.path.realpath(git_dir)
        ro += [os.path.join(real_git, n) for n in TASK_GIT_SHELL if (git_dir / n).exists()]
    if plan.git_state == "shared":
        # the links between the worktree and the repository stay as gitsup made them
        admin = _worktree_admin_dir(worktree)
        if admin is not None:
            ro += [os.path.join(admin, "commondir"), os.path.join(admin, "gitdir")]
    # split once here, not at every spawn: the bootstrap gets the hierarchies to allow, for
    # reading and for writing (a writable directory that holds a protected path is split too)
    readable, listed = expand_read(_dedupe(p for p in read if p not in ("", "/")), deny)
    writable, split = expand_read(_dedupe(p for p in write if p not in ("", "/")), deny)
    plan.denied = deny
    plan.config = {
        "mountns": host.mountns,
        "pidns": host.pidns,
        "seccomp": _filter_file(box) if host.seccomp else "",
        "landlock": host.landlock,
        "caps": True,
        "worktree": wt,
        "common_dir": common,
        "box": str(box),
        "read": readable,
        "listed": _dedupe([*listed, *split]),
        "write": writable,
        "hide": _dedupe(hide),
        "ro": ro,
        # the bootstrap expands each to its 256 loose-object directories (a short argv:
        # the tmux worker passes it through a tmux command)
        "fanout": [os.path.join(common, "objects")] if plan.git_state == "shared" else [],
        "rw_mounts": [os.path.join(common, "objects")] if plan.git_state == "shared" else [],
        # a /dev/shm of the task's own (its mount namespace's), writable: never the host's
        "scratch": [d for d in _SCRATCH if d in hide] if host.mountns else [],
    }
    return plan


# What a login shell in the task keeps of the task's environment. An agent's shell tool
# starts its shell as a login shell (Claude Code does); /etc/profile then resets PATH (for
# root on Debian, to the system's), and the agent cannot run what the checks run: the
# active virtualenv's `python`, a project's tools.
_LOGIN_KEPT = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "NODE_PATH", "GOPATH", "CARGO_HOME")
_PROFILES = (".bash_profile", ".profile", ".zprofile")


# Hidden directories that get a writable tmpfs of the task's own rather than an empty
# read-only one: POSIX semaphores and shared memory live there (multiprocessing's locks).
_SCRATCH = ("/dev/shm",)


def private_env(home: Path, tmp: Path, git_config: Path | str) -> dict[str, str]:
    """What points a sandboxed process at its private dirs: HOME, TMPDIR, the XDG dirs, and
    Git config of its own (`git_config`), never the user's or the system's."""
    return {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": str(git_config),
        "GIT_TERMINAL_PROMPT": "0",
    }


def _login_profiles(private_home: Path, env: Mapping[str, str]) -> None:
    """Write the private HOME's login profiles so that a login shell sees the environment
    the checks see (the variables of `_LOGIN_KEPT` the task has)."""
    import shlex

    lines = ["# Written by gitsup: a login shell keeps the task's environment.\n"]
    lines += [f"export {k}={shlex.quote(env[k])}\n" for k in _LOGIN_KEPT if env.get(k)]
    lines.append('[ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"\n')
    data = "".join(lines).encode()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    for name in _PROFILES:
        # the task may have planted a link here: never write through it
        with contextlib.suppress(OSError):
            fd = os.open(private_home / name, flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


def _filter_file(box: Path) -> str:
    """The compiled system call filter in the task's sandbox dir (which the task cannot
    write), for the bootstrap to read before it hides that dir."""
    from gitsup.host.seccomp import program

    path = box / "seccomp.bpf"
    prog = program()
    try:
        if path.read_bytes() == prog:
            return str(path)
    except OSError:
        pass
    tmp = box / f".seccomp.bpf.{os.getpid()}"
    tmp.write_bytes(prog)
    os.replace(tmp, path)
    return str(path)


_NEVER_HIDDEN = frozenset({"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/dev",
                           "/proc", "/sys", "/opt"})  # fmt: skip


def _toolchain_root(entry: str, home: str) -> str:
    """What a PATH entry needs to be usable: itself, or for a toolchain installed in the
    home (~/.pyenv/shims, ~/.cargo/bin, ~/.nvm/versions/...) its top directory there, whose
    shims run programs beside them. Never a directory that holds credentials."""
    if not home or home == "/" or not _under(entry, home) or entry == home:
        return entry
    top = os.path.join(home, os.path.relpath(entry, home).split(os.sep)[0])
    secrets = protected_globs(home)
    shared = {os.path.join(home, d) for d in (".config", ".local", ".cache", "bin")}
    if top in shared or denied(top, secrets) or covers(top, secrets):
        return entry
    return top


def _screen(
    kind: str,
    paths: Iterable[str],
    from_repo: Iterable[str],
    home: str,
    deny: list[str],
    refused: list[str],
) -> list[str]:
    """The rule paths, expanded and resolved, without those that name a denied path or one
    below it (each recorded in `refused`); a repository rule above a denied path is kept
    (the plan splits it around what is denied) and noted."""
    repo = set(from_repo)
    out: list[str] = []
    for raw in paths:
        forms = _glob_path(raw, home)
        if any(denied(f, deny) for f in forms):
            refused.append(
                f"{kind} {raw}: a protected path (credentials, gitsup's keys); not applied"
            )
            continue
        real = forms[-1]
        if raw in repo and covers(real, deny):
            refused.append(f"{kind} {raw}: applied without the protected paths below it")
        out.append(real)
    return out


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
