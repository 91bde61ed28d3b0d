"""Repairing brace expansions tree-sitter-bash rejects, so that deny detection still sees the
commands in them (parse/parser.py parses, normalise/expand.py expands; this module uses both).
"""

from __future__ import annotations

import re

from gitsup.policy.normalise.expand import expand_braces_text
from gitsup.policy.parse.parser import parse

# `{git,push}` in command position is a tree-sitter-bash parse error although bash expands it.
# A `{` directly followed by a non-blank is never a group in bash, so a blank-free `{...}` word
# holding `,` or `..` is a brace expansion. Used only to *find denies* in input that tree-sitter
# rejects; the repaired text is parsed again by tree-sitter.
_BRACE_WORD = re.compile(r"(?<![^\s;&|(])\{[^\s{}'\"]*(?:,|\.\.)[^\s{}'\"]*\}[^\s;&|)]*")


def repair_braces(command: str) -> str | None:
    repaired = command
    if _BRACE_WORD.search(repaired):
        repaired = _BRACE_WORD.sub(lambda m: " ".join(expand_braces_text(m.group(0))), repaired)
    if repaired != command and not parse(repaired).has_error:
        return repaired
    # `$(( cmd ) )` is a command substitution of a subshell when it is not arithmetic
    if "((" in repaired:
        spaced = repaired.replace("$((", "$( (")
        spaced = re.sub(r"(^|[;&|\n]\s*)\(\(", r"\1( (", spaced)
        if spaced != command and not parse(spaced).has_error:
            return spaced
    return None
