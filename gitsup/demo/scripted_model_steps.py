"""The scripts the scripted model stand-ins serve: named lists of steps, checked when loaded.

A step is one model answer or one fault (see gitsup/demo/scripted_model.py for the shapes); the
same scripts serve the Messages API (scripted_model) and the Responses API (scripted_openai).
Standard library only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_FAULT_KEYS = ("http_error", "garbage")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ScriptError(ValueError):
    """A script or scenario that cannot be served."""


@dataclass(frozen=True)
class ModelScript:
    """A named list of steps, chosen for a conversation whose prompt contains `match`."""

    name: str
    steps: tuple[Mapping[str, Any], ...]
    match: str | None = None

    @classmethod
    def from_value(
        cls, name: str, value: ModelScript | Mapping[str, Any] | Sequence[Any]
    ) -> ModelScript:
        if isinstance(value, ModelScript):
            return value
        if isinstance(value, Mapping):
            raw_steps = value.get("steps")
            match = value.get("match")
            if match is not None and not isinstance(match, str):
                raise ScriptError(f"script {name!r}: match must be a string")
        else:
            raw_steps, match = value, None
        if not isinstance(raw_steps, Sequence) or isinstance(raw_steps, str | bytes):
            raise ScriptError(f"script {name!r}: steps must be a list")
        steps = tuple(normalise_step(name, i, s) for i, s in enumerate(raw_steps))
        return cls(name=name, steps=steps, match=match)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server saw. `kind`: step, fault, overrun, housekeeping,
    count_tokens, bad_request or not_found."""

    path: str
    body: Any
    headers: Mapping[str, str]
    kind: str
    script: str | None = None
    step: int | None = None
    time: float = field(default_factory=time.time)


def normalise_step(script: str, index: int, step: Any) -> Mapping[str, Any]:
    where = f"script {script!r} step {index}"
    if isinstance(step, Sequence) and not isinstance(step, str | bytes):
        step = {"content": list(step)}
    if not isinstance(step, Mapping):
        raise ScriptError(f"{where}: a step is a list of blocks or an object")
    out = dict(step)
    if "text" in out:
        out.setdefault("content", []).append({"type": "text", "text": str(out.pop("text"))})
    if "bash" in out:
        command = out.pop("bash")
        out.setdefault("content", []).append(
            {"type": "tool_use", "name": "Bash", "input": {"command": command}}
        )
    faults = [k for k in _FAULT_KEYS if k in out]
    if len(faults) > 1 or (faults and "content" in out):
        raise ScriptError(f"{where}: combine at most one of http_error, garbage, content")
    if not faults and "content" not in out and "hang" not in out:
        raise ScriptError(f"{where}: no content, http_error, garbage or hang")
    times = out.get("times", 1)
    if times != "forever" and (not isinstance(times, int) or times < 1):
        raise ScriptError(f"{where}: times must be a positive integer or 'forever'")
    for block in out.get("content", []):
        if not isinstance(block, Mapping) or block.get("type") not in ("text", "tool_use"):
            raise ScriptError(f"{where}: blocks are text or tool_use objects")
        if block["type"] == "tool_use" and not isinstance(block.get("name"), str):
            raise ScriptError(f"{where}: a tool_use block needs a name")
    return out


def is_fault(step: Mapping[str, Any]) -> bool:
    return "content" not in step


def step_groups(steps: Sequence[Mapping[str, Any]]) -> list[tuple[list[int], int | None]]:
    """Per assistant turn: the fault steps that precede its response, and the response."""
    groups: list[tuple[list[int], int | None]] = []
    faults: list[int] = []
    for i, step in enumerate(steps):
        if is_fault(step):
            faults.append(i)
        else:
            groups.append((faults, i))
            faults = []
    if faults:
        groups.append((faults, None))
    return groups


def substitute(value: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR_RE.sub(lambda m: variables.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [substitute(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, variables) for k, v in value.items()}
    return value


def estimate_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


def scenario_scripts(source: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    """The scripts of a scenario (a JSON file path or an already parsed object), unchecked:
    ``{"scripts": {name: script}}``, or one script ``{"steps": [...]}`` named "default"."""
    if isinstance(source, str | Path):
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ScriptError(f"cannot read scenario {source}: {exc}") from exc
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ScriptError("a scenario is a JSON object")
    scripts = data.get("scripts")
    if scripts is None:
        return {"default": data}
    if not isinstance(scripts, Mapping) or not scripts:
        raise ScriptError("scenario 'scripts' must be a non-empty object")
    return scripts


def load_scenario(source: str | Path | Mapping[str, Any]) -> dict[str, ModelScript]:
    """Scripts from a scenario (a JSON file path or an already parsed object).

    Shapes: ``{"scripts": {name: script}}`` where a script is a list of steps
    or ``{"match": ..., "steps": [...]}``; or one script ``{"steps": [...]}``
    (named "default"). Other top-level keys (`description`, ...) are ignored.
    """
    return {
        str(name): ModelScript.from_value(str(name), value)
        for name, value in scenario_scripts(source).items()
    }
