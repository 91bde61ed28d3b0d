"""Hand-written mutants of the promises mutmut cannot reach (their tests run the real
`git sup` console script, which imports gitsup from the checkout, not from mutmut's copy).

Each mutant deletes or weakens the code that keeps one promise, in place, runs the tests
that pin that promise, and puts the file back. A mutant whose tests still pass is a missing
test. Developer workflow, not CI: most of an hour on 2 cores.

Before anything runs, every chosen mutant is checked against today's code: its text to
replace must be in its file exactly once and each of its tests must exist, else the run
stops naming every stale mutant. Each mutant's tests run in a cgroup of their own (a
process group where there is no writable cgroup v2 tree), killed whole afterwards: nothing
a test started, detached or not, outlives its mutant. A mutant's tests that hang past
`--timeout` count as a kill (as mutmut counts them) and are shown as such.

    .venv/bin/python bench/promise_mutants.py            # all
    .venv/bin/python bench/promise_mutants.py detach     # those whose name contains "detach"
    .venv/bin/python bench/promise_mutants.py --list     # names and tests, nothing run
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent


class Mutant(NamedTuple):
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


T = "tests/supervision/test_promises_task.py::"
C = "tests/cli/test_promises_cli.py::"
B = "tests/boundary/test_promises_boundary.py::"
TRUST = "tests/boundary/test_trust.py::"
PUSH = "tests/boundary/test_push_from_checkout.py::"
STATE = "tests/git/test_git_state.py::"
LIMITS = "tests/git/test_import_limits.py::"
NOTIFY = "tests/attention/test_notify.py::"
CONFINED = "tests/boundary/test_confined_checks.py::"
HOST = "tests/host/test_sandbox.py::"
PROTECTED = "tests/host/test_sandbox_protected.py::"
HOST_LIMITS = "tests/host/test_limits.py::"

MUTANTS = [
    # --- a task's outcome --------------------------------------------------------------
    Mutant(
        "ready-only-for-the-verified-commit",
        "gitsup/supervision/finaliser.py",
        "if final == State.COMPLETED and head != verified_head:",
        "if False:",
        (T + "test_the_branch_moving_after_verification_parks_the_task",),
    ),
    Mutant(
        "optional-checks-do-not-park",
        "gitsup/supervision/verifier.py",
        "failed = [r.name for r in results if r.required and not r.passed]",
        "failed = [r.name for r in results if not r.passed]",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "required-checks-park",
        "gitsup/supervision/verifier.py",
        "failed = [r.name for r in results if r.required and not r.passed]",
        "failed = []",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "require-local-commit-off",
        "gitsup/supervision/verifier.py",
        "if self.spec.autonomy.require_local_commit:",
        "if True:",
        (T + "test_require_local_commit",),
    ),
    Mutant(
        "require-local-commit-on",
        "gitsup/supervision/verifier.py",
        "if self.spec.autonomy.require_local_commit:",
        "if False:",
        (T + "test_require_local_commit",),
    ),
    Mutant(
        "per-check-timeout",
        "gitsup/verification/checks.py",
        "timeout=check.timeout,",
        "timeout=None,",
        (T + "test_a_check_over_its_timeout_is_stopped_with_its_process_group",),
    ),
    Mutant(
        "forbidden-in-the-prompt",
        "gitsup/spec.py",
        "        if self.forbidden:\n",
        "        if False:\n",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    Mutant(
        "baseline-in-the-environment",
        "gitsup/supervision/launcher.py",
        '"GITSUP_BASELINE": self.record.baseline,',
        "",
        (T + "test_what_the_worker_is_told_and_which_failing_check_parks",),
    ),
    # --- detached supervisors, wait, doctor, signals --------------------------------------
    Mutant(
        "detach-own-session",
        "gitsup/host/proc.py",
        "            stderr=subprocess.STDOUT,\n            start_new_session=True,\n            close_fds=True,",
        "            stderr=subprocess.STDOUT,\n            start_new_session=False,\n            close_fds=True,",
        (C + "test_detach_returns_while_the_task_runs_in_its_own_session",),
    ),
    Mutant(
        "wait-timeout",
        "gitsup/tasks/detach.py",
        "if end is not None and time.monotonic() > end:",
        "if False:",
        (C + "test_detach_returns_while_the_task_runs_in_its_own_session",),
    ),
    Mutant(
        "doctor-missing-worktree",
        "gitsup/supervision/recovery.py",
        'findings.append(DoctorFinding("missing-worktree", rec.worktree, rec.id))',
        "pass",
        (C + "test_doctor_finds_missing_and_unknown_worktrees",),
    ),
    Mutant(
        "doctor-stale-lease",
        "gitsup/supervision/recovery.py",
        "        if lease.owner_alive:\n            continue\n",
        "        continue\n",
        (C + "test_wait_and_doctor_when_the_supervisor_died",),
    ),
    Mutant(
        "sigint-exits-130",
        "gitsup/cli/start_cmd.py",
        'if "stopped: signal SIGINT" in record.reasons:',
        "if False:",
        (C + "test_a_signalled_foreground_start_stops_the_task_and_keeps_its_work",),
    ),
    Mutant(
        "detached-queue-runner-ends",
        "gitsup/tasks/queue.py",
        '    argv = proc.gitsup_python("gitsup", "queue", "run", "--into", branch)\n',
        '    argv = ["sh", "-c", \'"$@"; exec sleep 600\', "sh",'
        ' *proc.gitsup_python("gitsup", "queue", "run", "--into", branch)]\n',
        ("tests/tasks/test_queue.py::test_detached_runner",),
    ),
    # --- the boundary: pushes, gates, integrations ------------------------------------------
    Mutant(
        "pre-push-process-tree-worker",
        "gitsup/boundary/pusher.py",
        "if r_w is not None and (",
        "if False and (",
        (B + "test_a_push_from_inside_a_tasks_process_tree_is_refused",),
    ),
    Mutant(
        "pre-push-process-tree-cwd",
        "gitsup/boundary/pusher.py",
        "if cwd_p and _within(cwd_p, r.worktree):",
        "if False:",
        (B + "test_a_push_from_inside_a_tasks_process_tree_is_refused",),
    ),
    Mutant(
        "integrate-rechecks-clean-target",
        "gitsup/integration/integrate.py",
        "    if checkout is not None:\n        _require_clean(checkout, branch)\n    message =",
        "    message =",
        (B + "test_integrate_rechecks_a_clean_target_after_its_checks",),
    ),
    Mutant(
        "gate-covers-only-baseline-to-candidate",
        "gitsup/boundary/trust.py",
        'covered[oid] = {oid} | (reach(t["Sup-Candidate"]) - reach(t["Sup-Baseline"]))',
        'covered[oid] = {oid} | reach(t["Sup-Candidate"])',
        (TRUST + "test_an_integration_covers_only_baseline_to_candidate",),
    ),
    Mutant(
        "notes-never-deleted",
        "gitsup/boundary/evaluate.py",
        "        if u.is_delete:\n"
        '            return RefVerdict(u.ref, False, f"{NOTES_REF} is evidence: it is never deleted")\n',
        "",
        (PUSH + "test_notes_go_anywhere_fast_forward_only",),
    ),
    Mutant(
        "sup-refs-never-deleted",
        "gitsup/boundary/evaluate.py",
        "        if u.is_delete:\n"
        '            return RefVerdict(u.ref, False, "gitsup refs are never deleted on the review remote")\n',
        "",
        (PUSH + "test_sup_refs_are_never_deleted_or_rewritten_on_the_review_remote",),
    ),
    Mutant(
        "gate-prefetch-when-needed",
        "gitsup/boundary/evaluate.py",
        "    if protected or ancestry:\n        lookup.prefetch(ancestry, protected)",
        "    if protected and ancestry:\n        lookup.prefetch(ancestry, protected)",
        (
            "tests/boundary/test_evaluate.py::test_git_is_asked_once_and_only_when_an_answer_is_needed",
        ),
    ),
    Mutant(
        "policy-change-flagged",
        "gitsup/git/repo.py",
        'if p == REPO_POLICY_DIR or p.startswith(REPO_POLICY_DIR + "/")',
        "if False",
        (
            "tests/boundary/test_policy_change.py::test_a_policy_change_is_flagged_and_needs_consent",
        ),
    ),
    # --- candidate code: integrate's and the queue's checks ---------------------------------
    Mutant(
        "integrate-checks-confined",
        "gitsup/verification/confined.py",
        "return bootstrap_argv(argv, cgroup=cg, netns=netns, sandbox=plan.argv(files=argv))",
        "return argv",
        (CONFINED + "test_a_hostile_check_fails_at_every_step[integrate]",),
    ),
    Mutant(
        "queue-checks-in-a-netns",
        "gitsup/tasks/queue_checks.py",
        "confinement=comp.confinement,",
        'confinement=Confinement("host", comp.confinement.egress, comp.confinement.cgroup),',
        (CONFINED + "test_a_hostile_check_fails_at_every_step[queue]",),
    ),
    # --- the task's Git: the import and its private Git dir --------------------------------
    Mutant(
        "import-rehash",
        "gitsup/git/objectstore.py",
        "        if actual != oid:\n",
        "        if False:\n",
        (STATE + "test_a_forged_big_blob_is_refused_by_gitsups_own_rehash",),
    ),
    Mutant(
        "import-limit-parents",
        "gitsup/store/taskgit.py",
        "if len(parents) > lim.max_parents:",
        "if False:",
        (LIMITS + "test_a_commit_with_100_parents_is_refused",),
    ),
    Mutant(
        "import-limit-bytes",
        "gitsup/store/taskgit.py",
        "if self.bytes + size > lim.max_bytes:",
        "if False:",
        (LIMITS + "test_new_bytes_and_tree_depth_over_their_limits_park",),
    ),
    Mutant(
        "private-git-shell-read-only",
        "gitsup/host/sandbox.py",
        "ro += [os.path.join(real_git, n) for n in TASK_GIT_SHELL if (git_dir / n).exists()]",
        "ro += []",
        ("tests/git/test_git_shell.py::test_the_persons_git_runs_nothing_the_worker_wrote",),
    ),
    # --- the sandbox and the worker's cgroup -----------------------------------------------
    Mutant(
        "protected-path-rules-refused",
        "gitsup/host/sandbox.py",
        "        if any(denied(f, deny) for f in forms):\n",
        "        if False:\n",
        (PROTECTED + "test_repository_rules_cannot_open_secrets",),
    ),
    Mutant(
        "gitsup-config-dir-always-denied",
        "gitsup/host/sandbox.py",
        "paths += [gitsup_config_dir(os.environ, home), *protect]",
        "paths += [*protect]",
        (PROTECTED + "test_gitsup_config_under_xdg_config_home_is_protected_too",),
    ),
    Mutant(
        "any-home-hidden",
        "policies/default.toml",
        'hide = ["/tmp", "/var/tmp", "/run", "/dev/shm", "/home", "/root", "~"]',
        'hide = ["/tmp", "/var/tmp", "/run", "/dev/shm", "/home", "/root"]',
        (PROTECTED + "test_repository_rules_cannot_open_secrets",),
    ),
    Mutant(
        "observed-no-new-privs",
        "gitsup/host/sandbox.py",
        'keys = ("no_new_privs", "caps_dropped", "seccomp", "pid_ns", "mount_ns")',
        'keys = ("caps_dropped", "seccomp", "pid_ns", "mount_ns")',
        ("tests/host/test_observed.py::test_what_was_not_observed_is_not_claimed",),
    ),
    Mutant(
        "seccomp-installed",
        "gitsup/host/bootstrap.py",
        "    if prog is not None:\n        _seccomp(prog)",
        "    if False:\n        _seccomp(prog)",
        (HOST + "test_hostile_worker_check_and_grandchild_stay_inside",),
    ),
    Mutant(
        "cgroup-limits-set",
        "gitsup/host/contain.py",
        'for what, value in (("pids", limits.pids), ("memory", limits.memory)):',
        "for what, value in ():",
        (HOST_LIMITS + "test_a_fork_bomb_ends_its_own_task_at_pids_max",),
    ),
    Mutant(
        "worker-frozen-while-verified",
        "gitsup/supervision/launcher.py",
        "if cg.freeze(timeout=max(5.0, self.spec.worker.stop_grace)):",
        "if True:",
        (
            "tests/workers/claude/test_frozen_between_turns.py::"
            "test_a_daemon_is_frozen_while_verifying_and_thawed_for_the_repair_round",
        ),
    ),
    # --- attention: notifications and the report page -------------------------------------
    Mutant(
        "notify-retries-capped",
        "gitsup/attention/notify.py",
        "retries=max(0, min(10, int(retries)))",
        "retries=max(0, int(retries))",
        (NOTIFY + "test_retries_are_capped_at_ten",),
    ),
    Mutant(
        "notify-4xx-not-retried",
        "gitsup/attention/notify.py",
        "                    break  # the receiver refused this payload",
        "                    pass  # the receiver refused this payload",
        (NOTIFY + "test_a_receiver_that_refuses_the_payload_gets_it_once",),
    ),
    Mutant(
        "notify-408-429-retried",
        "gitsup/attention/notify.py",
        "if 400 <= exc.code < 500 and exc.code not in (408, 429):",
        "if 400 <= exc.code < 500:",
        (NOTIFY + "test_a_receiver_that_may_recover_gets_every_retry",),
    ),
    Mutant(
        "report-csp-no-script",
        "gitsup/tasks/report.py",
        "CSP = \"default-src 'none'; style-src",
        "CSP = \"default-src 'none'; script-src 'unsafe-inline'; style-src",
        (
            "tests/tasks/test_report.py::test_the_page_and_the_server_forbid_scripts_and_remote_sources",
        ),
    ),
    Mutant(
        "serve-sends-csp",
        "gitsup/tasks/report.py",
        '            self.send_header("Content-Security-Policy", CSP)\n',
        "",
        (
            "tests/tasks/test_report.py::test_the_page_and_the_server_forbid_scripts_and_remote_sources",
        ),
    ),
    # --- the store, pools, hooks -------------------------------------------------------
    Mutant(
        "records-over-64kib-read-whole",
        "gitsup/store/records.py",
        "if len(data) == 1 << 16:",
        "if False:",
        ("tests/store/test_promises_store.py::test_records_over_64kib_are_read_whole",),
    ),
    Mutant(
        "pool-spare-not-at-baseline",
        "gitsup/tasks/pool.py",
        "    if spare.commit == baseline:\n",
        "    if True:\n",
        ("tests/tasks/test_promises_pool.py",),
    ),
    Mutant(
        "launcher-resolved-interpreter",
        "gitsup/git/hooks.py",
        "python=shlex.quote(os.path.realpath(python or sys.executable)),",
        "python=shlex.quote(python or sys.executable),",
        ("tests/tasks/test_promises_init.py",),
    ),
]


# --- checking the mutants against today's code ------------------------------------------


def _test_exists(node: str) -> bool:
    file, _, rest = node.partition("::")
    path = ROOT / file
    if not path.is_file():
        return False
    if not rest:
        return True
    func = rest.split("::")[-1].split("[")[0]
    return re.search(rf"^(async )?def {re.escape(func)}\(", path.read_text(), re.M) is not None


def stale(mutants: list[Mutant]) -> list[str]:
    """Why each mutant that no longer matches the code cannot run (empty: all can)."""
    out: list[str] = []
    names = [m.name for m in MUTANTS]
    for m in mutants:
        if names.count(m.name) > 1:
            out.append(f"{m.name}: the name is used more than once")
        path = ROOT / m.path
        if not path.is_file():
            out.append(f"{m.name}: {m.path} does not exist")
            continue
        n = path.read_text().count(m.old)
        if n != 1:
            where = "not found" if n == 0 else f"found {n} times"
            out.append(f"{m.name}: the code to mutate is {where} in {m.path}: {m.old!r}")
        out += [f"{m.name}: no test {t}" for t in m.tests if not _test_exists(t)]
        if not m.tests:
            out.append(f"{m.name}: no test named")
    return out


# --- running one mutant's tests where nothing outlives them -------------------------------


class Box:
    """A cgroup v2 directory of its own for one mutant's tests (the pytest process joins it
    before it executes, so everything it starts is inside, whatever session it makes), killed
    whole with `cgroup.kill` afterwards. Without a writable cgroup v2 tree: a process group."""

    def __init__(self, name: str) -> None:
        self.path: Path | None = None
        base = _own_cgroup_dir()
        if base is not None:
            p = base / f"promise-mutant-{os.getpid()}-{name}"
            try:
                p.mkdir()
            except OSError:
                return
            if (p / "cgroup.kill").exists():  # Linux 5.14+
                self.path = p
            else:
                p.rmdir()

    def join(self) -> None:
        """In the child, before exec."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text("0")

    def kill(self, pid: int) -> int:
        """Kill everything left; returns how many processes were left."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if self.path is None:
            return 0
        left = _procs(self.path)
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        end = time.monotonic() + 30
        while _procs(self.path) and time.monotonic() < end:
            time.sleep(0.1)
        for d in sorted(self.path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if d.is_dir():
                with contextlib.suppress(OSError):
                    d.rmdir()
        with contextlib.suppress(OSError):
            self.path.rmdir()
        return len(left)


def _own_cgroup_dir() -> Path | None:
    try:
        own = next(
            line[3:]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                d = Path(left.split(" ")[4]) / own.lstrip("/")
                if (d / "cgroup.procs").exists():
                    return d
    except (OSError, StopIteration):
        return None
    return None


def _procs(cg: Path) -> list[int]:
    out: list[int] = []
    for f in [cg / "cgroup.procs", *cg.rglob("*/cgroup.procs")]:
        with contextlib.suppress(OSError):
            out += [int(x) for x in f.read_text().split()]
    return out


class Outcome(NamedTuple):
    killed: bool
    seconds: float
    caught_by: str  # the first failing test, "timeout", or why it is no kill
    why: str
    left: int  # processes the tests left behind (killed with the box)


def run(m: Mutant, timeout: float) -> Outcome:
    path = ROOT / m.path
    original = path.read_text()
    box = Box(m.name)
    t0 = time.monotonic()
    timed_out = False
    try:
        path.write_text(original.replace(m.old, m.new, 1))
        p = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rf", *m.tests],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=box.join,
        )
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            box.kill(p.pid)
            out, _ = p.communicate()
    finally:
        path.write_text(original)
    left = box.kill(p.pid)
    took = time.monotonic() - t0
    if timed_out:
        return Outcome(True, took, "timeout", f"no result in {timeout:.0f}s", left)
    lines = out.splitlines()
    failed = next((ln.split()[1] for ln in lines if ln.startswith("FAILED ")), "")
    why = next((ln for ln in lines if ln.startswith("E ")), "")
    # pytest exits 1 when tests failed; anything else (a collection error, no test) is no kill
    if p.returncode == 1 and failed:
        return Outcome(True, took, failed, why[:150], left)
    return Outcome(False, took, f"exit {p.returncode}", (why or out[-300:])[:300], left)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="run the mutants whose name contains one of these")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per mutant")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or any(a in m.name for a in args.names)]
    if not chosen:
        print(f"no mutant matches {args.names}", file=sys.stderr)
        return 2
    problems = stale(chosen)
    if problems:
        print("stale mutants (update them to today's code; nothing was run):", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path} -> {', '.join(m.tests)}")
        return 0
    where = _own_cgroup_dir()
    print(
        f"{len(chosen)} mutants; each one's tests in a cgroup under {where}"
        if where is not None
        else f"{len(chosen)} mutants; each one's tests in a process group (no cgroup v2 tree)",
        flush=True,
    )
    # a signal stops the run between two files' writes, never with a mutant left in place
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    killed = 0
    rows: list[tuple[str, Outcome]] = []
    for m in chosen:
        o = run(m, args.timeout)
        killed += o.killed
        rows.append((m.name, o))
        extra = f"; {o.left} process(es) left behind, killed" if o.left else ""
        print(
            f"{'killed  ' if o.killed else 'SURVIVED'} {m.name} ({o.seconds:.0f}s) by "
            f"{o.caught_by}: {o.why}{extra}",
            flush=True,
        )
    print(f"\npromise mutants: {killed}/{len(chosen)} killed")
    width = max(len(n) for n, _ in rows)
    for name, o in rows:
        print(f"  {name:<{width}}  {o.seconds:6.0f}s  {o.caught_by if o.killed else 'SURVIVED'}")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
