"""Parse a bash string with tree-sitter-bash into a flat list of simple commands (`Part`s).

docs/policy.md, "Decision order", step 1: the string is split across lists, pipelines, subshells, groups,
compound commands, function bodies, substitutions and unquoted heredoc bodies. Each `Part`
keeps its words as segments (literal text with its quoting, or an expansion), so later
stages can both judge the *plain form* (allow list) and compute the *normalised form*
(deny detection) without re-parsing.

The parsed form lives in `policy/parse/script.py`, the plain-command fast path in
`policy/parse/fastpath.py`, the tree-sitter walk in `policy/parse/bashtree.py`; this module chooses.
"""

from __future__ import annotations

import threading

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from gitsup.policy.parse.bashtree import TreeBuilder
from gitsup.policy.parse.fastpath import fast_parse
from gitsup.policy.parse.script import (
    Script,
)

_LANGUAGE = Language(tree_sitter_bash.language())
_local = threading.local()


def _parser() -> Parser:
    p: Parser | None = getattr(_local, "parser", None)
    if p is None:
        p = Parser(_LANGUAGE)
        _local.parser = p
    return p


# Nesting deeper than this (lists chained with `&&`/`;` do not count) is not judged: the
# classifier answers `ask` (flag "too-deep") instead of walking it.
MAX_NESTING = 100
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"()[]{}$`\"'!;&|\n")


def _too_deep(root: Node, data: bytes) -> bool:
    """True when the syntax tree nests deeper than MAX_NESTING (iterative walk). Input with
    few structural characters cannot nest that deep and is not walked."""
    if len(data) < MAX_NESTING // 2 or len(data.translate(None, _NOT_STRUCTURE)) < MAX_NESTING:
        return False
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        chained = node.type == "list"
        for child in node.children:
            if child.child_count:
                stack.append((child, depth if chained and child.type == "list" else depth + 1))
    return False


def parse(command: str) -> Script:
    fast = fast_parse(command)
    if fast is not None:
        return fast
    return parse_tree(command)


def parse_tree(command: str) -> Script:
    """`parse` through tree-sitter (every command the fast path does not take)."""
    data = command.encode("utf-8", "surrogateescape")
    tree = _parser().parse(data)
    root = tree.root_node
    if len(data) >= MAX_NESTING // 2 and _too_deep(root, data):
        return Script(
            src=command, parts=[], has_error=root.has_error, flags={"too-deep"}, error_line=0
        )
    b = TreeBuilder(data, command)
    b.container(root, None)
    has_error = root.has_error
    if not has_error and _has_gap(root, data, b.recovered):
        b.script.flags.add("gap")
    if has_error:
        b.script.has_error = True
        if b.script.error_line < 0:
            b.script.error_line = _first_error_line(root)
    return b.script


def _first_error_line(node: Node) -> int:
    stack = [node]
    best = -1
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            line = n.start_point[0]
            if best < 0 or line < best:
                best = line
            continue
        if n.has_error:
            stack.extend(n.children)
    return max(best, 0)


_BLANK = b" \t\n\\"
# Nodes whose text the gap check takes whole (it does not look inside them).
_GAP_WHOLE = frozenset(
    k
    for k in range(_LANGUAGE.node_kind_count)
    if _LANGUAGE.node_kind_for_id(k)
    in ("heredoc_body", "comment", "raw_string", "string_content", "heredoc_content", "word")
)


def _has_gap(root: Node, data: bytes, recovered: set[int]) -> bool:
    """True when some non-blank source text belongs to no token (tree-sitter dropped it). The
    tokens are visited in source order with a cursor (no list of children is built)."""
    pos = 0
    cur = root.walk()
    first_child = cur.goto_first_child
    next_sibling = cur.goto_next_sibling
    parent = cur.goto_parent
    whole = _GAP_WHOLE
    while True:
        n = cur.node
        assert n is not None
        if n.kind_id in whole or not first_child():
            start = n.start_byte
            if start > pos and data[pos:start].strip(_BLANK) and pos not in recovered:
                return True
            end = n.end_byte
            if end > pos:
                pos = end
            while not next_sibling():
                if not parent():
                    return bool(data[pos:].strip(_BLANK))
