"""WorkerSetup.options is typed (WorkerOptions) and still reads as the mapping it was."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from gitsup.workers.base import WorkerOptions, WorkerSetup
from tests.fakes import make_spec


def _ctx(options: object) -> WorkerSetup:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    return WorkerSetup("t", Path("/w"), Path("/d"), {}, (), inbox, options=options)  # type: ignore[arg-type]


def test_a_mapping_is_converted_and_reads_as_before() -> None:
    spec = make_spec()
    opts = _ctx({"spec": spec, "ask_tools": (), "startup_timeout": 5, "codex_model": "x"}).options
    assert isinstance(opts, WorkerOptions)
    assert opts.spec is spec and opts["spec"] is spec and opts.get("spec") is spec
    assert opts.get("ask_tools", ("Bash",)) == ()  # set, though empty: not the default
    assert opts.get("tools", "Read") == "Read" and "tools" not in opts  # unset: the default
    assert opts.get("startup_timeout", 30) == 5
    assert opts["codex_model"] == "x" and opts.extra == {"codex_model": "x"}  # unknown keys kept
    with pytest.raises(KeyError):
        opts["wrap"]


def test_typed_options_pass_through_and_default_to_empty() -> None:
    typed = WorkerOptions(hook_timeout=2.5)
    assert _ctx(typed).options is typed
    assert _ctx(None).options == WorkerOptions()
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    assert WorkerSetup("t", Path("/w"), Path("/d"), {}, (), inbox).options == WorkerOptions()
