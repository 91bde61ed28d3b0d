"""The queue's composition checks on the cluster's task hosts.

The queue runner on the integrator (`git sup queue run --on-hosts`, which the integration
activity starts) decides what to test as on one machine (gitsup/tasks/queue.py,
queue_slots.py); `HostSlots` is where its compositions are tested: each one is a check
workflow (`CheckWorkflow`) whose one activity runs on a task host, up to `--slots` at once.
Only task hosts poll the checks' task queue (`<queue>.checks`): the integrator runs no
candidate code.

What travels is ids, never trees: the composition's base (a commit of the target branch,
which the runner pushes through the gate before it asks), its candidates (each task's
`refs/sup/<id>/candidate` on the review remote) and the tree the integrator composed. The
host fetches them from the review remote, builds the same chain of merges (the same
in-memory merge on the same commits gives the same tree), refuses when its tree is not the
one asked for, and runs the checks in its confined runner (a throw-away worktree, the
sandbox, a cgroup and a network namespace per check; `run_composition`, the local slots'
code, with its retries). Its answer names the tree it tested and its environment digest; the
integrator records the results only when both are the composition's, so no result reaches
the memo for a tree the integrator does not sign.

What the integrator cannot verify is that a host ran the checks at all: a host that answers
"passed" for a failing tree is believed (docs/cluster.md, "The queue on the cluster": hosts
are trusted for their results as a CI runner is, not for the key or the branch; every result
names its host)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from gitsup.cluster.client import connect
from gitsup.cluster.heartbeat import heartbeating
from gitsup.cluster.settings import ClusterSettings
from gitsup.cluster.workflow import CHECK_ACTIVITY, CHECK_WORKFLOW, checks_queue
from gitsup.errors import Exit, GitsupError
from gitsup.git import remote as transport
from gitsup.ids import Oid, TaskId
from gitsup.layout import task_refs
from gitsup.store.record import CheckResult
from gitsup.store.suprepo import SupRepo
from gitsup.tasks.queue_checks import Composition, Tested
from gitsup.tasks.queue_state import QueueError
from gitsup.verification.confined import Confinement

# attempts of one composition's checks (a host that dies mid-check: the next one takes it)
ATTEMPTS = 5


def _remote(ctx: SupRepo) -> str:
    from gitsup.supervision.publisher import review_remote

    return review_remote(ctx.repo)


# --- the integrator's side: where the runner's compositions are tested ------------------------


class HostSlots:
    """The queue runner's slots on the cluster (`queue_checks.CheckSlots`): `submit` is called
    by the runner's thread only; each composition's workflow is awaited in a thread of its own."""

    def __init__(self, ctx: SupRepo, settings: ClusterSettings, branch: str, slots: int) -> None:
        self.ctx = ctx
        self.settings = settings
        self.branch = branch
        self.target_ref = f"refs/heads/{branch}"
        self.remote = _remote(ctx)
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, slots), thread_name_prefix="sup-h")
        self._published: str = ""

    def submit(self, comp: Composition) -> cf.Future[Tested]:
        base, candidates = self._chain(comp)
        self._publish(base)
        job = {
            "into": self.branch,
            "base": base,
            "candidates": candidates,
            "tree": comp.tree,
            "env": comp.env,
            "checks": [c.model_dump(mode="json") for c in comp.todo],
            "confinement": asdict(comp.confinement),
            "retries": comp.retries,
            "heartbeat": self.settings.heartbeat,
            "attempts": ATTEMPTS,
        }
        work = json.dumps([comp.tree, comp.env, comp.keys(), comp.retries], sort_keys=True)
        wid = f"gitsup-check:{self.settings.queue}:{hashlib.sha256(work.encode()).hexdigest()}"
        return self._pool.submit(self._tested, wid, job, comp)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _chain(self, comp: Composition) -> tuple[Oid, list[dict[str, str]]]:
        """The composition's base and candidates, from its chain of unsigned merges."""
        repo = self.ctx.repo
        cur, cands = comp.commit, []
        for task in reversed(comp.tasks):
            parents = repo.commit_info(cur).parents
            cands.append({"task": task, "candidate": str(parents[1])})
            cur = Oid(parents[0])
        return cur, list(reversed(cands))

    def _publish(self, base: Oid) -> None:
        """The base on the review remote's target branch, where hosts fetch it: the runner's
        integrations so far (signed: the gate accepts them), pushed once per new base."""
        if base == self._published:
            return
        try:
            transport.push(self.ctx.repo.main_workdir, self.remote, [f"{base}:{self.target_ref}"])
        except transport.TransportError as exc:
            raise QueueError(
                f"the queue's target {self.branch} at {base[:12]} cannot reach the review "
                f"remote, where task hosts test on it: {exc.message}",
                exit_code=Exit.FAILED,
            ) from None
        self._published = base

    def _tested(self, wid: str, job: dict[str, Any], comp: Composition) -> Tested:
        res = asyncio.run(self._execute(wid, job))
        host = str(res.get("host", "?"))
        # the integrator believes a host only about the tree it names, and only by its id
        if res.get("tree") != comp.tree:
            raise QueueError(
                f"host {host} tested tree {str(res.get('tree'))[:12]}, not the composition's "
                f"{comp.tree[:12]}: its results are not recorded",
                exit_code=Exit.FAILED,
            )
        if res.get("env") != comp.env:
            raise QueueError(
                f"host {host} tested {comp.tree[:12]} in another environment than the "
                "integrator's (its main checkout's environment recipe or included files "
                "differ): its results are not recorded",
                hint="bring the hosts' and the integrator's main checkouts to the same commit",
                exit_code=Exit.FAILED,
            )
        results = [CheckResult.model_validate(r) for r in res.get("results", [])]
        asked = [list(c.argv) for c in comp.todo]
        if [r.argv for r in results] != asked[: len(results)]:
            raise QueueError(
                f"host {host} answered for other checks than those asked on {comp.tree[:12]}",
                exit_code=Exit.FAILED,
            )
        return Tested(
            results=results,
            commands=int(res.get("commands", len(results))),
            retries=int(res.get("retries", 0)),
            flaky=[str(n) for n in res.get("flaky", [])],
            seconds=float(res.get("seconds", 0.0)),
            confinement={**dict(res.get("confinement", {})), "host": host},
        )

    async def _execute(self, wid: str, job: dict[str, Any]) -> dict[str, Any]:
        from temporalio.client import WorkflowFailureError
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

        client = await connect(self.settings)
        handle = await client.start_workflow(
            CHECK_WORKFLOW,
            job,
            id=wid,
            task_queue=checks_queue(self.settings.queue),
            # the same work asked for while it runs: one run, both wait for it
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        try:
            result: dict[str, Any] = await handle.result()
        except WorkflowFailureError as exc:
            cause: object = exc.cause
            while getattr(cause, "cause", None) is not None:
                cause = getattr(cause, "cause", None)
            message = getattr(cause, "message", None) or str(cause)
            raise QueueError(
                f"the checks of {str(job['tree'])[:12]} could not run on a task host: {message}",
                hint="nobody was blamed and the queue is unchanged; `git sup queue run` again",
                exit_code=Exit.FAILED,
            ) from None
        return result


# --- a task host's side: the check activity ------------------------------------------------


class CompositionChecks:
    """The check activity of one task host: `clone` is the host's clone."""

    def __init__(self, clone: Path, name: str) -> None:
        self.clone = clone
        self.name = name

    @activity.defn(name=CHECK_ACTIVITY)
    async def check(self, job: dict[str, Any]) -> dict[str, Any]:
        answer = await heartbeating(self._spawn, job, details={"host": self.name})
        if "error" in answer:
            raise ApplicationError(
                str(answer["error"]),
                type="GitsupError" if answer.get("refused") else "CheckFailed",
                non_retryable=bool(answer.get("refused")),
            )
        return answer

    def _spawn(self, job: dict[str, Any]) -> dict[str, Any]:
        """The checks in a process of their own (`python -m gitsup.cluster.checks`), as the
        integrator's queue run is: what a confined run does to its process group never
        reaches this host's worker."""
        from gitsup.host import proc

        argv = proc.gitsup_python("gitsup.cluster.checks", self.name)
        res = proc.run(
            argv,
            cwd=self.clone,
            input=json.dumps(job).encode(),
            merge_stderr=False,
            max_output=1 << 22,
        )
        try:
            answer: dict[str, Any] = json.loads(res.output)
        except ValueError:
            answer = {
                "error": f"the check process ended with {res.returncode}: {res.output[-400:]}"
            }
        return answer

    def _check(self, job: dict[str, Any]) -> dict[str, Any]:
        from gitsup.environment.recipe import load_recipe
        from gitsup.integration.keys import protected_paths
        from gitsup.spec import Check
        from gitsup.tasks.queue_checks import run_composition
        from gitsup.verification.confined import ConfinedChecks, Setup, environment_digest

        ctx = SupRepo.discover(self.clone)
        repo = ctx.repo
        remote = _remote(ctx)
        into = str(job["into"])
        tip = transport.fetch_one(repo.main_workdir, repo.common_dir, remote, f"refs/heads/{into}")
        base = Oid(str(job["base"]))
        if tip is None or not repo.has_object(base) or not repo.is_ancestor(base, tip):
            raise GitsupError(f"{base[:12]} is not on {into} of the review remote {remote}")
        cur, tree, tasks = base, Oid(""), []
        for c in job["candidates"]:
            task, cand = TaskId(str(c["task"])), Oid(str(c["candidate"]))
            got = transport.fetch_one(
                repo.main_workdir, repo.common_dir, remote, task_refs(task)["candidate"]
            )
            if got != cand:
                raise GitsupError(f"the candidate of {task} on {remote} is {got}, not {cand}")
            merged, conflicts = repo.merge_tree(cur, cand)
            if merged is None:
                raise GitsupError(f"{task} does not merge here: {', '.join(conflicts[:10])}")
            tree = merged
            cur = repo.commit_tree(
                tree, [cur, cand], f"gitsup queue composition\n\nSup-Task: {task}\n"
            )
            tasks.append(task)
        if tree != job["tree"]:
            raise GitsupError(
                f"the composition made on {self.name} is tree {tree[:12]}, not the "
                f"integrator's {str(job['tree'])[:12]}"
            )
        raw = dict(job["confinement"])
        conf = Confinement(
            network=str(raw.get("network", "auto")),
            egress=tuple(raw.get("egress", ())),
            cgroup=str(raw.get("cgroup", "auto")),
            include=tuple(None if i is None else tuple(i) for i in raw.get("include", ())),
            gated=bool(raw.get("gated", False)),
        )
        protect = protected_paths(repo)
        comp = Composition(
            commit=cur,
            tree=tree,
            tasks=list(tasks),
            todo=[Check.model_validate(c) for c in job["checks"]],
            confinement=conf,
            env=environment_digest(repo, conf, protect),
            retries=int(job["retries"]),
        )
        setup = Setup.of(load_recipe(repo.main_workdir), repo.common_dir)
        box = ConfinedChecks(
            repo,
            prefix=f"gitsup-check-{os.getpid()}-",
            marker=f"queue/{into}",
            label="queue",
            protect=protect,
        )
        try:
            tested = run_composition(box, comp, setup=setup, say=lambda _m: None)
        finally:
            box.close()
        if tested.setup_failed is not None:
            raise tested.setup_failed
        return {
            "host": self.name,
            "tree": tree,
            "env": comp.env,
            "results": [r.model_dump(mode="json") for r in tested.results],
            "commands": tested.commands,
            "retries": tested.retries,
            "flaky": tested.flaky,
            "seconds": tested.seconds,
            "confinement": tested.confinement,
        }


def host_slots(ctx: SupRepo, address: str) -> Callable[[str, int], HostSlots]:
    """`queue run --on-hosts ADDR`: the runner's slots (per branch) on the cluster at ADDR."""
    from gitsup.cluster.settings import load

    settings = load(ctx.repo, address)
    return lambda branch, slots: HostSlots(ctx, settings, branch, slots)


def _main() -> None:
    """`python -m gitsup.cluster.checks NAME` in a task host's clone: the job (JSON) on
    stdin, the answer (JSON) on stdout; a refusal is {"error", "refused": true}."""
    import sys

    job = json.loads(sys.stdin.read())
    here = CompositionChecks(Path.cwd(), sys.argv[1])
    try:
        answer = here._check(job)
    except transport.TransportError as exc:  # the remote is away: another attempt
        answer = {"error": exc.message}
    except GitsupError as exc:
        answer = {"error": exc.message, "refused": True}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    _main()
