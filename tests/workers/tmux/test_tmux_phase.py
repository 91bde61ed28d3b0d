"""A permission request says its phase; one from a turn a person started in the pane (a
human takeover) waits for `git sup answer`. Real tmux, the real TUI, the scripted model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gitsup.demo.scripted_model import ScriptedModel
from gitsup.state import State
from gitsup.store.records import TaskStore
from gitsup.store.suprepo import SupRepo
from tests.conftest import run_sup
from tests.workers.tmux.conftest import seed_config
from tests.workers.tmux.test_tmux_worker import (
    COMMIT_STEPS,
    WAIT_FOR_FLAG,
    events_of,
    start_detached,
    task_types,
    tmux,
    tmux_spec,
    wait_for,
    worker_extra,
)


def test_a_prompt_phase_ask_during_a_takeover_waits_for_a_person(
    repo: Path,
    tmp: Path,
    claude_bin: str,
    scripted_model: Callable[..., ScriptedModel],
    tmux_sockets: list[Path],
) -> None:
    steps = [
        [
            {
                "type": "tool_use",
                "name": "Write",
                "input": {"file_path": "${CWD}/wait_a_while.py", "content": WAIT_FOR_FLAG},
            }
        ],
        {"bash": "pytest -q -p no:cacheprovider wait_a_while.py"},
        {"bash": "sleep 1"},  # the policy asks about a plain sleep
        {"text": "Not sleeping then."},
        COMMIT_STEPS[0],
        {"bash": "git add -A && git commit -qm 'fix add'"},
        *COMMIT_STEPS[2:],
    ]
    model = scripted_model({"default": {"steps": steps}})
    config = seed_config(tmp / "claude-config")
    task = start_detached(repo, tmp, tmux_spec(claude_bin, model, config))
    extra = wait_for(lambda: worker_extra(repo, task), 60, "the worker")
    tmux_sockets.append(Path(extra["socket"]))
    wait_for(
        lambda: any(
            e["type"] == "permission_decided" and "pytest" in str(e["data"].get("input"))
            for e in events_of(repo, task)
        ),
        60,
        "the long test run",
    )
    # Requests of gitsup's own turn say so.
    first = [e["data"] for e in events_of(repo, task) if e["type"] == "permission_decided"]
    assert first and {d.get("phase") for d in first} == {"turn"}, first
    for _attempt in range(3):  # keystrokes can be lost while the TUI redraws
        tmux(extra["socket"], "send-keys", "-t", extra["pane_id"], "-l", "now sleep a second")
        tmux(extra["socket"], "send-keys", "-t", extra["pane_id"], "Enter")
        try:
            wait_for(lambda: "human_takeover" in task_types(repo, task), 20, "the takeover")
            break
        except AssertionError:
            continue
    store = TaskStore(SupRepo.discover(repo).layout)
    rec = wait_for(lambda: (r := store.load(task)).state == State.PAUSED and r, 10, "paused")
    (Path(rec.worktree) / "release.flag").write_text("go")
    # The sleep the policy asks about is not decided by the decider: it waits for a person.
    ask = wait_for(
        lambda: next((e["data"] for e in events_of(repo, task) if e["type"] == "human_ask"), None),
        90,
        "the ask",
    )
    assert ask["phase"] == "prompt" and ask["tool"] == "Bash", ask
    rid = ask["request_id"]
    assert not [
        e for e in events_of(repo, task)
        if e["type"] == "permission_decided" and e["data"]["request_id"] == rid
    ]  # fmt: skip
    res = run_sup(repo, "answer", task, rid, "deny", "-m", "not now")
    assert res.returncode == 0, res.stderr
    decided = wait_for(
        lambda: next(
            (
                e["data"]
                for e in events_of(repo, task)
                if e["type"] == "permission_decided" and e["data"]["request_id"] == rid
            ),
            None,
        ),
        30,
        "the answer",
    )
    assert decided["answer"] == "deny" and decided["phase"] == "prompt"
    assert "not now" in str(decided["message"])
    res = run_sup(repo, "resume-auto", task)
    assert res.returncode == 0, res.stderr
    res = run_sup(repo, "wait", task, "--timeout", "120", timeout=150)
    evs = events_of(repo, task)
    assert res.returncode == 0, (res.stdout, res.stderr, evs[-10:])
    assert "human_answer" in [e["type"] for e in evs]
