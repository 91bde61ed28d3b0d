"""WorkerSetup.options is typed (WorkerOptions): fields, no mapping behind them."""

from __future__ import annotations

import dataclasses
import queue
from pathlib import Path

import pytest

from gitsup.workers.base import WorkerOptions, WorkerSetup


def test_options_are_typed_fields_with_no_mapping_api() -> None:
    opts = WorkerOptions(hook_timeout=2.5, ask_tools=())
    assert opts.hook_timeout == 2.5 and opts.ask_tools == () and opts.spec is None
    for name in ("get", "of", "__getitem__", "__contains__", "extra"):
        assert not hasattr(opts, name), name
    with pytest.raises(TypeError):
        WorkerOptions(codex_model="x")  # type: ignore[call-arg]  # an unknown option is an error
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.hook_timeout = 1.0  # type: ignore[misc]


def test_setup_defaults_to_empty_options_and_keeps_the_given_ones() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    assert WorkerSetup("t", Path("/w"), Path("/d"), {}, (), inbox).options == WorkerOptions()
    typed = WorkerOptions(startup_timeout=5.0)
    assert WorkerSetup("t", Path("/w"), Path("/d"), {}, (), inbox, options=typed).options is typed
