"""Rendering helpers for the CLI: progress on stderr, results on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(value: Any) -> None:
    if hasattr(value, "model_dump"):  # a pydantic model (not imported for fast commands)
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")


def emit_jsonl(value: Any) -> None:
    if hasattr(value, "model_dump"):  # a pydantic model (not imported for fast commands)
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def progress(text: str) -> None:
    sys.stderr.write(f"git sup: {text}\n")
    sys.stderr.flush()
