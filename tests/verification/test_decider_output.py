"""A model decider may wrap its JSON in prose: the last object with the expected key counts,
for turn decisions and for answers alike; anything else is a clear error."""

from __future__ import annotations

import pytest

from gitsup.verification.decider import (
    DeciderError,
    _last_object,
    _parse_answer,
    _parse_turn_decision,
)


def test_a_turn_decision_is_the_last_object_with_an_action() -> None:
    text = (
        'I considered {"action": "park"} first, but {"note": 1} and then decided:\n'
        '{"action": "continue", "message": "run the tests"}'
    )
    d = _parse_turn_decision(text, "model")
    assert (d.action, d.message, d.source) == ("continue", "run the tests", "model")
    # objects without an action are passed over, wherever they stand
    d = _parse_turn_decision('{"action": "verify"} then {"other": true}', "model")
    assert d.action == "verify"


def test_prose_without_an_action_object_is_an_error() -> None:
    with pytest.raises(DeciderError, match="not JSON"):
        _parse_turn_decision('maybe {"answer": "x"} or {not json}', "model")


def test_an_answer_is_the_whole_text_or_the_last_object_with_an_answer() -> None:
    assert _last_object('{"answer": "yes"}') == '{"answer": "yes"}'
    text = 'Sure. {"answer": "no"} Actually: {"answer": "yes"} {"x": 1}'
    assert _parse_answer(_last_object(text)) == "yes"
    # nothing to take: the text stays as it is (and is refused as not JSON)
    assert _last_object("no json here") == "no json here"
    with pytest.raises(DeciderError):
        _parse_answer(_last_object("no json here"))
