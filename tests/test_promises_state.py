"""An invalid transition is a bug report that names both states."""

from __future__ import annotations

import pytest

from gitsup.state import InvalidTransition, State, StateMachine


def test_an_invalid_transition_names_both_states() -> None:
    sm = StateMachine(State.COMPLETED)
    with pytest.raises(InvalidTransition) as ei:
        sm.transition(State.RUNNING)
    text = str(ei.value)
    assert "completed" in text.lower() and "running" in text.lower()
    assert text.endswith("is not a valid transition")
    assert sm.state == State.COMPLETED
