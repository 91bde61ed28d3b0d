"""`git sup adopt-tmux ID PANE`: a tmux pane a person started in a task's worktree, handed to
the task's supervisor. Real tmux servers (the tests' own sockets, never the user's), the
real CLI; the adoption itself with the real Claude Code TUI against the scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.host.procid import ProcessId
from gitsup.store.records import TaskStore
from gitsup.store.suprepo import SupRepo
from gitsup.workers.claude.tmux_screen import input_prompt_ready
from tests.conftest import GIT_SUP, git, run_sup
from tests.helpers.require import requires
from tests.helpers.sup import common_dir
from tests.workers.tmux.conftest import claude_env, seed_config
from tests.workers.tmux.test_tmux_worker import (
    COMMIT_STEPS,
    events_of,
    kill_supervisor,
    model_steps,
    start_detached,
    task_types,
    tmux,
    tmux_spec,
    wait_for,
    worker_extra,
)

COMMITS_THEN_SLEEPS = (
    "#!/bin/sh\n"
    "echo 'def add(a, b):\n    return a + b' > calc.py\n"
    "git commit -qam 'fix add'\n"
    "sleep 300\n"
)


def _record(repo: Path, task: str) -> dict[str, Any]:
    return dict(json.loads(run_sup(repo, "show", task, "--json").stdout))


def _leases(repo: Path) -> list[dict[str, Any]]:
    return [json.loads(f.read_text()) for f in (common_dir(repo) / "sup" / "leases").glob("*.json")]


def _refused(res: subprocess.CompletedProcess[str], says: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr


@requires("root", "cgroup")
def test_refusals(repo: Path, tmp: Path, tmux_sockets: list[Path]) -> None:
    worker = tmp / "w.sh"
    worker.write_text(COMMITS_THEN_SLEEPS)
    worker.chmod(0o755)
    spec = tmp / "t.toml"
    spec.write_text(
        f'goal = "g"\n[worker]\nkind = "process"\nargv = ["{worker}"]\n[review]\nkind = "none"\n'
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "gitsup", "start", "--spec", str(spec), "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sock = str(tmp / "user.sock")
    tmux_sockets.append(Path(sock))
    try:
        ls = lambda: json.loads(run_sup(repo, "ls", "--json").stdout or "[]")  # noqa: E731
        task = wait_for(lambda: (ls() or [{}])[0].get("id"), 60, "the task")
        rec = wait_for(lambda: (r := _record(repo, task))["state"] == "running" and r, 60, "run")
        wt = Path(rec["worktree"])
        wait_for(lambda: git(wt, "rev-parse", "HEAD") != rec["baseline"], 60, "the commit")
        base = ["tmux", "-S", sock, "-f", "/dev/null"]
        subprocess.run(
            [*base, "new-session", "-d", "-s", "u", "-c", str(wt), "sleep", "300"], check=True
        )
        in_wt = tmux(sock, "display-message", "-p", "-t", "u:0.0", "#{pane_id}")
        # a task its supervisor still runs
        _refused(run_sup(repo, "adopt-tmux", task, in_wt, "--socket", sock), "live supervisor")
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
    before = _leases(repo)
    assert len(before) == 1 and before[0]["owner"]["pid"] == p.pid
    # a pane that does not exist
    _refused(run_sup(repo, "adopt-tmux", task, "%999", "--socket", sock), "no tmux pane")
    # a dead pane (its process exited; the pane stays)
    subprocess.run([*base, "set-option", "-g", "remain-on-exit", "on"], check=True)
    subprocess.run([*base, "new-window", "-d", "-t", "u:1", "-c", str(wt), "true"], check=True)
    dead = tmux(sock, "display-message", "-p", "-t", "u:1.0", "#{pane_id}")
    wait_for(
        lambda: tmux(sock, "display-message", "-p", "-t", dead, "#{pane_dead}") == "1", 10, "exit"
    )
    _refused(run_sup(repo, "adopt-tmux", task, dead, "--socket", sock), "dead pane")
    # a pane in another directory
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(
        [*base, "new-window", "-d", "-t", "u:2", "-c", str(elsewhere), "sleep", "300"],
        check=True,
    )
    other = tmux(sock, "display-message", "-p", "-t", "u:2.0", "#{pane_id}")
    _refused(
        run_sup(repo, "adopt-tmux", task, other, "--socket", sock), "not in the task's worktree"
    )
    # a pane in the worktree, but the task is no tmux task
    _refused(run_sup(repo, "adopt-tmux", task, in_wt, "--socket", sock), "only a tmux task")
    # nothing moved: the lease is the dead supervisor's, the worker the recorded one, the
    # panes live on
    assert _leases(repo) == before
    assert _record(repo, task)["worker"] == rec["worker"]
    assert tmux(sock, "display-message", "-p", "-t", in_wt, "#{pane_dead}") == "0"
    assert run_sup(repo, "recover", task, "--takeover", "--park", "-q").returncode == 3


def test_a_pane_started_in_the_worktree_is_adopted_and_supervised(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    """The task's supervisor was killed; a person starts Claude Code in the worktree in a
    tmux of their own and hands the pane over: refused while their settings lack gitsup's
    relay hooks, or while it loads the worktree's settings files (and for a pane that runs
    something else), adopted once both are right. The
    old worker is proven gone, the lease moves to the adopting supervisor, `recovered` says
    `adopted` with the pane's identity, the person's prompt in that pane reaches the
    supervisor through the hooks (a human takeover, the tool call gated, the turn's end
    recorded), and at the end (`git sup stop`) the pane is detached, never killed, its
    lease kept."""
    # each conversation replays the steps: the person's too (a Write, then a slow answer)
    steps = [COMMIT_STEPS[0], {"hang": 12, "text": "Noted."}]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    spec = tmux_spec(claude_bin, model, config)
    task = start_detached(repo, tmp, spec)
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    tmux_sockets.append(Path(extra["socket"]))
    wait_for(lambda: model_steps(model) >= 2, 60, "the second model call")
    kill_supervisor(repo, task)
    old_pid = extra["pane_pid"]
    wt = Path(_record(repo, task)["worktree"])
    env = claude_env(model.url, config)
    seed_config(config, trusted=[str(wt), os.path.realpath(wt)])  # as a person's would be
    sock = str(tmp / "person.sock")
    tmux_sockets.append(Path(sock))
    envs = [f"{k}={v}" for k, v in env.items()]
    subprocess.run(
        ["tmux", "-S", sock, "-f", "/dev/null", "new-session", "-d", "-s", "p", "-x", "200",
         "-y", "50", "-c", str(wt), "env", *envs, claude_bin],
        check=True,
    )  # fmt: skip
    pane = tmux(sock, "display-message", "-p", "-t", "p:0.0", "#{pane_id}")
    wait_for(
        lambda: input_prompt_ready(tmux(sock, "capture-pane", "-p", "-t", pane)), 60, "the TUI"
    )
    # Refused (nothing moves): a pane in the worktree that runs something else than the
    # task's agent, and Claude Code whose settings lack gitsup's hooks.
    subprocess.run(
        ["tmux", "-S", sock, "new-window", "-d", "-t", "p:1", "-c", str(wt), "sleep", "300"],
        check=True,
    )
    sleeper = tmux(sock, "display-message", "-p", "-t", "p:1.0", "#{pane_id}")
    res = run_sup(repo, "adopt-tmux", task, sleeper, "--socket", sock)
    assert res.returncode == 2 and "agent executable" in res.stderr, res.stderr
    res = run_sup(repo, "adopt-tmux", task, pane, "--socket", sock)
    assert res.returncode == 2 and "--setting-sources user" in res.stderr, res.stderr
    subprocess.run(
        ["tmux", "-S", sock, "respawn-pane", "-k", "-t", pane, "-c", str(wt), "env", *envs,
         claude_bin, "--setting-sources", "user"],
        check=True,
    )  # fmt: skip
    wait_for(
        lambda: input_prompt_ready(tmux(sock, "capture-pane", "-p", "-t", pane)), 60, "the TUI"
    )
    res = run_sup(repo, "adopt-tmux", task, pane, "--socket", sock)
    assert res.returncode == 2 and "lack gitsup's hooks" in res.stderr, res.stderr
    assert ProcessId.from_dict(_leases(repo)[0]["owner"]).alive() is False  # still the dead one
    # The person installs gitsup's hooks and starts Claude Code again.
    res = run_sup(repo, "hooks", "install", env={"CLAUDE_CONFIG_DIR": str(config)})
    assert res.returncode == 0, res.stderr
    subprocess.run(
        ["tmux", "-S", sock, "respawn-pane", "-k", "-t", pane, "-c", str(wt), "env", *envs,
         claude_bin, "--setting-sources", "user"],
        check=True,
    )  # fmt: skip
    wait_for(
        lambda: input_prompt_ready(tmux(sock, "capture-pane", "-p", "-t", pane)), 60, "the TUI"
    )
    adopting = subprocess.Popen(
        [GIT_SUP, "adopt-tmux", task, pane, "--socket", sock, "--json", "-q"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: any(
                e["type"] == "recovered" and e["data"].get("action") == "adopted"
                for e in events_of(repo, task)
            ),
            60,
            "the adoption",
        )
        (lease,) = _leases(repo)
        assert lease["owner"]["pid"] == adopting.pid and "state" not in lease, lease
        rec = TaskStore(SupRepo.discover(repo).layout).load(task)
        pane_pid = int(tmux(sock, "display-message", "-p", "-t", pane, "#{pane_pid}"))
        assert rec.worker is not None and rec.worker["pid"] == pane_pid
        assert not os.path.exists(f"/proc/{old_pid}")  # the old worker is gone
        # The person types into their pane: the prompt reaches the adopting supervisor
        # through the relay hooks (a human takeover). Keystrokes can be lost while the TUI
        # redraws on a loaded machine: typed again, at most three times.
        for _attempt in range(3):
            tmux(sock, "send-keys", "-t", pane, "-l", "please fix add as well")
            tmux(sock, "send-keys", "-t", pane, "Enter")
            try:
                wait_for(lambda: "human_takeover" in task_types(repo, task), 20, "the takeover")
                break
            except AssertionError:
                continue
        assert "human_takeover" in task_types(repo, task)
        # the pane's session is the task's now: its Stop ends the turn (recorded while the
        # person has the wheel, nothing decided)
        wait_for(lambda: "turn_completed" in task_types(repo, task), 60, "the turn's end")
        res = run_sup(repo, "stop", task)
        assert res.returncode == 0, res.stderr
        out, err = adopting.communicate(timeout=120)
    finally:
        adopting.kill()
        adopting.wait(timeout=30)
    evs = events_of(repo, task)
    (recovered,) = [e["data"] for e in evs if e["type"] == "recovered"]
    assert recovered["previous"]["pane"] == pane and recovered["extra"]["pane_id"] == pane
    assert recovered["extra"]["started_by"] == "user"
    # the person's tool call went through the policy gate of the adopting supervisor
    after = [e["type"] for e in evs][[e["type"] for e in evs].index("human_takeover") :]
    assert "permission_decided" in after, after
    human = [e["data"]["text"] for e in evs if e["type"] == "human_input"]
    assert human and set(human) == {"please fix add as well"}, human
    final = json.loads(out)
    assert final["state"] == "stopped", (final["state"], final["reasons"], err[-2000:])
    # the pane lives on in the worktree: the lease stays held, the record says why
    assert any(f"detached worker pid {pane_pid}" in x for x in final["left_behind"]), final
    assert _leases(repo), "the lease was released"
    stopped = [str(e["data"].get("how")) for e in evs if e["type"] == "worker_stopped"]
    assert any(h.startswith("detached") for h in stopped), stopped
    assert tmux(sock, "display-message", "-p", "-t", pane, "#{pane_dead}") == "0"  # never killed
    assert os.path.exists(f"/proc/{pane_pid}")
