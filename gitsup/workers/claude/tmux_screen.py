"""What the tmux worker reads on the Claude Code screen, at startup only: the workspace-trust
dialog (for the task's own worktree) and a stable input prompt."""

from __future__ import annotations

import os
from pathlib import Path

PROMPT_MARK = "\u276f"  # the TUI's prompt / selection marker


def trust_dialog(screen: str) -> bool:
    return "Accessing workspace" in screen and "trust this folder" in screen


def trust_dialog_path_matches(screen: str, worktree: Path) -> bool:
    """The trust dialog names exactly the task's own worktree (lines may wrap; `~` may be
    used for the home directory)."""
    flat = "".join(screen.split())
    head = "Accessingworkspace:"
    i = flat.find(head)
    j = flat.find("Quicksafetycheck", i)
    if i < 0 or j < 0:
        return False
    shown = flat[i + len(head) : j]
    home = os.path.expanduser("~")
    candidates = {str(worktree), os.path.realpath(worktree)}
    for c in list(candidates):
        if home and home != "/" and c.startswith(home + "/"):
            candidates.add("~" + c[len(home) :])
    return any(shown == "".join(c.split()) for c in candidates)


def trust_yes_selected(screen: str) -> bool:
    return any(
        line.strip().startswith(PROMPT_MARK) and "Yes, I trust this folder" in line
        for line in screen.splitlines()
    )


def input_prompt_ready(screen: str) -> bool:
    """The TUI's input box: a prompt-mark line between two horizontal rules, no dialog."""
    if trust_dialog(screen) or "Enter to confirm" in screen:
        return False
    lines = [ln for ln in screen.splitlines() if ln.strip()]
    for i in range(1, len(lines) - 1):
        if (
            lines[i].lstrip().startswith(PROMPT_MARK)
            and _rule(lines[i - 1])
            and _rule(lines[i + 1])
        ):
            return True
    return False


def _rule(line: str) -> bool:
    s = line.strip()
    return len(s) >= 10 and set(s) <= {"─"}
