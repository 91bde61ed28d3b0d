"""Candidate code outside a task: the required checks `git sup integrate` and the
integration queue run on a candidate's tree. They run as a task's checks run, never with the
authority of the person who started gitsup:

- the task sandbox (gitsup/host/sandbox.py; mode from `git config sup.sandbox`): Landlock, a
  private mount namespace, no capabilities, the repository's Git dir read-only, the
  credentials hidden; the throw-away worktree, a private `HOME`/`TMPDIR` and an empty Git dir
  the only writable places (emptied before every run);
- the environment allowlist of the sandbox, without the agents' credentials (a check is not
  an agent), and never gitsup's own environment (also with the sandbox `off`);
- a network namespace per check: loopback only, plus the `egress` endpoints through the
  egress gate (`[isolation] network`: auto, none or host, as for a task);
- a cgroup per check, killed and removed before the check's result is returned: nothing it
  started (double-forked `setsid()` daemons included) outlives it. Without a cgroup (mode
  `off`, or `auto` on a host without a writable v2 tree) the processes that carry the run's
  marker in their environment are killed instead (weaker: a process can rewrite it).

This module is the only place outside a task that runs a check (`run_check`); a test and an
import contract keep it so (tests/test_architecture.py).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsup.environment.recipe import Recipe
from gitsup.environment.setup import CacheKind
from gitsup.errors import Exit, GitsupError
from gitsup.git import GitRepo
from gitsup.host import proc
from gitsup.host.sandbox import SandboxPlan, private_env
from gitsup.ids import Oid
from gitsup.names import TASK_MARKER
from gitsup.spec import Check, TaskSpec
from gitsup.store.record import CheckResult
from gitsup.verification.checks import run_check

if TYPE_CHECKING:
    from gitsup.host.contain import Cgroup

# What the sandbox lets an agent have and a check never gets: the model API's credentials.
_AGENT_ONLY_ENV = ("ANTHROPIC_*", "CLAUDE_*", "OPENAI_*", "CODEX_*")
# Marks every process of one confined run (the fallback sweep without a cgroup).
RUN_MARKER = "GITSUP_CHECK_RUN"
# Runs side by side (the queue's slots: a thread each, each with its own ConfinedChecks)
# take this around what Git and pyroute2 do to shared places: `git worktree add` and the
# `prune` after a removal share `$GIT_COMMON_DIR/worktrees`, and a network namespace is
# created by a forked child (forked from one thread at a time).
_SHARED = threading.Lock()
# Who runs checks here; each check's cgroup (and a gated check's network namespace) is
# named after the runner, its pid and a random part, so that `doctor` finds what a killed
# runner left.
RUNNER_LABELS = ("integrate", "queue", "warm")
# The network namespace `_network` names for a loopback-only check: the bootstrap's own.
_OWN_NETNS = "(own)"


def runner_of(name: str) -> tuple[str, int] | None:
    """(label, pid) of a check cgroup `<label>-<pid>-<hex>` of a runner here, else None."""
    label, _, rest = name.partition("-")
    pid, _, tail = rest.partition("-")
    if label in RUNNER_LABELS and pid.isdigit() and tail and "-" not in tail:
        return label, int(pid)
    return None


@dataclass(frozen=True)
class Confinement:
    """The `[isolation]` a task's spec asks for its checks (network, egress, cgroup)."""

    network: str = "auto"  # auto | none | host
    egress: tuple[str, ...] = ()
    cgroup: str = "auto"  # auto | required | off
    # `[environment] include` of each task whose spec sets it (None: the main checkout's
    # `.gitsup/environment.toml` decides); the checks get all of them (docs/environments.md)
    include: tuple[tuple[str, ...] | None, ...] = ()
    # a gate even without egress entries (the setup phase): its proxy refuses at once
    gated: bool = False

    @classmethod
    def of(cls, specs: Iterable[TaskSpec | None]) -> Confinement:
        """The strictest of several tasks' isolation (a composition runs all their checks):
        `none` if any says so, the host network only if every one does; their egress
        endpoints together; a cgroup required if any requires it."""
        given = [s for s in specs if s is not None]
        found = [s.isolation for s in given]
        if not found:
            return cls()
        nets = {i.network for i in found}
        network = "none" if "none" in nets else ("host" if nets == {"host"} else "auto")
        cgs = {i.cgroup for i in found}
        cgroup = "required" if "required" in cgs else ("off" if cgs == {"off"} else "auto")
        egress = tuple(dict.fromkeys(e for i in found for e in i.egress))
        include = tuple(
            None if s.environment.include is None else tuple(s.environment.include) for s in given
        )
        if all(p is None for p in include):
            include = ()  # no task sets its own: the main checkout's recipe, as with none given
        return cls(network=network, egress=egress, cgroup=cgroup, include=include)


@dataclass(frozen=True)
class Setup:
    """The setup phase of a confined run (`[environment] setup`): its commands (as checks),
    the endpoints only they reach, the caches they get and where the shared layer is."""

    commands: tuple[Check, ...]
    egress: tuple[str, ...]
    caches: tuple[CacheKind, ...]
    shared: Path

    @classmethod
    def of(cls, recipe: Recipe, common_dir: Path) -> Setup | None:
        """The recipe's setup (None without commands); GitsupError for a bad entry."""
        from gitsup.environment import setup as envsetup

        if not recipe.setup:
            return None
        return cls(
            tuple(envsetup.setup_checks(recipe.setup, recipe.setup_timeout)),
            tuple(envsetup.setup_endpoints(recipe.setup_egress)),
            tuple(envsetup.cache_kinds(recipe.cache)),
            envsetup.shared_cache_root(common_dir),
        )


class SetupFailed(GitsupError):
    """A setup command failed in a confined run: the environment, not a candidate's checks."""

    def __init__(self, message: str, result: CheckResult) -> None:
        super().__init__(message, exit_code=Exit.FAILED)
        self.result = result


@dataclass
class Applied:
    """What confined the checks of one run: recorded with the integration and the queue's
    evidence."""

    sandbox: dict[str, Any] = field(default_factory=dict)
    network: str = ""  # loopback | gated | host
    network_reason: str = ""
    cgroup: bool = True
    cgroup_reason: str = ""
    left_behind: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)  # what `include` gave the worktree

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "sandbox": self.sandbox,
            "network": self.network,
            "cgroup": self.cgroup,
        }
        if self.network_reason:
            d["network_reason"] = self.network_reason
        if self.cgroup_reason:
            d["cgroup_reason"] = self.cgroup_reason
        if self.left_behind:
            d["left_behind"] = self.left_behind
        if self.environment:
            d["environment"] = self.environment
        return d

    def weaken_network(self, mode: str, reason: str = "") -> None:
        order = ("loopback", "gated", "host")
        if not self.network or order.index(mode) > order.index(self.network):
            self.network, self.network_reason = mode, reason


class ConfinedChecks:
    """A throw-away place where a candidate's checks run confined (one per integrate or
    queue run): `run(commit, checks)` checks the commit out in a detached worktree, runs the
    checks one by one in the sandbox, their own cgroup and network namespace, and removes the
    worktree. `close()` removes everything."""

    def __init__(
        self,
        repo: GitRepo,
        *,
        prefix: str,
        marker: str,
        label: str,
        confinement: Confinement | None = None,
        protect: Sequence[str] = (),
    ) -> None:
        self.repo = repo
        # what no sandbox rule may open besides the built-in list (the signing key, the
        # allowed signers: gitsup/integration/keys.py `protected_paths`)
        self.protect = list(protect)
        self.prefix = prefix
        self.marker = marker  # GITSUP_INTEGRATION: which integration runs the checks
        self.label = label  # names the cgroups and network namespaces
        self.confinement = confinement or Confinement()
        self.applied = Applied()
        self._root: Path | None = None
        self._plans: dict[str, SandboxPlan] = {}
        self.setup_report: dict[str, Any] = {}  # the last run's setup phase
        self.setup_cache: Path | None = None  # where that setup's caches are (env warm)
        self._egress: list[str] | None = None  # git config sup.egress, read once per run
        self._no_netns: str | None = None  # why no network namespace here ("" : there is)

    def __enter__(self) -> ConfinedChecks:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(os.path.realpath(tempfile.mkdtemp(prefix=self.prefix)))
        return self._root

    @property
    def worktree(self) -> Path:
        return self.root / "worktree"

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    # --- a run ------------------------------------------------------------------------

    def run(
        self,
        commit: Oid,
        checks: Sequence[Check],
        *,
        say: Callable[[str], None] = lambda _m: None,
        stop_at_failure: bool = False,
        confinement: Confinement | None = None,
        setup: Setup | None = None,
    ) -> list[CheckResult]:
        """Each check on `commit`, confined; refuses (GitsupError, exit 2) before anything
        runs when the sandbox or a cgroup is required and this host cannot give it. With
        `setup`, its commands run first, confined the same way (plus their own endpoints and a
        copy of the warmed caches); one that fails raises `SetupFailed` and no check runs."""
        if not checks and setup is None:
            return []
        conf = confinement or self.confinement
        cg_base = cgroup_base(conf.cgroup, self.applied)  # raises when required and missing
        self._fresh()
        self._egress = None
        from gitsup.preload import preloading

        # pyroute2, for the egress gate's network namespaces, is imported while Git checks
        # the tree out (a loopback-only namespace is the bootstrap's own: no pyroute2)
        gated = conf.network != "host" and bool(
            conf.egress or conf.gated or setup is not None or self._sup_egress()
        )
        with preloading(["pyroute2", "gitsup.host.egress"] if gated else []):
            with _SHARED:
                self.repo.add_detached_worktree(self.worktree, commit)
            try:
                # planned once the worktree exists: its `.git` file is bound read-only
                # then (a check that rewrote it would point Git elsewhere for what follows)
                plan, env = self._plan([*(setup.commands if setup else ()), *checks])
            except BaseException:
                with _SHARED:
                    self.repo.remove_detached_worktree(self.worktree)
                raise
        try:
            self._include(plan, conf)
            if setup is not None:
                self._setup(setup, plan, env, cg_base, conf, say)
            out: list[CheckResult] = []
            for check in checks:
                say(f"check {check.name}: running on {commit[:12]}")
                r = self._run_one(check, plan, env, cg_base, conf)
                say(f"check {check.name}: {'passed' if r.passed else 'FAILED'}")
                out.append(r)
                if stop_at_failure and not r.passed:
                    break
            return out
        finally:
            with _SHARED:
                self.repo.remove_detached_worktree(self.worktree)

    def _setup(
        self,
        setup: Setup,
        plan: SandboxPlan,
        env: dict[str, str],
        cg_base: Path | None,
        conf: Confinement,
        say: Callable[[str], None],
    ) -> None:
        """The setup commands in the fresh worktree, each confined as a check, with the
        setup's endpoints and the caches: a copy of the shared layer in the run's private
        HOME (`setup.caches`, written back by `git sup env warm` alone)."""
        import time

        from gitsup.environment import setup as envsetup

        home = Path(env.get("HOME") or self.root / "sandbox" / "home")
        t0 = time.monotonic()
        cache_env, copied = envsetup.copy_caches(
            setup.shared, envsetup.task_cache_root(home), setup.caches
        )
        self.setup_report = {
            "commands": [list(c.argv) for c in setup.commands],
            "egress": list(setup.egress),
            "caches": [k.name for k in setup.caches],
            "cache_bytes": copied,
        }
        wider = replace(
            conf, egress=tuple(dict.fromkeys([*conf.egress, *setup.egress])), gated=True
        )
        results: list[CheckResult] = []
        for cmd in setup.commands:
            say(f"setup: {' '.join(cmd.argv)}")
            r = self._run_one(cmd, plan, {**env, **cache_env}, cg_base, wider)
            results.append(r)
            if not r.passed:
                break
        self.setup_report["duration"] = round(time.monotonic() - t0, 3)
        self.setup_report["passed"] = all(r.passed for r in results)
        self.setup_report["output_tail"] = envsetup.tail("\n".join(r.output_tail for r in results))
        self.setup_cache = envsetup.task_cache_root(home)
        failed = next((r for r in results if not r.passed), None)
        if failed is not None:
            how = "timed out" if failed.timed_out else f"exited {failed.exit_code}"
            self.setup_report.update(command=list(failed.argv), exit_code=failed.exit_code)
            raise SetupFailed(
                f"the environment could not be set up: `{' '.join(failed.argv)}` {how}; "
                f"output: {failed.output_tail.strip()[-envsetup.REASON_TAIL :]}",
                failed,
            )

    def _fresh(self) -> None:
        """An empty private HOME, TMPDIR and Git dir: nothing one run's checks leave there
        (a planted `usercustomize.py`, a Git config) reaches the next."""
        for d in (self.root / "sandbox" / "home", self.root / "sandbox" / "tmp", self.root / "git"):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        shutil.rmtree(self.root / "env", ignore_errors=True)

    def _include(self, plan: SandboxPlan, conf: Confinement) -> None:
        """The main checkout's ignored paths the checks get, as a task gets them
        (gitsup/environment/include.py): the main checkout's recipe, or the tasks' own
        `include` where their specs set it, all of them together. Fresh for every run."""
        from gitsup.environment import include
        from gitsup.host.sandbox import protected_globs

        main_root = self.repo.main_workdir
        recipe = checks_recipe(self.repo, conf)
        plan.config.pop("include", None)
        if not recipe.include and not recipe.refused:
            self.applied.environment = {}
            return
        home = os.environ.get("HOME") or os.path.expanduser("~")
        done = include.prepare(
            include.resolve(GitRepo.open(main_root), recipe, protected_globs(home, self.protect)),
            worktree=self.worktree,
            state=self.root / "env",
            overlay=plan.active and bool(plan.config.get("mountns")),
        )
        if done.overlays:
            plan.config["include"] = done.overlays
        self.applied.environment = done.report()

    def _plan(self, checks: Sequence[Check]) -> tuple[SandboxPlan, dict[str, str]]:
        from gitsup.host.sandbox import build_plan, load_rules, require_enforced, resolve_mode

        key = repr([list(c.argv) for c in checks])
        plan = self._plans.get(key)
        if plan is None:
            env = proc.child_env(
                {"GITSUP_INTEGRATION": self.marker}, drop=(TASK_MARKER, "CLAUDECODE")
            )
            rules = load_rules(self.repo.main_workdir)
            # The empty Git dir beside the worktree makes the plan keep the whole common
            # dir read-only: a check writes only in its worktree and its private dirs.
            plan = build_plan(
                mode=resolve_mode(None, self.repo.config_get("sup.sandbox")),
                rules=rules,
                worktree=self.worktree,
                common_dir=self.repo.common_dir,
                task_dir=self.root,
                branch="",
                env=env,
                programs=[list(c.argv) for c in checks],
                protect=self.protect,
            )
            require_enforced(
                plan,
                hint="the checks of a candidate run only in the task sandbox; "
                "`git config sup.sandbox auto` runs them with what this host enforces",
            )
            if not plan.active:  # the allowlist all the same: never gitsup's environment
                plan.env = _allowlisted(env, rules.env, self.root / "sandbox")
            self._plans[key] = plan
        env = {
            k: v
            for k, v in plan.env.items()
            if not any(fnmatch.fnmatchcase(k, p) for p in _AGENT_ONLY_ENV)
        }
        self.applied.sandbox = sandbox_summary(plan)
        return plan, env

    def _run_one(
        self,
        check: Check,
        plan: SandboxPlan,
        env: dict[str, str],
        cg_base: Path | None,
        conf: Confinement,
    ) -> CheckResult:
        from gitsup.host.contain import bootstrap_argv

        with contextlib.ExitStack() as stack:
            netns, net_env = self._network(stack, conf)
            own_netns = netns == _OWN_NETNS
            # entered last, left first: what the check started dies before its namespace
            run = stack.enter_context(
                contained_run(self.label, cg_base, conf.cgroup, self.applied, what="the check")
            )
            env = {**env, **run.env, **net_env}
            cg = run.cgroup

            def wrap(argv: list[str]) -> list[str]:
                return bootstrap_argv(
                    argv,
                    cgroup=cg,
                    netns=None if own_netns else netns,
                    new_netns=own_netns,
                    sandbox=plan.argv(files=argv),
                )

            result = run_check(check, cwd=self.worktree, env=env, wrap=wrap)
        if run.left:  # what it started could not be stopped: not a pass
            result = result.model_copy(
                update={
                    "passed": False,
                    "output_tail": result.output_tail + "\n[left processes behind: "
                    f"{', '.join(run.left)}]",
                }
            )
        return result

    def _sup_egress(self) -> list[str]:
        if self._egress is None:
            self._egress = self.repo.config_get_all("sup.egress")
        return self._egress

    def _network(
        self, stack: contextlib.ExitStack, conf: Confinement
    ) -> tuple[str | None, dict[str, str]]:
        """The check's network namespace (None: the host's; `_OWN_NETNS`: a loopback-only
        one the bootstrap makes for the check alone) and what its env needs."""
        if conf.network == "host":
            self.applied.weaken_network("host", 'network = "host"')
            return None, {}
        from gitsup.host.egress import parse_endpoint

        extra = [*conf.egress, *self._sup_egress()]
        for e in extra:  # a configuration error refuses; it never falls back to the host
            parse_endpoint(e)
        try:
            if extra or conf.gated:
                from gitsup.host.egress_gate import gated_namespace

                with _SHARED:
                    an = stack.enter_context(
                        gated_namespace(self.label, {}, extra, model=False, refuse_by_proxy=True)
                    )
                self.applied.weaken_network("gated")
                return an.netns, dict(an.env)
            # loopback only: the bootstrap unshares a namespace of the check's own (no named
            # namespace to make and remove, none left when a runner is killed); whether this
            # host lets it is asked once
            if self._no_netns is None:
                from gitsup.host.contain import unshare_netns_refused

                self._no_netns = unshare_netns_refused() or ""
            if self._no_netns:
                raise GitsupError(self._no_netns)
            self.applied.weaken_network("loopback")
            return _OWN_NETNS, {}
        except GitsupError as exc:
            if conf.network == "none":
                raise
            self.applied.weaken_network("host", f"auto: {exc.message}")
            return None, {}


@dataclass
class ContainedRun:
    """One confined run's processes: the cgroup they run in (None: none here, the marker
    sweep instead), the marker `env` to give them, and what was left behind when it ended."""

    run_id: str
    cgroup: Cgroup | None
    env: dict[str, str]
    left: list[str] = field(default_factory=list)


@contextlib.contextmanager
def contained_run(
    label: str, cg_base: Path | None, mode: str, applied: Applied, *, what: str
) -> Iterator[ContainedRun]:
    """A cgroup of its own for one run (a check, the integration review), named
    `<label>-<pid>-<hex>`; at the end everything in it (double-forked `setsid()` daemons
    included) is killed, the cgroup checked empty and removed. Without a cgroup (`cg_base`
    None, or one that cannot be created and `mode` is not `required`) the processes that
    carry the run's marker are killed instead. What could not be stopped is in `left` (and
    `applied.left_behind`) once the block has ended."""
    from gitsup.host.contain import create_cgroup, marked_processes, sweep_marked

    run_id = f"{label}-{os.getpid()}-{os.urandom(4).hex()}"
    cg = None
    if cg_base is not None:
        try:
            cg = create_cgroup(run_id, cg_base)
        except (GitsupError, OSError) as exc:
            if mode == "required":
                raise GitsupError(f"cannot create a cgroup for {what}: {exc}") from None
            applied.cgroup = False
            applied.cgroup_reason = f"cannot create one: {exc}"
    run = ContainedRun(run_id, cg, {RUN_MARKER: run_id})
    try:
        yield run
    finally:
        if cg is not None:
            if not cg.kill(timeout=5.0):
                run.left.append(f"cgroup {cg.path} could not be emptied")
            cg.remove()
        else:
            sweep_marked(run_id, var=RUN_MARKER)
            run.left += [f"pid {p.pid}" for p in marked_processes(run_id, var=RUN_MARKER)]
        applied.left_behind += run.left


def cgroup_base(mode: str, applied: Applied) -> Path | None:
    """Where a run's cgroups go for `[isolation] cgroup` `mode` (None: none, the reason in
    `applied`); raises (exit 2) when one is required and this host has none."""
    from gitsup.host.contain import resolve_mode

    base = resolve_mode(mode)
    if base is None:
        applied.cgroup = False
        applied.cgroup_reason = (
            'off ([isolation] cgroup = "off")'
            if mode == "off"
            else "no writable cgroup v2 hierarchy on this host"
        )
    return base


def checks_recipe(repo: GitRepo, conf: Confinement) -> Recipe:
    """The recipe confined checks get: the main checkout's, with the include of every task
    whose spec sets its own (`conf.include`), all of them together."""
    from gitsup.environment import include
    from gitsup.environment.recipe import merge, read_file
    from gitsup.spec import Environment

    from_file = read_file(repo.main_workdir)
    own = tuple(from_file.include or ()) if from_file is not None else ()
    paths = include.union(own if p is None else p for p in conf.include or (None,))
    return merge(from_file, Environment(include=list(paths)))


def environment_digest(repo: GitRepo, conf: Confinement, protect: Sequence[str] = ()) -> str:
    """What the checks of a confined run get besides their tree, as one hash: the resolved
    recipe (include, setup, setup_egress, cache) and an identity of each included entry of
    the main checkout (`include.identity`). Two runs with the same digest on the same tree
    run the same code in the same environment (the queue's memo key)."""
    import hashlib
    import json

    from gitsup.environment import include
    from gitsup.host.sandbox import protected_globs

    recipe = checks_recipe(repo, conf)
    home = os.environ.get("HOME") or os.path.expanduser("~")
    res = include.resolve(
        GitRepo.open(repo.main_workdir), recipe, protected_globs(home, list(protect))
    )
    data = {
        "include": [[s.path, s.kind, include.identity(s)] for s in res.sources],
        "refused": sorted(res.refused),
        "setup": [list(a) for a in recipe.setup],
        "setup_egress": list(recipe.setup_egress),
        "cache": list(recipe.cache),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _allowlisted(env: dict[str, str], patterns: Sequence[str], box: Path) -> dict[str, str]:
    """The sandbox's environment without the sandbox (`sup.sandbox off`): the allowlisted
    variables and private HOME and TMPDIR."""
    out = {k: v for k, v in env.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    out.update(private_env(box / "home", box / "tmp", "/dev/null"))
    return out


def sandbox_summary(plan: SandboxPlan) -> dict[str, Any]:
    """What of the sandbox `plan` applies, as recorded in a run's `confinement`."""
    report = plan.report()
    return {
        "mode": report["mode"],
        "enforced": report["enforced"],
        "landlock_abi": report.get("landlock_abi", 0),
        "mount_ns": report.get("mount_ns", False),
        "weaker": [w for w in report.get("weaker", []) if not w.startswith("git_state")],
    }
