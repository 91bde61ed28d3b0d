"""The app-server protocol session (sans-IO), the codex adapter's refusals, the agent list.

No binary needed: lines in the shapes measured from Codex CLI 0.171.0 (see
docs/codex-worker-notes.md) are fed to the session and what it answers is read back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitsup.workers.agents import AGENTS, Agent, parse_version, probe_agents
from gitsup.workers.base import (
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerError,
    WorkerOutput,
)
from gitsup.workers.codex.app_server import AppServerSession
from gitsup.workers.codex.app_server_protocol import ConfigRefused, Usage, cost_usd, unwrap_shell
from gitsup.workers.codex.worker import check_arguments, provider_args

CWD = "/work/tree"
THREAD = "01a22beb-a5a3-7ed2-91d2-f25ad70321e8"
TURN = "01a22beb-a65d-74f0-a745-693189ff7570"


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def sent(data: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(d) for d in data]


def opened(policy: str = "untrusted", reviewer: str = "user") -> AppServerSession:
    s = AppServerSession(cwd=CWD, price={"input": 1.0, "cached_input": 0.5, "output": 2.0})
    init = sent(s.open())
    assert init[0]["method"] == "initialize"
    assert s.send_turn("the goal") == []  # queued until the thread exists
    f = s.feed(line({"id": init[0]["id"], "result": {"userAgent": "gitsup/0.171.0 (Debian)"}}))
    out = sent(f.out)
    assert [m.get("method") for m in out] == ["initialized", "thread/start"]
    params = out[1]["params"]
    assert params["approvalPolicy"] == "untrusted" and params["sandbox"] == "danger-full-access"
    assert params["approvalsReviewer"] == "user" and params["cwd"] == CWD
    f = s.feed(
        line(
            {
                "id": out[1]["id"],
                "result": {
                    "thread": {"id": THREAD},
                    "model": "m",
                    "approvalPolicy": policy,
                    "approvalsReviewer": reviewer,
                },
            }
        )
    )
    turn = sent(f.out)
    assert turn[0]["method"] == "turn/start" and turn[0]["params"]["threadId"] == THREAD
    assert turn[0]["params"]["input"][0]["text"] == "the goal"
    s.feed(line({"method": "turn/started", "params": {"turn": {"id": TURN}}}))
    return s


def test_thread_settings_that_would_not_ask_are_refused() -> None:
    with pytest.raises(ConfigRefused, match="approvalPolicy 'never'"):
        opened(policy="never")
    with pytest.raises(ConfigRefused, match="auto_review"):
        opened(reviewer="auto_review")


def test_command_approval_is_a_bash_request_answered_once() -> None:
    s = opened()
    req = {
        "id": 7,
        "method": "item/commandExecution/requestApproval",
        "params": {"command": "/bin/bash -lc 'git push origin HEAD'", "cwd": CWD, "itemId": "c1"},
    }
    (ev,) = s.feed(line(req)).events
    assert isinstance(ev, PermissionRequest)
    assert ev.tool_name == "Bash" and ev.tool_input == {"command": "git push origin HEAD"}
    out = sent(s.answer(ev.request_id, PermissionAnswer(False, "D1.push: no pushing")))
    # the reason is steered in first, so that it is queued before the turn goes on
    assert out[0]["method"] == "turn/steer"
    assert out[0]["params"]["expectedTurnId"] == TURN
    assert "D1.push" in out[0]["params"]["input"][0]["text"]
    assert out[1] == {"id": 7, "result": {"decision": "decline"}}
    assert s.answer(ev.request_id, PermissionAnswer(True)) == []  # once


def test_a_command_in_another_directory_says_where_it_runs() -> None:
    s = opened()
    req = {
        "id": 8,
        "method": "item/commandExecution/requestApproval",
        "params": {"command": "bash -c 'rm -rf x'", "cwd": "/etc", "itemId": "c2"},
    }
    (ev,) = s.feed(line(req)).events
    assert isinstance(ev, PermissionRequest)
    assert ev.tool_input["command"] == "cd /etc && rm -rf x"


def test_interrupting_answer_cancels() -> None:
    s = opened()
    req = {"id": 9, "method": "item/commandExecution/requestApproval", "params": {"command": "ls"}}
    (ev,) = s.feed(line(req)).events
    assert isinstance(ev, PermissionRequest)
    out = sent(s.answer(ev.request_id, PermissionAnswer(False, "stop", interrupt=True)))
    assert out == [{"id": 9, "result": {"decision": "cancel"}}]


def _file_change(item_id: str, changes: list[dict[str, Any]]) -> str:
    return line(
        {
            "method": "item/started",
            "params": {"item": {"type": "fileChange", "id": item_id, "changes": changes}},
        }
    )


def test_file_change_asks_per_path_resolved_and_needs_every_path_allowed() -> None:
    s = opened()
    s.feed(
        _file_change(
            "p1",
            [
                {"path": "src/a.py", "kind": {"type": "add"}, "diff": "x = 1\n"},
                {"path": f"{CWD}/b.py", "kind": {"type": "update", "move_path": "../../etc/c"}},
            ],
        )
    )
    req = {"id": 11, "method": "item/fileChange/requestApproval", "params": {"itemId": "p1"}}
    evs = s.feed(line(req)).events
    assert [(e.tool_name, e.tool_input["file_path"]) for e in evs] == [  # type: ignore[attr-defined]
        ("Write", f"{CWD}/src/a.py"),
        ("Edit", f"{CWD}/b.py"),
        ("Write", "/etc/c"),
    ]
    ids = [e.request_id for e in evs]  # type: ignore[attr-defined]
    assert s.answer(ids[0], PermissionAnswer(True)) == []  # waits for the others
    assert s.answer(ids[1], PermissionAnswer(True)) == []
    out = sent(s.answer(ids[2], PermissionAnswer(False, "outside the worktree")))
    assert out[-1] == {"id": 11, "result": {"decision": "decline"}}
    # a denial first decides at once, and the rest can no longer be answered
    s.feed(_file_change("p2", [{"path": "a", "kind": "add"}, {"path": "b", "kind": "add"}]))
    evs = s.feed(
        line({"id": 12, "method": "item/fileChange/requestApproval", "params": {"itemId": "p2"}})
    ).events
    first, second = (e.request_id for e in evs)  # type: ignore[attr-defined]
    out = sent(s.answer(first, PermissionAnswer(False)))
    assert out == [{"id": 12, "result": {"decision": "decline"}}]
    assert s.answer(second, PermissionAnswer(True)) == []


def test_a_file_change_never_announced_is_declined() -> None:
    s = opened()
    f = s.feed(
        line({"id": 13, "method": "item/fileChange/requestApproval", "params": {"itemId": "zz"}})
    )
    assert sent(f.out) == [{"id": 13, "result": {"decision": "decline"}}]
    assert isinstance(f.events[0], WorkerOutput) and "refused" in f.events[0].text


def test_other_server_requests_are_refused() -> None:
    s = opened()
    f = s.feed(line({"id": 14, "method": "item/tool/call", "params": {}}))
    assert sent(f.out)[0]["error"]["code"] == -32601
    f = s.feed(line({"id": 15, "method": "item/permissions/requestApproval", "params": {}}))
    assert sent(f.out) == [{"id": 15, "result": {"decision": "decline"}}]


def test_resolved_request_is_cancelled() -> None:
    s = opened()
    s.feed(
        line(
            {
                "id": 16,
                "method": "item/commandExecution/requestApproval",
                "params": {"command": "ls"},
            }
        )
    )
    (ev,) = s.feed(line({"method": "serverRequest/resolved", "params": {"requestId": 16}})).events
    assert ev == PermissionCancelled("codex:16")
    assert s.answer("codex:16", PermissionAnswer(True)) == []


def test_turn_completed_reports_per_turn_usage_cost_and_model_calls() -> None:
    s = opened()
    for total in (100, 300):
        s.feed(
            line(
                {
                    "method": "thread/tokenUsage/updated",
                    "params": {
                        "tokenUsage": {
                            "total": {
                                "inputTokens": total,
                                "cachedInputTokens": 50,
                                "outputTokens": 10,
                            }
                        }
                    },
                }
            )
        )
    s.feed(
        line(
            {
                "method": "item/completed",
                "params": {"item": {"type": "agentMessage", "id": "m", "text": "hi"}},
            }
        )
    )
    (tc,) = s.feed(
        line(
            {
                "method": "turn/completed",
                "params": {
                    "turn": {
                        "id": TURN,
                        "status": "completed",
                        "items": [{"type": "agentMessage", "text": "bye"}],
                    }
                },
            }
        )
    ).events
    assert isinstance(tc, TurnCompleted)
    assert tc.subtype == "success" and not tc.is_error and tc.result == "bye"
    assert tc.num_turns == 2 and tc.session_id == THREAD
    assert tc.usage["input_tokens"] == 300
    assert tc.cost_usd == pytest.approx((250 * 1.0 + 50 * 0.5 + 10 * 2.0) / 1e6)
    # the next turn counts from here
    sent(s.send_turn("again"))
    (tc2,) = s.feed(
        line({"method": "turn/completed", "params": {"turn": {"status": "completed"}}})
    ).events
    assert isinstance(tc2, TurnCompleted) and tc2.usage["input_tokens"] == 0 and tc2.cost_usd == 0


def test_a_failed_turn_is_a_model_failure() -> None:
    from gitsup.workers.stream_json import model_failure

    s = opened()
    err = {
        "message": "stream disconnected before completion",
        "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": None}},
    }
    (retry,) = s.feed(line({"method": "error", "params": {"error": err, "willRetry": True}})).events
    assert isinstance(retry, WorkerOutput) and retry.stream == "api_retry"
    (tc,) = s.feed(
        line({"method": "turn/completed", "params": {"turn": {"status": "failed", "error": err}}})
    ).events
    assert isinstance(tc, TurnCompleted) and tc.is_error
    failure = model_failure(tc)
    assert failure is not None and failure.kind == "api"
    unauthorized = {"message": "401 Unauthorized", "codexErrorInfo": "unauthorized"}
    sent(s.send_turn("again"))
    (tc,) = s.feed(
        line(
            {
                "method": "turn/completed",
                "params": {"turn": {"status": "failed", "error": unauthorized}},
            }
        )
    ).events
    failure = model_failure(tc)  # type: ignore[arg-type]
    assert failure is not None and failure.kind == "auth"


def test_garbage_lines_are_noise_and_never_raise() -> None:
    s = opened()
    for bad in ("{", "[1]", '{"x": 1}', '{"id": 999, "result": {}}'):
        (ev,) = s.feed(bad).events
        assert isinstance(ev, ProtocolNoise)


def test_noise_keeps_no_secret_and_a_bounded_line() -> None:
    token = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
    (ev,) = opened().feed(f'{{"token": "{token}", ' + "x" * 5000).events
    assert isinstance(ev, ProtocolNoise)
    assert token not in ev.line and len(ev.line) <= 512


def test_unwrap_shell() -> None:
    assert unwrap_shell("/bin/bash -lc 'echo hi > f'") == "echo hi > f"
    assert unwrap_shell("bash -c ls") == "ls"
    assert unwrap_shell("/bin/bash -lc 'a' extra") == "/bin/bash -lc 'a' extra"
    assert unwrap_shell("python3 -c 'x'") == "python3 -c 'x'"
    assert unwrap_shell("bash -lc 'unterminated") == "bash -lc 'unterminated"


def test_usage_and_price() -> None:
    u = Usage.of({"inputTokens": 1_000_000, "cachedInputTokens": 0, "outputTokens": 1_000_000})
    assert cost_usd(u, {"input": 1.25, "output": 10.0}) == pytest.approx(11.25)
    assert Usage.of({"inputTokens": -5, "outputTokens": True}) == Usage()


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "approval_policy=never"],
        ["-c", 'sandbox_mode="danger-full-access"'],
        ["--config=approvals_reviewer=auto_review"],
        ["-c", "model_providers.x.base_url=http://evil"],
        ["--dangerously-bypass-approvals-and-sandbox"],
        ["--enable", "x"],
    ],
)
def test_arguments_that_could_bypass_the_gate_are_refused(args: list[str]) -> None:
    with pytest.raises(WorkerError, match="refused"):
        check_arguments(args)


def test_allowed_arguments_and_provider() -> None:
    check_arguments(["-c", 'model="gpt-5"', "--config=model_reasoning_effort=high"])
    assert provider_args({}) == []
    args = provider_args({"OPENAI_BASE_URL": 'http://127.0.0.1:9/v1"x'})
    assert args[0] == "-c" and 'base_url="http://127.0.0.1:9/v1\\"x"' in args[1]
    assert args[3] == 'model_provider="gitsup"'


def test_agents_list_and_versions(tmp_path: Path) -> None:
    assert [a.kind for a in AGENTS][:2] == ["claude", "codex"]
    assert parse_version("codex-cli 0.171.0") == "0.171.0"
    assert parse_version("2.1.328 (Claude Code)") == "2.1.328"
    fake = tmp_path / "agent"
    fake.write_text('#!/bin/sh\necho "fake-agent 9.8.7 $FAKE_HOME"\n')
    fake.chmod(0o755)
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)

    def missing(env: Any) -> list[str]:
        raise WorkerError("not installed")

    infos = probe_agents(
        {"PATH": "/usr/bin:/bin"},
        [
            Agent(
                "fake", "FAKE_BIN", lambda env: [str(fake)], probe_env=lambda t: {"FAKE_HOME": t}
            ),
            Agent("broken", "BROKEN_BIN", lambda env: [str(broken)]),
            Agent("gone", "GONE_BIN", missing),
        ],
    )
    assert [(i.kind, i.version) for i in infos] == [
        ("fake", "9.8.7"),
        ("broken", None),
        ("gone", None),
    ]
    assert infos[1].problem == "--version exited 3"
    assert infos[2].problem == "not installed" and infos[2].path is None


def test_sub_agent_threads_are_gated_but_their_turns_are_not_ours() -> None:
    s = opened()
    other = "01a22bff-0000-7000-8000-000000000000"
    (ev,) = s.feed(
        line(
            {
                "method": "turn/completed",
                "params": {"threadId": other, "turn": {"status": "completed"}},
            }
        )
    ).events
    assert isinstance(ev, WorkerOutput) and ev.stream == "subagent"
    req = {
        "id": 30,
        "method": "item/commandExecution/requestApproval",
        "params": {"threadId": other, "command": "git push", "cwd": CWD},
    }
    (perm,) = s.feed(line(req)).events
    assert isinstance(perm, PermissionRequest) and perm.tool_input["command"] == "git push"
    for tid, total in ((THREAD, 100), (other, 50)):
        usage = {"total": {"inputTokens": total, "cachedInputTokens": 0, "outputTokens": 0}}
        s.feed(
            line(
                {
                    "method": "thread/tokenUsage/updated",
                    "params": {"threadId": tid, "tokenUsage": usage},
                }
            )
        )
    (tc,) = s.feed(
        line(
            {
                "method": "turn/completed",
                "params": {"threadId": THREAD, "turn": {"status": "completed"}},
            }
        )
    ).events
    assert isinstance(tc, TurnCompleted) and tc.usage["input_tokens"] == 150


def test_the_codex_model_endpoint_for_the_egress_gate() -> None:
    from gitsup.errors import GitsupError
    from gitsup.host.egress import model_endpoint

    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8"}
    ep = model_endpoint(env, "codex")
    assert (ep.host, ep.port) == ("127.0.0.1", 9)
    assert model_endpoint(env).port == 8  # claude's is unchanged
    default = model_endpoint({}, "codex")
    assert (default.host, default.port) == ("api.openai.com", 443)
    with pytest.raises(GitsupError, match="OPENAI_BASE_URL"):
        model_endpoint({"OPENAI_BASE_URL": "http://example.invalid/v1"}, "codex")


def test_a_request_delivered_twice_is_asked_and_answered_once() -> None:
    s = opened()
    req = line(
        {
            "id": 7,
            "method": "item/commandExecution/requestApproval",
            "params": {"command": "ls", "cwd": CWD, "itemId": "c1"},
        }
    )
    (ev,) = s.feed(req).events
    assert isinstance(ev, PermissionRequest)
    (again,) = s.feed(req).events
    assert isinstance(again, ProtocolNoise) and "duplicate" in again.error
    assert sent(s.answer(ev.request_id, PermissionAnswer(True))) == [
        {"id": 7, "result": {"decision": "accept"}}
    ]
    # answered before it came again: still once
    assert isinstance(s.feed(req).events[0], ProtocolNoise)
    assert s.answer(ev.request_id, PermissionAnswer(True)) == []
