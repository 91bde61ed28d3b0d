"""The words of the tree-sitter walk: a word node becomes a `Word` of segments (literal text
with its quoting, variables, substitutions). The statement walk (`policy/parse/bashtree.py`)
calls these functions with itself as the `Walk`; a substitution's commands go back to it through
`Walk.nested`."""

from __future__ import annotations

from typing import Protocol

from tree_sitter import Node

from gitsup.policy.parse.script import (
    Part,
    Script,
    Seg,
    SegKind,
    Word,
    cat_heredoc,
    decode_ansi_c,
    dq_unescape,
)

# Nodes that are one literal segment in `add_segs` (beside `word` and `number`); the statement walk
# takes them as words too.
LITERAL_NODES = frozenset(
    {
        "brace_expression",
        "extglob_pattern",
        "regex",
        "test_operator",
        "special_variable_name",
        "variable_name",
    }
)


class Walk(Protocol):
    """What the words need from the statement walk."""

    data: bytes  # the command, encoded (utf-8, surrogateescape)
    ascii: str | None  # the command when it is ASCII (its offsets are byte offsets)
    script: Script

    def nested(self, node: Node) -> list[Part]:
        """Walk the commands of a substitution one level deeper; return the parts made."""
        ...


def node_text(b: Walk, node: Node) -> str:
    if b.ascii is not None:
        return b.ascii[node.start_byte : node.end_byte]
    return b.data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")


def word_of(b: Walk, node: Node, children: list[Node]) -> Word:
    segs: list[Seg] = []
    for c in children:
        segs.extend(word(b, c).segs)
    return Word(node_text(b, node), segs, "concatenation")


def word(b: Walk, node: Node) -> Word:
    t = node.type
    if t == "word" or t == "number":
        # the commonest word: one literal segment (what `add_segs` makes of it)
        asc = b.ascii
        text = (
            asc[node.start_byte : node.end_byte]
            if asc is not None
            else b.data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")
        )
        if t == "number" or not ("\\" in text or node.child_count):
            return Word(text, [Seg("lit", text, False)], t)
    elif t == "raw_string" or t == "simple_expansion":
        # 'text' and $NAME: one segment (what `add_segs` makes of them)
        text = node_text(b, node)
        if t == "raw_string":
            return Word(text, [Seg("lit", text[1:-1], True)], t)
        return Word(text, [Seg("var", text[1:], False)], t)
    segs: list[Seg] = []
    add_segs(b, node, False, segs)
    return Word(node_text(b, node), segs, t)


def add_segs(b: Walk, node: Node, quoted: bool, out: list[Seg]) -> None:
    t = node.type
    if t == "string" or t == "translated_string":
        dquoted(b, node, out)
    elif t == "word" or t == "number" or t in LITERAL_NODES:
        text = node_text(b, node)
        if t == "word" and ("\\" in text or node.child_count):
            unquoted_word(b, node, text, quoted, out)
        else:
            out.append(Seg("lit", text, quoted))
    elif t == "raw_string":
        out.append(Seg("lit", node_text(b, node)[1:-1], True))
    elif t == "ansi_c_string":
        out.append(Seg("lit", decode_ansi_c(node_text(b, node)[2:-1]), True))
    elif t == "concatenation":
        pos = node.start_byte
        for c in node.children:
            if c.start_byte > pos:  # text between children is literal
                out.append(
                    Seg(
                        "lit",
                        b.data[pos : c.start_byte].decode("utf-8", "surrogateescape"),
                        quoted,
                    )
                )
            if c.is_named or c.type not in ("$",):
                add_segs(b, c, quoted, out) if c.is_named else out.append(
                    Seg("lit", node_text(b, c), quoted)
                )
            pos = c.end_byte
    elif t == "simple_expansion":
        out.append(Seg("var", node_text(b, node)[1:], quoted))
    elif t == "expansion":
        out.append(expansion(b, node, quoted))
    elif t == "command_substitution":
        out.append(substitution(b, node, quoted, "subst"))
    elif t == "process_substitution":
        out.append(substitution(b, node, quoted, "proc"))
    elif t == "arithmetic_expansion":
        descend_substitutions(b, node)
        out.append(Seg("arith", node_text(b, node), quoted))
    else:
        descend_substitutions(b, node)
        out.append(Seg("opaque", node_text(b, node), quoted))


def unquoted_word(b: Walk, node: Node, text: str, quoted: bool, out: list[Seg]) -> None:
    if node.child_count:  # e.g. a word holding a substitution in odd places
        descend_substitutions(b, node)
        out.append(Seg("opaque", text, quoted))
        return
    if "\n" in text and any(
        text[k] == "\n" and (k == 0 or text[k - 1] != "\\") for k in range(len(text))
    ):
        # tree-sitter-bash glues `\n\\cmd` onto the previous command; bash does not.
        b.script.flags.add("newline-word")
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if buf:
                out.append(Seg("lit", "".join(buf), quoted))
                buf = []
            if text[i + 1] != "\n":
                out.append(Seg("lit", text[i + 1], True))
            i += 2
            continue
        buf.append(c)
        i += 1
    if buf:
        out.append(Seg("lit", "".join(buf), quoted))


def dquoted(b: Walk, node: Node, out: list[Seg]) -> None:
    start = node.start_byte
    end = node.end_byte
    raw = b.data[start:end]
    open_len = 2 if raw.startswith(b'$"') else 1
    pos = start + open_len
    stop = end - 1 if raw.endswith(b'"') and end - start > open_len else end
    before = len(out)
    for c in node.named_children:
        if c.start_byte > pos:
            out.append(Seg("lit", dq_unescape(b.data[pos : c.start_byte]), True))
        if c.type == "string_content":
            out.append(Seg("lit", dq_unescape(b.data[c.start_byte : c.end_byte]), True))
        else:
            add_segs(b, c, True, out)
        pos = max(pos, c.end_byte)
    if stop > pos:
        out.append(Seg("lit", dq_unescape(b.data[pos:stop]), True))
    if len(out) == before:
        out.append(Seg("lit", "", True))


def expansion(b: Walk, node: Node, quoted: bool) -> Seg:
    name = ""
    op = ""
    arg_parts: list[str] = []
    literal = True
    plain_name = True
    for i, c in enumerate(node.children):
        ct = c.type
        fname = node.field_name_for_child(i)
        if ct in ("${", "}"):
            continue
        if ct in ("variable_name", "special_variable_name") and not name and not op:
            name = node_text(b, c)
        elif fname == "operator":
            if not name:
                plain_name = False  # ${#x}, ${!x}
            op += node_text(b, c)
        elif c.is_named:
            if c.type == "subscript":
                plain_name = False
                continue
            w = word(b, c)
            if w.expands:
                literal = False
            arg_parts.append("".join(s.text for s in w.segs))
        else:
            op += node_text(b, c)
    if not plain_name or not name:
        descend_substitutions(b, node)
        return Seg("opaque", node_text(b, node), quoted)
    if not literal:
        descend_substitutions(b, node)
    return Seg("var", name, quoted, op=op, arg="".join(arg_parts) if literal else None)


def substitution(b: Walk, node: Node, quoted: bool, kind: SegKind) -> Seg:
    inner = b.nested(node)
    idiom = cat_heredoc(inner) if kind == "subst" else None
    if idiom is not None:
        return Seg("lit", idiom, quoted)
    return Seg(kind, node_text(b, node), quoted, inner=inner)


def descend_substitutions(b: Walk, node: Node) -> None:
    for c in node.named_children:
        if c.type in ("command_substitution", "process_substitution"):
            substitution(b, c, False, "subst")
        else:
            descend_substitutions(b, c)
