"""Everything a task runs goes through the launcher: the worker's environment and sandbox
plan, the preflight, its cgroup and network, spawning or re-adopting the worker, stopping it
and proving it gone. The reviewer, the decider and the checks get their wrapper (sandbox,
cgroup, network namespace) here too (gitsup/supervision/tasknet.py holds the networks)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gitsup.errors import GitsupError
from gitsup.faults import fault
from gitsup.git import GitRepo
from gitsup.host.contain import (
    Cgroup,
    Limits,
    bootstrap_argv,
    create_cgroup,
    executable_problems,
    resolve_mode,
    sweep_marked,
)
from gitsup.host.procid import ProcessId
from gitsup.host.sandbox import SandboxPlan
from gitsup.layout import task_refs
from gitsup.names import TASK_MARKER
from gitsup.spec import DEFAULT_PIDS, TaskSpec, check_limit, default_memory, parse_size
from gitsup.store import eventtypes as et
from gitsup.store.lease import Lease, LeaseStore
from gitsup.store.payload import UNSET
from gitsup.store.record import TaskRecord
from gitsup.supervision.context import TaskContext
from gitsup.supervision.taskio import LimitHit, Spawned
from gitsup.supervision.tasknet import TaskNet
from gitsup.workers.base import (
    Inbox,
    WorkerAdapter,
    WorkerError,
    WorkerIdentity,
    WorkerOptions,
    WorkerSetup,
)
from gitsup.workers.kinds import worker_kind

WorkerFactory = Callable[[TaskSpec, WorkerSetup], WorkerAdapter]
Wrap = Callable[[list[str]], list[str]]


class Launcher:
    def __init__(
        self, ctx: TaskContext, lease: Lease, *, inbox: Inbox, worker_factory: WorkerFactory
    ) -> None:
        self.ctx = ctx
        self.repo, self.layout, self.spec, self.journal = (
            ctx.repo,
            ctx.layout,
            ctx.spec,
            ctx.journal,
        )
        self.emit, self.save, self.abort = ctx.emit, ctx.save, ctx.abort
        self.task, self.worktree = ctx.task, ctx.worktree
        self.lease = lease
        self.inbox = inbox
        self.worker_factory = worker_factory
        self.net = TaskNet(ctx)
        self.worker: WorkerAdapter | None = None
        self.spawns = ctx.record.spawns  # counted over the task's life
        self.cg_base: Path | None = None
        self.cgroup: Cgroup | None = None
        self.exit_stack = contextlib.ExitStack()
        self.swept = False
        self.left_cgroups: list[str] = []
        # a command reviewer's or decider's network namespace and its last call's cgroup
        self._judge_nets: dict[str, str | None] = {}
        self._judge_cgroups: dict[str, Cgroup] = {}
        self._judge_stack = contextlib.ExitStack()
        self._sandbox: SandboxPlan | None = None
        self._sandbox_error: str | None = None
        # Whether the kernel sandbox (Landlock, mount and PID namespaces, seccomp, no
        # privileges) is in force for everything this task runs; known once the worker
        # environment is built, confirmed by what the worker's process saw once it started.
        self.sandbox_enforced = False
        self._limits: Limits | None = None
        self._limits_error: str | None = None
        self._watch_stop = threading.Event()
        self._stopped_hits: list[LimitHit] = []
        # Two holds on the worker that must not undo each other: its work being verified
        # (hold/release) and a person's `git sup pause` (pause_by_user). It runs when neither
        # holds it. `_stopped_group`: the process group stopped by SIGSTOP (no cgroup).
        self._held_for_verify = False
        self._held_by_user = False
        self._stopped_group: int | None = None

    @property
    def record(self) -> TaskRecord:
        return self.journal.record

    # --- environment and sandbox ------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        from gitsup.host.proc import child_env

        env = child_env(
            {
                TASK_MARKER: self.task,
                "GITSUP_WORKTREE": str(self.worktree),
                "GITSUP_BASELINE": self.record.baseline,
            },
            drop=("CLAUDECODE",),
        )
        env.update(self.spec.worker.env)
        from gitsup.workers.claude.worker import model_call_env

        for k, v in model_call_env(self.spec.budget).items():
            env.setdefault(k, v)
        plan = self.sandbox_plan(env)
        return dict(plan.env) if plan is not None else env

    def judge_env(self) -> dict[str, str]:
        """The environment of the checks, the reviewer and the decider: the worker's without
        its own Git config (`GIT_CONFIG_GLOBAL`, a file in its private HOME), so that Git in
        them runs with gitsup's settings, whatever the worker set for itself."""
        env = self.worker_env()
        plan = self.sandbox_plan()
        if plan is not None and plan.active:
            env["GIT_CONFIG_GLOBAL"] = os.devnull
        return env

    def sandbox_plan(self, env: Mapping[str, str] | None = None) -> SandboxPlan | None:
        """The task's sandbox (gitsup/host/sandbox.py), built once; None when it cannot be built
        (the reason is a preflight failure)."""
        if self._sandbox is not None or self._sandbox_error is not None:
            return self._sandbox
        if env is None:
            self.worker_env()
            return self._sandbox
        from gitsup.host.sandbox import build_plan, load_rules
        from gitsup.host.sandbox import resolve_mode as sandbox_mode
        from gitsup.integration.keys import protected_paths

        try:
            mode = sandbox_mode(self.spec.sandbox.mode, self.repo.config_get("sup.sandbox"))
            env = dict(env)
            for var, key in (("NAME", "user.name"), ("EMAIL", "user.email")):
                value = self.repo.config_get(key)
                if value and f"GIT_AUTHOR_{var}" not in env:
                    env.setdefault(f"GIT_AUTHOR_{var}", value)
                    env.setdefault(f"GIT_COMMITTER_{var}", value)
            from gitsup.store import taskgit

            if taskgit.uses_private_dir(self.layout, self.task):
                # before anything of the task runs: the shell of its Git dir as gitsup
                # writes it (a task made by an older gitsup had it writable), then bound
                # read-only by the sandbox
                taskgit.seal(self.repo, self.layout, self.task, self.worktree)
            self._sandbox = build_plan(
                mode=mode,
                rules=load_rules(self.repo.main_workdir),
                worktree=self.worktree,
                common_dir=self.layout.common_dir,
                task_dir=self.layout.task_dir(self.task),
                branch=self.record.branch,
                env=env,
                programs=self._programs(env),
                keep_env=self.spec.worker.env.keys(),
                claude=self._runs_claude_code(),
                protect=protected_paths(self.repo),
            )
            self._include(self._sandbox, protected_paths(self.repo))
        except (GitsupError, OSError) as exc:
            self._sandbox_error = exc.message if isinstance(exc, GitsupError) else str(exc)
            self._sandbox = None
            return None
        self.sandbox_enforced = self._sandbox.enforced
        self.record.sandbox = self._sandbox.report()
        return self._sandbox

    def _runs_claude_code(self) -> bool:
        """Whether the worker, the reviewer or the decider runs Claude Code (the kind
        registry says which kinds do): the sandbox then gets a copy of the user's config."""
        from gitsup.workers.kinds import claude_config_agents, worker_kind

        judges = (self.spec.review.kind, self.spec.decider.machine_kind())
        agents = claude_config_agents()
        return worker_kind(self.spec.worker.kind).claude_config or any(k in agents for k in judges)

    def _include(self, plan: SandboxPlan, protect: list[str]) -> None:
        """`[environment] include`: the main checkout's ignored paths in the worktree,
        copy-on-write (gitsup/environment/include.py); made once per task, recorded."""
        from gitsup.environment import include
        from gitsup.environment.recipe import load_recipe

        state = self.layout.task_dir(self.task) / "env"
        done = include.made_before(state)
        if done is None:
            main_root = self.repo.main_workdir
            recipe = load_recipe(main_root, self.spec.environment)
            if not recipe.include and not recipe.refused:
                return
            from gitsup.host.sandbox import protected_globs

            home = os.environ.get("HOME") or os.path.expanduser("~")
            done = include.for_task(
                GitRepo.open(main_root),
                recipe,
                worktree=self.worktree,
                state=state,
                overlay=plan.active and bool(plan.config.get("mountns")),
                deny=protected_globs(home, protect),
            )
            self.emit(et.EnvironmentIncluded(include=done.entries, refused=done.refused))
        if done.overlays:
            plan.config["include"] = done.overlays
        self.record.environment = done.report()

    def _programs(self, env: Mapping[str, str]) -> list[list[str]]:
        """Every argv this task runs, so that the sandbox lets them be read and executed."""
        spec = self.spec
        out = [list(spec.worker.argv), *(list(c.argv) for c in spec.checks)]
        from gitsup.environment.setup import task_recipe

        with contextlib.suppress(GitsupError):  # the setup phase's commands
            out += [list(a) for a in task_recipe(self.repo.main_workdir, spec.environment).setup]
        out += [list(spec.review.argv), list(spec.decider.argv)]
        if (
            "claude" in (spec.review.kind, spec.decider.machine_kind())
            or spec.worker.kind != "process"
        ):
            from gitsup.workers.claude.worker import find_claude

            argv = list(spec.worker.argv) if spec.worker.kind != "process" else []
            with contextlib.suppress(WorkerError):
                out.append(find_claude(argv, env))
            with contextlib.suppress(WorkerError):
                out.append(find_claude([], env))
        if "codex" in (spec.worker.kind, spec.review.kind, spec.decider.machine_kind()):
            from gitsup.workers.codex.worker import find_codex

            for argv in (
                list(spec.worker.argv) if spec.worker.kind == "codex" else [],
                list(spec.decider.argv) if spec.decider.machine_kind() == "codex" else [],
            ):
                with contextlib.suppress(WorkerError):
                    out.append(find_codex(argv, env))
        kinds = (spec.worker.kind, spec.review.kind, spec.decider.machine_kind())
        if "acp" in kinds:  # the agent, and the CLI it may run
            from gitsup.workers.acp.worker import agent_env, find_acp

            for argv in (
                spec.worker.argv if spec.worker.kind == "acp" else [],
                spec.review.argv,
                spec.decider.argv if spec.decider.machine_kind() == "acp" else [],
            ):
                with contextlib.suppress(WorkerError):
                    out.append(find_acp(argv, env))
            cli = agent_env(env).get("CLAUDE_CODE_EXECUTABLE")
            if cli:
                out.append([cli])
        return out

    def wrapper(
        self,
        cg: Cgroup | None,
        netns: str | None,
        *,
        read_only: bool = False,
        observe: bool = False,
    ) -> Wrap | None:
        """The bootstrap prefix for one process of this task (None: run it as is). Fails
        closed: nothing runs when the sandbox could not be built or is required but missing
        (a path that skips the spawn preflight, such as verifying after a recovery).
        `observe`: the process reports what it sees of its sandbox (the worker)."""
        from gitsup.host.sandbox import require_enforced

        plan = self.sandbox_plan()
        if plan is not None and cg is None and netns is None and not plan.active:
            return None

        def wrap(argv: list[str]) -> list[str]:
            if plan is None:
                raise GitsupError(f"sandbox: {self._sandbox_error}")
            require_enforced(plan)
            sandbox = plan.argv(read_only=read_only, files=argv, observe=observe)
            return bootstrap_argv(argv, cgroup=cg, netns=netns, sandbox=sandbox)

        return wrap

    def judge_wrap(self, who: str) -> Wrap:
        """The wrapper of a command reviewer or decider (`kind = "command"`): read-only in the
        sandbox, in a loopback network namespace of its own (per the task's `[isolation]
        network`) and a cgroup per call; what one call left running is killed before the
        next call and when the task ends."""

        def wrap(argv: list[str]) -> list[str]:
            inner = self.wrapper(self._judge_cgroup(who), self._judge_netns(who), read_only=True)
            return inner(argv) if inner is not None else argv

        return wrap

    def _judge_netns(self, who: str) -> str | None:
        if who not in self._judge_nets:
            net = self.net.network_for(who, self._judge_stack, self.judge_env(), agent=False)
            self._judge_nets[who] = net.netns
        return self._judge_nets[who]

    def _judge_cgroup(self, who: str) -> Cgroup | None:
        self._end_judge(who)
        if self.cg_base is None:
            return None
        try:
            cg = create_cgroup(f"{self.task}-j{os.urandom(3).hex()}", self.cg_base, self.limits())
        except (GitsupError, OSError):
            return None
        self._judge_cgroups[who] = cg
        return cg

    def _end_judge(self, who: str) -> None:
        cg = self._judge_cgroups.pop(who, None)
        if cg is not None:
            if cg.kill(timeout=5.0):
                cg.remove()
            else:
                self.left_cgroups.append(f"cgroup {cg.path} still has processes")

    def end_judges(self) -> None:
        """Kill what a command reviewer or decider left running and remove their network
        namespaces (when the worker stops, and before the task is finalised)."""
        for who in list(self._judge_cgroups):
            self._end_judge(who)
        self._judge_stack.close()
        self._judge_nets.clear()

    def read_only_wrappers(self) -> tuple[Wrap | None, Callable[[str | None], Wrap | None]]:
        """For the reviewer and the decider: read-only, on the host or in a namespace."""
        return (
            self.wrapper(None, None, read_only=True),
            lambda ns: self.wrapper(None, ns, read_only=True),
        )

    def policy_sandboxed(self) -> bool:
        """The policy's sandboxed mode (docs/policy.md, "Sandboxed mode") applies only when the kernel contains the worker: the sandbox
        is enforced and its network is a namespace (loopback, or gated to the model API)."""
        return self.sandbox_enforced and self.net.describe.get("mode") in ("gated", "loopback")

    # --- cgroup limits ----------------------------------------------------------------------

    def limits(self) -> Limits | None:
        """The bounds of the task's cgroups: `[limits]` of the spec, else git config
        `sup.limits.pids` / `sup.limits.memory`, else the defaults; 0 is no limit. None when a
        configured value is not valid (the reason is a preflight failure)."""
        if self._limits is not None or self._limits_error is not None:
            return self._limits
        values: dict[str, int] = {}
        for what, given, default in (
            ("pids", self.spec.limits.pids, DEFAULT_PIDS),
            ("memory", self.spec.limits.memory, None),
        ):
            if given is None:
                raw = self.repo.config_get(f"sup.limits.{what}")
                if raw is not None:
                    try:
                        n = int(raw) if what == "pids" else parse_size(raw)
                        given = check_limit(what, n)
                    except ValueError as exc:
                        self._limits_error = f"git config sup.limits.{what} = {raw!r}: {exc}"
                        return None
            if given is None:
                given = default if default is not None else default_memory()
            values[what] = given
        self._limits = Limits(pids=values["pids"] or None, memory=values["memory"] or None)
        return self._limits

    def _report_limits(self, cg: Cgroup | None) -> None:
        """The record's sandbox report says what bounds the worker, and what could not."""
        plan = self.sandbox_plan()
        report = dict(plan.report()) if plan is not None else dict(self.record.sandbox or {})
        asked = self.limits() or Limits()
        weaker = list(report.get("weaker") or [])
        if cg is not None:
            report["limits"] = cg.describe_limits()
            weaker += cg.weaker
        elif asked.pids is not None or asked.memory is not None:
            report["limits"] = {}
            weaker.append("pids and memory limits not enforced: the worker has no cgroup")
        if cg is None or not self._can_freeze():
            weaker.append(
                "not frozen between turns: what the worker leaves running can run while its "
                "work is verified"
                + (" (a persistent worker is never frozen)" if cg is not None else "")
            )
        report["weaker"] = weaker
        self.record.sandbox = report

    def limit_hits(self) -> list[LimitHit]:
        """The limits the worker's cgroup ran into so far (once it is removed: what it had)."""
        cg = self.cgroup
        if cg is None:
            return list(self._stopped_hits)
        return [LimitHit(kind, why) for kind, why in cg.limit_hits()]

    def _watch_limits(self, cg: Cgroup, stop: threading.Event) -> None:
        """While the worker runs: a limit it runs into ends its turn (LimitHit)."""
        seen: set[str] = set()
        while not stop.wait(0.25):
            if self.cgroup is not cg:
                return
            for hit in self.limit_hits():
                if hit.kind not in seen:
                    seen.add(hit.kind)
                    self.inbox.put(hit)

    # --- holding the worker between turns --------------------------------------------------

    def _can_freeze(self) -> bool:
        """A persistent worker (the tmux TUI) outlives its supervisor: it is never frozen."""
        w = self.worker
        return not (
            w.capabilities.persistent
            if w is not None
            else worker_kind(self.spec.worker.kind).persistent
        )

    def hold(self) -> list[LimitHit]:
        """The worker's turn ended: until its next turn nothing of it runs. A live worker's
        cgroup is frozen (one that cannot be frozen is killed); what an exited worker left
        running is killed. Returns every limit it ran into (the machine knows which it has
        seen: one the limit watcher queued may not have reached it yet)."""
        cg = self.cgroup
        if cg is None or not self._can_freeze():
            return self.limit_hits()
        self._held_for_verify = True
        if self.worker_alive():
            if not cg.frozen():
                if cg.freeze(timeout=max(5.0, self.spec.worker.stop_grace)):
                    self.emit(et.WorkerHeld(how="frozen", processes=len(cg.procs())))
                else:
                    n = len(cg.procs())
                    cg.kill(timeout=self.spec.worker.stop_grace + 5)
                    self.emit(et.WorkerHeld(how="not frozen, killed", processes=n))
        else:
            left = cg.procs()
            if left:
                cg.kill(timeout=self.spec.worker.stop_grace + 5)
                self.emit(et.WorkerHeld(how="leftovers killed", processes=len(left)))
        return self.limit_hits()

    def release(self) -> None:
        """A new turn starts: thaw the worker (unless a person paused it)."""
        self._held_for_verify = False
        cg = self.cgroup
        if cg is not None and cg.frozen() and not self._held_by_user:
            cg.thaw()
            self.emit(et.WorkerHeld(how="thawed", processes=len(cg.procs())))

    def pause_by_user(self, on: bool) -> tuple[bool, str, int]:
        """`git sup pause` (on) or `resume`: freeze or thaw the whole task, its cgroup (else
        SIGSTOP/SIGCONT of its process group). A resume leaves a worker held for
        verification held. Returns (done, how or why not, processes)."""
        from gitsup.host.proc import signal_group

        cg = self.cgroup
        if self.worker is None or not self.worker_alive():
            if not on:  # nothing left to thaw: the pause ends all the same
                self._held_by_user = False
                return True, "worker gone", 0
            return False, "no worker is running", 0
        if on and not self._can_freeze():
            return False, "a tmux worker is never frozen (it outlives its supervisor)", 0
        if cg is not None and cg.exists():
            if on:
                grace = max(5.0, self.spec.worker.stop_grace)
                if not cg.frozen() and not cg.freeze(timeout=grace):
                    return False, "the worker's cgroup did not freeze", len(cg.procs())
                self._held_by_user = True
                return True, "cgroup frozen", len(cg.procs())
            self._held_by_user = False
            if self._held_for_verify:
                return True, "still held between turns", len(cg.procs())
            if not cg.thaw():
                return False, "the worker's cgroup did not thaw", len(cg.procs())
            return True, "cgroup thawed", len(cg.procs())
        pgid = (self.record.worker or {}).get("pgid")
        if not isinstance(pgid, int) or pgid <= 1:
            return False, "the worker has no process group to stop", 0
        try:
            signal_group(pgid, signal.SIGSTOP if on else signal.SIGCONT)
        except OSError as exc:
            return False, f"cannot signal the worker's process group: {exc.strerror}", 0
        self._held_by_user = on
        self._stopped_group = pgid if on else None
        return True, "SIGSTOP" if on else "SIGCONT", 1

    # --- preflight and spawn --------------------------------------------------------------

    def _agent_binary_problems(self) -> list[str]:
        """Each spawn checks the agent executable again (gitsup/workers/agentbin.py): safe
        to run, as pinned, and the one the task started with (`git sup recover
        --allow-new-binary` takes a new one)."""
        from gitsup.workers.agentbin import UnsafeBinary, changed
        from gitsup.workers.preflight import worker_agent_binary

        try:
            current = worker_agent_binary(self.repo, self.spec)
        except UnsafeBinary as exc:
            return [exc.message]
        if current is None:
            return []
        recorded = self.record.agent_binary
        why = changed(recorded, current)
        if why:
            return [f"{why} (`git sup recover --takeover --allow-new-binary` takes it)"]
        if recorded is None:
            self.record.agent_binary = current.as_dict()
        return []

    def preflight(self) -> list[str]:
        """Everything that must hold before anything runs. Returns the failures."""
        problems: list[str] = []
        for d in (self.layout.task_dir(self.task), self.layout.leases):
            if not os.access(d, os.W_OK):
                problems.append(f"state directory {d} is not writable")
        current = self.repo.ref_target(task_refs(self.task)["baseline"])
        if current != self.record.baseline:
            problems.append("baseline ref changed between validation and spawn")
        head = self.repo.branch_target(self.record.branch)
        if head != self.record.baseline and self.record.turns == 0:
            problems.append(f"{self.record.branch} moved between validation and spawn")
        problems += self._agent_binary_problems()
        try:
            self.cg_base = resolve_mode(self.spec.isolation.cgroup)
        except GitsupError as exc:
            problems.append(exc.message)
        if self.limits() is None:
            problems.append(f"limits: {self._limits_error}")
        plan = self.sandbox_plan()
        if plan is None:
            problems.append(f"sandbox: {self._sandbox_error}")
        else:
            from gitsup.host.sandbox import required_problems

            problems += required_problems(plan)
        exe = self._worker_executable()
        if exe is not None:
            problems += executable_problems(exe)
        return problems

    def _worker_executable(self) -> str | None:
        argv = list(self.spec.worker.argv)
        if self.spec.worker.kind == "claude":
            from gitsup.workers.claude.worker import find_claude

            try:
                return find_claude(argv, self.worker_env())[0]
            except WorkerError:
                return None  # reported by the adapter at start, with its own message
        if self.spec.worker.kind == "codex":
            from gitsup.workers.codex.worker import find_codex

            try:
                return find_codex(argv, self.worker_env())[0]
            except WorkerError:
                return None
        if self.spec.worker.kind == "acp":
            from gitsup.workers.acp.worker import find_acp

            try:
                return find_acp(argv, self.worker_env())[0]
            except WorkerError:
                return None
        if not argv:
            return None
        first = argv[0]
        if os.sep in first:
            return first if os.path.isabs(first) else str(self.worktree / first)
        return shutil.which(first, path=self.worker_env().get("PATH")) or first

    def _context(self, env: Mapping[str, str], options: WorkerOptions) -> WorkerSetup:
        return WorkerSetup(
            task_id=self.task,
            worktree=self.worktree,
            task_dir=self.layout.task_dir(self.task),
            env=env,
            argv=tuple(self.spec.worker.argv),
            inbox=self.inbox,
            options=options,
        )

    def spawn(self, prompt: str, message: str | None = None) -> Spawned:
        """Preflight, cgroup, network, then the worker. What came of it is the answer.
        `message`: what the new worker is started for (a reopened task's round), in its
        environment as GITSUP_MESSAGE."""
        problems = self.preflight()
        if problems:
            return Spawned(failure=tuple(f"preflight: {p}" for p in problems))
        self.spawns += 1
        self.record.spawns = self.spawns
        self.journal.log.worker = self.spawns
        cg = None
        if self.cg_base is not None:
            try:
                cg = create_cgroup(f"{self.task}-w{self.spawns}", self.cg_base, self.limits())
            except (GitsupError, OSError) as exc:
                if self.spec.isolation.cgroup == "required":
                    return Spawned(failure=(f"preflight: cannot create the worker cgroup: {exc}",))
        self.cgroup = cg
        env = self.worker_env()
        if message is not None:
            env["GITSUP_MESSAGE"] = message
        self._report_limits(cg)
        try:
            agent = worker_kind(self.spec.worker.kind).agent is not None
            net = self.net.network_for(
                "worker", self.exit_stack, env, agent=agent, model_kind=self.spec.worker.kind
            )
        except GitsupError as exc:
            return Spawned(failure=(f"preflight: {exc.message}",))
        self.net.describe = net.describe
        netns = net.netns
        ctx = self._context(
            {**env, **net.env},
            WorkerOptions(
                spec=self.spec,
                wrap=self.wrapper(cg, netns, observe=True),
                egress=net.gate,
                abort=self.abort,
            ),
        )
        # Crash window marker: a record with spawn_pending and no worker identity means
        # "a worker may have been spawned"; recover/doctor look for it in the cgroup.
        self.record.spawn_pending = True
        self.record.worker = {
            "pid": None,
            "cgroup": str(cg.path) if cg else None,
            "cgroup_inode": cg.inode if cg else None,
        }
        self.save()
        fault("before_spawn")
        try:
            self.worker = self.worker_factory(self.spec, ctx)
            ident = self.worker.start(prompt)
        except (WorkerError, GitsupError) as exc:
            msg = exc.message if isinstance(exc, GitsupError) else str(exc)
            self.record.spawn_pending = False
            if self.abort.is_set():
                return Spawned(aborted="")
            self.cleanup_cgroup()
            return Spawned(failure=(f"worker could not start: {msg}",))
        fault("after_spawn")
        if netns is not None:  # a re-adopting supervisor serves the same namespace again
            ident = WorkerIdentity(
                ident.pid,
                ident.start_time,
                ident.pgid,
                ident.cgroup,
                ident.cgroup_inode,
                {
                    **ident.extra,
                    "netns": netns,
                    "egress_proxy_port": getattr(net.gate, "proxy_port", None),
                    # the gate outlives a killed supervisor; a re-adopting one finds it here
                    "egress_gate": net.gate.identity() if net.gate is not None else None,
                },
            )
        if cg is not None:
            ident = WorkerIdentity(
                ident.pid, ident.start_time, ident.pgid, str(cg.path), cg.inode, ident.extra
            )
        self._record_worker(ident)
        if cg is not None and cg.limits:
            self._watch_stop = threading.Event()
            threading.Thread(
                target=self._watch_limits, args=(cg, self._watch_stop), daemon=True
            ).start()
        if self.abort.is_set():
            return Spawned(repairable=self.worker.capabilities.repairable, aborted="")
        return Spawned(repairable=self.worker.capabilities.repairable)

    def adopt(self) -> WorkerIdentity:
        """Take over a persistent worker that survived its supervisor (raises WorkerError
        when its identity does not match)."""
        env = self.worker_env()
        gate = self.net.regate(self.record, env, self.exit_stack)
        ctx = self._context(env, WorkerOptions(spec=self.spec, egress=gate))
        worker = self.worker_factory(self.spec, ctx)
        ident = worker.adopt(self.record.worker or {})
        if gate is not None:  # the gate found again, or a new one on the same ports
            extra = {
                **ident.extra,
                "egress_gate": gate.identity(),
                "egress_gate_reused": gate.reused,
            }
            ident = WorkerIdentity(
                ident.pid, ident.start_time, ident.pgid, ident.cgroup, ident.cgroup_inode, extra
            )
            if self.record.worker is not None:
                self.record.worker = {**self.record.worker, "extra": extra}
        self.worker = worker
        self.spawns = max(self.spawns, 1)
        return ident

    def _record_worker(self, ident: WorkerIdentity) -> None:
        """Persist the worker's identity (record and lease) before clearing spawn_pending,
        so every crash window leaves a recognizable trace. The record's sandbox says what
        the worker's process saw of it."""
        if self._sandbox is not None and self.record.sandbox is not None:
            from gitsup.host.procid import ProcessId

            pid = ProcessId(ident.pid, ident.start_time)
            # on top of what is recorded already (the limits, what is weaker)
            self.record.sandbox = self._sandbox.observe(dict(self.record.sandbox), pid.alive)
            self.sandbox_enforced = bool(self.record.sandbox.get("enforced"))
        self.record.worker = ident.as_dict()
        self.record.worker_kind = self.spec.worker.kind
        self.save()
        with contextlib.suppress(GitsupError, OSError):
            extra: dict[str, Any] = {
                "supervisor": self.record.supervisor,
                "worker": ident.as_dict(),
            }
            if ident.cgroup:
                # the worker's cgroup by device and inode: a path reused for another cgroup
                # is not taken for this one
                st = os.stat(ident.cgroup)
                extra["cgroup"] = {"path": ident.cgroup, "dev": st.st_dev, "inode": st.st_ino}
            self.lease = LeaseStore(self.layout.leases).update_extra(self.lease, extra)
        self.record.spawn_pending = False
        self.emit(
            et.WorkerStarted(
                kind=self.spec.worker.kind,
                argv=list(self.spec.worker.argv),
                **ident.as_dict(),
                network=self.net.describe,
                sandbox=self.record.sandbox,
                binary=self.record.agent_binary or UNSET,
                host=self.record.host or UNSET,
            )
        )
        self.save()

    # --- stopping -------------------------------------------------------------------------

    def worker_alive(self) -> bool:
        return self.worker is not None and self.worker.alive

    def identity_gone(self) -> str | None:
        """Why the worker is gone although its adapter reported no exit: the adapter says it
        is not alive, its recorded identity (pid and start time) is gone or reused, and
        nothing is left in its cgroup. None while any of them says it lives."""
        from gitsup.host.procid import ProcessId

        if self.worker is None or self.worker.alive:
            return None
        w = self.record.worker or {}
        if not isinstance(w.get("pid"), int):
            return None
        ident = ProcessId.from_dict(w)
        if ident is None or not ident.start_time or ident.alive():
            return None  # alive, or no start time recorded to tell a reused pid by
        cg = self.cgroup
        if cg is not None and cg.exists() and cg.procs():
            return None
        return f"worker pid {ident.pid} (started {ident.start_time:.2f}) is gone"

    def stop_worker(self, why: str, *, announce: bool) -> None:
        w = self.worker
        if w is None:
            return
        cg = self.cgroup
        frozen = cg is not None and cg.frozen()
        if frozen and cg is not None:  # held since its turn ended: it never runs again
            cg.kill(timeout=self.spec.worker.stop_grace + 5)
        if self._stopped_group is not None:  # paused by SIGSTOP: let it take the stop
            from gitsup.host.proc import signal_group

            with contextlib.suppress(OSError):
                signal_group(self._stopped_group, signal.SIGCONT)
            self._stopped_group = None
        try:
            how = w.stop(grace=self.spec.worker.stop_grace)
        except (WorkerError, OSError) as exc:
            how = f"stop failed: {exc}"
        if frozen:
            how = (
                "killed while paused"
                if self._held_by_user
                else "killed while frozen (its turn had ended)"
            )
        self._held_by_user = False
        if announce:
            self.emit(et.WorkerStopped(reason=why, how=how))
        self.cleanup_cgroup()
        self.exit_stack.close()
        self.end_judges()

    def cleanup_cgroup(self) -> None:
        self._watch_stop.set()
        cg = self.cgroup
        if cg is None:
            # A worker that was only detached (a re-adopted tmux session) keeps running.
            detached = bool(getattr(self.worker, "detached", False))
            if self.spawns and not self.swept and not detached:
                self.swept = True
                swept = sweep_marked(self.task)
                self.emit(
                    et.WorkerStopped(
                        containment="process group + descendant sweep",
                        guarantee="weaker: a descendant that left the process group and "
                        f"cleared {TASK_MARKER} from its environment can escape",
                        swept=swept,
                    )
                )
            return
        self._stopped_hits = self.limit_hits()  # the verdict after the stop still sees them
        empty = cg.kill(timeout=self.spec.worker.stop_grace + 5)
        removed = cg.remove() if empty else False
        end = time.monotonic() + 3.0
        while empty and not removed and time.monotonic() < end:
            time.sleep(0.05)  # a process of it still being released (EBUSY for a moment)
            removed = cg.remove()
        self.swept = True  # the cgroup, proven empty, is the stronger guarantee
        self.emit(et.WorkerStopped(cgroup=str(cg.path), verified_empty=empty, removed=removed))
        if not empty:
            self.record.reasons.append(f"cgroup {cg.path} could not be emptied")
            self.left_cgroups.append(f"cgroup {cg.path} still has processes")
        elif not removed:
            # The lease is released only after the cgroup is gone: one left in place may
            # still be joined or hold what the worker left in it.
            self.left_cgroups.append(f"cgroup {cg.path} is empty but could not be removed")
        self.cgroup = None

    def left_behind(self) -> list[str]:
        """What of the worker cleanup could not prove gone: its process (same pid and
        start time) after a bounded wait, a cgroup that could not be emptied."""
        left = list(self.left_cgroups)
        w = self.record.worker or {}
        ident = ProcessId.from_dict(w) if isinstance(w.get("pid"), int) else None
        if getattr(self.worker, "detached", False):
            # A re-adopted worker let go on purpose keeps running, and keeps writing in the
            # worktree: its lease stays held while it lives (`git sup doctor --fix` ends it).
            if ident is not None and ident.alive():
                where = (
                    (w.get("extra") or {}).get("socket")
                    if isinstance(w.get("extra"), dict)
                    else None
                )
                left.append(
                    f"detached worker pid {ident.pid} keeps running"
                    + (f" (tmux socket {where})" if where else "")
                )
            return left
        if ident is not None:
            end = time.monotonic() + self.spec.worker.stop_grace
            while ident.alive() and time.monotonic() < end:
                time.sleep(0.05)
            if ident.alive():
                left.append(f"worker pid {ident.pid} is still running")
        return left

    def release_lease(self) -> None:
        with contextlib.suppress(Exception):
            LeaseStore(self.layout.leases).release(self.lease)
