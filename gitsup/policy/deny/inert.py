"""Parts the deny scan provably ignores, so it need not run its rules over them.

A part is *inert* for deny detection when it is a simple command with no redirection, no
assignment, only literal words, and a first word that is a bare program name (no `/`) the deny
scan never judges: for such a part `deny.scan_part` returns None and changes no scan state,
whatever its arguments. The judged names are not listed here: they are the table every
name-specific step of the scan reads (`facts.py`) and the policy's own tables, so the
shortcut cannot drift from what the scan judges. `tests/policy/test_shortcuts.py` compares
decisions with and without the shortcut over both labelled corpora and generated commands.
"""

from __future__ import annotations

from gitsup.policy.config import Policy
from gitsup.policy.facts import JUDGED, PREFIXES, PYTHON
from gitsup.policy.parse.script import Part

# Set to False to run every rule over every part (the tests compare both).
ENABLED = True


def relevant_names(policy: Policy) -> frozenset[str] | None:
    """The program names the deny scan judges under `policy`, or None when a repository deny
    prefix or deny rule may match any program (then no part is skipped). Computed once per policy."""
    cached = policy._deny_names
    if "names" in cached:
        return cached["names"]
    names: frozenset[str] | None = None
    if not policy.deny_prefixes and not policy.deny_rules:
        names = frozenset(
            JUDGED
            | policy.shells
            | policy.interpreters
            | policy.downloaders
            | policy.http_clients
            | set(policy.forge)
            | set(policy.publish)
            | {key.split()[0] for key in policy.wrappers}
        )
    cached["names"] = names
    return names


def inert(part: Part, names: frozenset[str]) -> bool:
    """True when the deny scan of `part` provably finds nothing and records nothing."""
    if part.kind != "cmd" or part.redirects or part.assigns or not part.words:
        return False
    for w in part.words:
        if w.one_field.__class__ is str:
            continue  # known literal text: every segment is literal
        for s in w.segs:
            if s.kind != "lit":
                return False
    head = part.words[0]
    name = head.one_field
    if not isinstance(name, str):
        if name is None:
            return False
        name = "".join(s.text for s in head.segs)
        for s in head.segs:
            if not s.quoted and ("{" in s.text or "~" in s.text):
                return False
    return inert_name(name, head.src, names)


def inert_name(name: str, head: str, names: frozenset[str]) -> bool:
    """True when a part of literal words (no redirection, no assignment) whose first word is
    `head` (its source) with the value `name` is inert."""
    return bool(
        name
        and "/" not in head
        and "/" not in name
        and name not in names
        and not name.startswith(PREFIXES)
        and not PYTHON.match(name)
    )
