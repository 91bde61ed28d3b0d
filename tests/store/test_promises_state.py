"""An invalid transition is a bug report that names both states."""

from __future__ import annotations

import pytest

from gitsup.state import InvalidTransition, State, check_transition


def test_an_invalid_transition_names_both_states() -> None:
    with pytest.raises(InvalidTransition) as ei:
        check_transition(State.COMPLETED, State.RUNNING)
    text = str(ei.value)
    assert "completed" in text.lower() and "running" in text.lower()
    assert text.endswith("is not a valid transition")
