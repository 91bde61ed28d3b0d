"""The stream-json protocol layer, without a process: framing, parsing, encoding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitsup.workers.base import (
    PermissionAnswer,
    PermissionCancelled,
    PermissionRequest,
    ProtocolNoise,
    TurnCompleted,
    WorkerOutput,
)
from gitsup.workers.stream_json import (
    ControlRequest,
    ControlResponse,
    LineFramer,
    OversizedLine,
    SessionInit,
    control_error,
    interrupt_request,
    parse_record,
    permission_response,
    user_message,
)

TRANSCRIPT = Path(__file__).parent / "data" / "transcript-2.1.328.ndjson"


def _lines() -> list[str]:
    return TRANSCRIPT.read_text(encoding="utf-8").splitlines()


def _decode(data: bytes) -> dict[str, Any]:
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    value = json.loads(data)
    assert isinstance(value, dict)
    return value


# --- framing -------------------------------------------------------------------------------


def test_framer_joins_split_lines_and_splits_batched_ones() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":') == []
    assert framer.feed(b'1}\n{"b":2}\n{"c"') == ['{"a":1}', '{"b":2}']
    assert framer.pending == 4
    assert framer.feed(b":3}\n") == ['{"c":3}']
    assert framer.pending == 0


def test_framer_drops_blank_lines_and_crlf() -> None:
    framer = LineFramer()
    assert framer.feed(b'\n\n{"a":1}\r\n  \n') == ['{"a":1}']


def test_framer_keeps_utf8_split_inside_a_character() -> None:
    data = '{"t":"héllo ✓"}\n'.encode()
    framer = LineFramer()
    out: list[str] = []
    for i in range(len(data)):
        out += framer.feed(data[i : i + 1])
    assert out == ['{"t":"héllo ✓"}']


def test_framer_finish_returns_an_unterminated_tail() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}\n{"b"') == ['{"a":1}']
    assert framer.finish() == ['{"b"']
    assert framer.finish() == []


def test_oversized_line_becomes_noise_and_framing_recovers() -> None:
    framer = LineFramer(max_line=10)
    out = framer.feed(b'{"a":"0123') + framer.feed(b"456789abcdef") + framer.feed(b'"}\n{"b":1}\n')
    assert len(out) == 2
    assert isinstance(out[0], OversizedLine)
    assert out[0].size == 24
    assert out[1] == '{"b":1}'
    assert framer.pending == 0
    noise = parse_record(out[0])
    assert isinstance(noise, ProtocolNoise)
    assert "24 bytes" in noise.error


def test_oversized_line_is_not_buffered() -> None:
    framer = LineFramer(max_line=100)
    for _ in range(1000):
        assert framer.feed(b"x" * 1000) == []
    assert framer.feed(b"\n") != []
    assert framer.pending == 0


def test_lines_at_the_limit_frame_alike_whole_or_split() -> None:
    """A line that arrives whole in one read takes the unbuffered path; one split over reads
    is buffered: at, below and above the limit both give the same lines."""
    lines = [b"a" * 9, b"b" * 10, b"c" * 11, b"d" * 10 + b"\r", b"", b"  ", b"e"]
    stream = b"\n".join(lines) + b"\n"

    def frame(chunks: list[bytes]) -> list[tuple[str, str, int]]:
        framer = LineFramer(max_line=10)
        out = [x for c in chunks for x in framer.feed(c)] + framer.finish()
        return [(type(x).__name__, str(x), getattr(x, "size", -1)) for x in out]

    whole = frame([stream])
    assert whole == frame([stream[i : i + 1] for i in range(len(stream))])
    assert whole == frame([stream[:12], stream[12:30], stream[30:]])
    assert [w[0] for w in whole] == ["str", "str", "OversizedLine", "OversizedLine", "str"]
    assert whole[2][2] == 11 and whole[3][2] == 11  # the \r counts toward the limit


def test_framer_rejects_a_silly_limit() -> None:
    with pytest.raises(ValueError):
        LineFramer(max_line=0)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.dictionaries(
            st.text(min_size=1, max_size=8),
            st.one_of(st.integers(), st.text(max_size=30), st.booleans(), st.none()),
            max_size=4,
        ),
        max_size=12,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    crlf=st.booleans(),
)
def test_any_chunking_yields_the_same_records(
    records: list[dict[str, Any]], cuts: list[int], crlf: bool
) -> None:
    eol = b"\r\n" if crlf else b"\n"
    stream = b"".join(json.dumps(r, ensure_ascii=False).encode() + eol for r in records)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    framer = LineFramer(max_line=1 << 20)
    lines: list[str] = []
    for chunk in chunks:
        lines += framer.feed(chunk)
    lines += framer.finish()
    assert [json.loads(line) for line in lines] == records


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=30))
def test_real_transcript_chunking_is_invisible(cuts: list[int]) -> None:
    stream = TRANSCRIPT.read_bytes()
    points = sorted({c % (len(stream) + 1) for c in cuts})
    framer = LineFramer()
    lines: list[str] = []
    for a, b in zip([0, *points], [*points, len(stream)], strict=True):
        lines += framer.feed(stream[a:b])
    lines += framer.finish()
    assert [parse_record(x) for x in lines] == [parse_record(x) for x in _lines()]


# --- parsing: the real records of Claude Code 2.1.328 ----------------------------------------


def test_real_transcript_maps_to_events() -> None:
    events = [parse_record(line) for line in _lines()]
    kinds = [type(e).__name__ for e in events if e is not None]
    assert kinds == [
        "SessionInit",
        "WorkerOutput",  # text
        "WorkerOutput",  # AskUserQuestion tool_use
        "PermissionRequest",
        "WorkerOutput",  # denied: supervisor answer
        "WorkerOutput",
        "PermissionRequest",  # Bash echo
        "WorkerOutput",
        "WorkerOutput",
        "PermissionRequest",  # Write
        "WorkerOutput",
        "WorkerOutput",
        "PermissionRequest",  # Bash rm, denied
        "WorkerOutput",
        "WorkerOutput",
        "TurnCompleted",
    ]
    init = events[2]
    assert isinstance(init, SessionInit)
    assert init.session_id and init.permission_mode == "default"
    assert "Bash" in init.tools and init.version == "2.1.328"

    asks = [e for e in events if isinstance(e, PermissionRequest)]
    assert [a.tool_name for a in asks] == ["AskUserQuestion", "Bash", "Write", "Bash"]
    assert asks[0].tool_input["questions"][0]["header"] == "Runner"
    assert asks[0].raw["request"]["requires_user_interaction"] is True
    assert asks[1].tool_input == {"command": "echo hello", "description": "Say hello"}
    assert asks[1].raw["request"]["decision_reason_rule_source"] == "flagSettings"
    assert asks[3].raw["request"]["decision_reason_type"] == "safetyCheck"
    assert asks[2].tool_input == {"file_path": "/tmp/repo/a.txt", "content": "hi\n"}

    outputs = [e for e in events if isinstance(e, WorkerOutput)]
    assert outputs[0].stream == "assistant" and outputs[0].text == "Let me ask first."
    assert outputs[1].text.startswith("[tool_use AskUserQuestion] {")
    assert outputs[1].data["tool_uses"][0]["name"] == "AskUserQuestion"
    assert outputs[2].stream == "user"
    assert outputs[2].text == "[tool_result error] Supervisor answer: use pytest"
    assert outputs[2].data["tool_results"][0]["is_error"] is True
    assert any(o.text == "[tool_result] hello" for o in outputs)

    done = events[-2]
    assert isinstance(done, TurnCompleted)
    assert done.subtype == "success" and not done.is_error
    assert done.result == "All done."
    assert done.num_turns == 5
    assert done.cost_usd is not None and done.cost_usd > 0
    assert done.session_id == init.session_id
    assert done.usage["input_tokens"] > 0
    assert done.data["terminal_reason"] == "completed"
    assert [d["tool_name"] for d in done.data["permission_denials"]] == [
        "AskUserQuestion",
        "Bash",
    ]


def test_error_result() -> None:
    line = json.dumps(
        {
            "type": "result",
            "subtype": "error_max_turns",
            "is_error": True,
            "errors": ["Reached maximum number of turns (1)"],
            "num_turns": 2,
            "total_cost_usd": 0.5,
            "session_id": "s",
            "terminal_reason": "max_turns",
        }
    )
    event = parse_record(line)
    assert isinstance(event, TurnCompleted)
    assert event.is_error and event.subtype == "error_max_turns"
    assert event.result is None
    assert event.data["errors"] == ["Reached maximum number of turns (1)"]
    assert event.cost_usd == 0.5


def test_api_error_result_is_an_error_despite_success_subtype() -> None:
    line = json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "result": "API Error: 529 overloaded",
            "api_error_status": 529,
            "terminal_reason": "api_error",
            "total_cost_usd": 0,
        }
    )
    event = parse_record(line)
    assert isinstance(event, TurnCompleted)
    assert event.is_error and event.data["api_error_status"] == 529
    assert event.cost_usd == 0.0


def test_result_with_bad_field_types_is_still_a_turn_end() -> None:
    event = parse_record('{"type":"result","num_turns":true,"total_cost_usd":"x","usage":[]}')
    assert isinstance(event, TurnCompleted)
    assert event.subtype == "unknown" and event.is_error
    assert event.num_turns is None and event.cost_usd is None and event.usage == {}


def test_api_retry_is_reported() -> None:
    line = json.dumps(
        {
            "type": "system",
            "subtype": "api_retry",
            "attempt": 2,
            "max_retries": 10,
            "retry_delay_ms": 1076,
            "error_status": 529,
            "error": "overloaded",
            "session_id": "s",
        }
    )
    event = parse_record(line)
    assert isinstance(event, WorkerOutput)
    assert event.stream == "api_retry"
    assert "2/10" in event.text and "529" in event.text
    assert event.data["retry_delay_ms"] == 1076


def test_control_records() -> None:
    cancel = parse_record('{"type":"control_cancel_request","request_id":"r1"}')
    assert cancel == PermissionCancelled("r1")
    other = parse_record(
        '{"type":"control_request","request_id":"r2","request":{"subtype":"hook_callback"}}'
    )
    assert other == ControlRequest("r2", "hook_callback", {"subtype": "hook_callback"})
    broken = parse_record(
        '{"type":"control_request","request_id":"r3","request":{"subtype":"can_use_tool"}}'
    )
    assert isinstance(broken, ControlRequest) and broken.subtype == "can_use_tool"
    assert parse_record('{"type":"control_request","request_id":"r4","request":7}') == (
        ControlRequest("r4", "", {})
    )
    assert isinstance(parse_record('{"type":"control_request","request":{}}'), ProtocolNoise)
    assert isinstance(parse_record('{"type":"control_cancel_request"}'), ProtocolNoise)
    ok = parse_record(
        '{"type":"control_response","response":{"subtype":"success","request_id":"i1",'
        '"response":{"still_queued":[]}}}'
    )
    assert ok == ControlResponse("i1", True, {"still_queued": []}, None)
    err = parse_record(
        '{"type":"control_response","response":{"subtype":"error","request_id":"i2",'
        '"error":"nope"}}'
    )
    assert err == ControlResponse("i2", False, {}, "nope")
    assert isinstance(parse_record('{"type":"control_response"}'), ProtocolNoise)


@pytest.mark.parametrize(
    "line",
    ["not json", "[1,2]", '"str"', "{", '{"no_type":1}', '{"type":3}', "[" * 100_000],
)
def test_malformed_lines_are_noise(line: str) -> None:
    event = parse_record(line)
    assert isinstance(event, ProtocolNoise)
    assert len(event.line) <= 512


def test_noise_keeps_no_secret() -> None:
    token = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
    event = parse_record(f'{{"type": "result", "note": "{token}"')
    assert isinstance(event, ProtocolNoise) and token not in event.line


@pytest.mark.parametrize(
    "line",
    [
        '{"type":"keep_alive"}',
        '{"type":"stream_event","event":{}}',
        '{"type":"system","subtype":"status","status":"requesting"}',
        '{"type":"command_lifecycle","state":"queued"}',
        '{"type":"rate_limit_event"}',
        '{"type":"brand_new_thing"}',
    ],
)
def test_other_records_are_ignored(line: str) -> None:
    assert parse_record(line) is None


def test_output_text_is_bounded() -> None:
    huge = "x" * 100_000
    record = {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "text", "text": huge},
                {"type": "tool_use", "id": "t", "name": "Write", "input": {"content": huge}},
            ]
        },
    }
    event = parse_record(json.dumps(record), max_text=1000)
    assert isinstance(event, WorkerOutput)
    assert len(event.text) <= 1000
    user = {
        "type": "user",
        "message": {
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": huge}],
                }
            ]
        },
    }
    event = parse_record(json.dumps(user))
    assert isinstance(event, WorkerOutput)
    assert len(event.text) < 2100


def test_user_text_and_odd_blocks() -> None:
    event = parse_record(
        '{"type":"user","message":{"role":"user","content":"[Request interrupted by user]"}}'
    )
    assert isinstance(event, WorkerOutput) and event.text == "[Request interrupted by user]"
    event = parse_record(
        '{"type":"assistant","error":"server_error","message":{"content":'
        '[{"type":"thinking","thinking":"hm"},{"type":"image"},7]}}'
    )
    assert isinstance(event, WorkerOutput)
    assert event.text == "[thinking]\n[image]" and event.data["error"] == "server_error"


# --- encoding -------------------------------------------------------------------------------


def test_user_message() -> None:
    record = _decode(user_message("fix it\nplease \u2028", "u-1"))
    assert record == {
        "type": "user",
        "message": {"role": "user", "content": "fix it\nplease \u2028"},
        "parent_tool_use_id": None,
        "session_id": "",
        "uuid": "u-1",
    }
    blocks = _decode(user_message([{"type": "text", "text": "hi"}], "u-2"))
    assert blocks["message"]["content"] == [{"type": "text", "text": "hi"}]


def test_permission_allow_carries_the_input() -> None:
    original = {"command": "ls", "description": "list"}
    record = _decode(permission_response("r1", PermissionAnswer(allow=True), original))
    assert record == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": "r1",
            "response": {"behavior": "allow", "updatedInput": original},
        },
    }
    rewritten = PermissionAnswer(allow=True, updated_input={"command": "ls -a"})
    record = _decode(permission_response("r2", rewritten, original))
    assert record["response"]["response"]["updatedInput"] == {"command": "ls -a"}


def test_permission_deny() -> None:
    answer = PermissionAnswer(allow=False, message="Supervisor answer: pytest", interrupt=False)
    record = _decode(permission_response("r1", answer, {}))
    assert record["response"]["response"] == {
        "behavior": "deny",
        "message": "Supervisor answer: pytest",
        "interrupt": False,
    }
    record = _decode(permission_response("r2", PermissionAnswer(allow=False, interrupt=True), {}))
    assert record["response"]["response"]["interrupt"] is True
    assert record["response"]["response"]["message"]


def test_control_error_and_interrupt() -> None:
    assert _decode(control_error("r9", "unsupported")) == {
        "type": "control_response",
        "response": {"subtype": "error", "request_id": "r9", "error": "unsupported"},
    }
    assert _decode(interrupt_request("i1")) == {
        "type": "control_request",
        "request_id": "i1",
        "request": {"subtype": "interrupt"},
    }


def test_encoded_records_frame_back() -> None:
    stream = user_message("a\nb", "u") + interrupt_request("i") + control_error("c", "x\ny")
    framer = LineFramer()
    assert len(framer.feed(stream)) == 3


# --- the per-record shortcuts against the general code they stand for --------------------------


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.binary(max_size=6)
        | st.text(alphabet=" \t\r\x0b\x0c\x1c\x85\xa0x{}", max_size=6).map(str.encode),
        max_size=10,
    )
)
def test_blank_lines_are_those_strip_empties(lines: list[bytes]) -> None:
    """The framer's blank-line test (no copy of the line) drops exactly the lines that
    `bytes.strip()` empties."""
    stream = b"".join(line.replace(b"\n", b"") + b"\n" for line in lines)
    expected = []
    for raw in stream.split(b"\n")[:-1]:
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        if raw.strip():
            expected.append(raw.decode("utf-8", "replace"))
    assert LineFramer().feed(stream) == expected


@settings(max_examples=300, deadline=None)
@given(
    record=st.fixed_dictionaries(
        {"type": st.sampled_from(["assistant", "user"])},
        optional={
            "message": st.one_of(
                st.none(),
                st.text(max_size=5),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "id": st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                        "content": st.one_of(
                            st.text(max_size=20),
                            st.lists(
                                st.fixed_dictionaries(
                                    {"type": st.sampled_from(["text", "tool_use", "x"])},
                                    optional={"text": st.text(max_size=10), "name": st.text()},
                                ),
                                max_size=3,
                            ),
                        ),
                    },
                ),
            ),
            "session_id": st.one_of(st.none(), st.integers(), st.text(max_size=5)),
            "uuid": st.one_of(st.none(), st.booleans(), st.text(max_size=5)),
            "parent_tool_use_id": st.one_of(st.none(), st.text(max_size=5)),
            "error": st.one_of(st.none(), st.integers(), st.text(max_size=12)),
            "isReplay": st.one_of(st.none(), st.booleans(), st.integers()),
        },
    )
)
def test_message_output_is_the_dataclass_it_stands_for(record: dict[str, Any]) -> None:
    """An assistant/user record's WorkerOutput is built in its dict: it is the same object
    the dataclass's own constructor makes (fields, equality, hash, repr)."""
    ev = parse_record(json.dumps(record))
    assert type(ev) is WorkerOutput
    made = WorkerOutput(ev.stream, ev.text, ev.data)
    assert vars(ev) == vars(made)
    assert list(vars(ev)) == list(vars(made))
    assert ev == made and repr(ev) == repr(made)
    with pytest.raises(AttributeError):
        ev.text = "x"  # type: ignore[misc]
    message = record.get("message")
    ids = {
        k: v if isinstance(v, str) else None
        for k in ("session_id", "uuid", "parent_tool_use_id")
        for v in [record.get(k)]
    }
    assert {k: ev.data[k] for k in ids} == ids
    mid = message.get("id") if isinstance(message, dict) else None
    assert ev.data.get("message_id") == (mid if isinstance(mid, str) else None)
    assert ("message_id" in ev.data) == isinstance(mid, str)
    assert ev.data.get("is_replay") is (True if record.get("isReplay") is True else None)
    assert ("error" in ev.data) == isinstance(record.get("error"), str)
