"""The words of the tree-sitter walk: a word node becomes a `Word` of segments (literal text
with its quoting, variables, substitutions), as `policy/parse/bashtree.py` builds them."""

from __future__ import annotations

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


class WordBuilder:
    """The word half of `bashtree._Builder` (it supplies `container`)."""

    data: bytes
    ascii: str | None  # the command when it is ASCII (its offsets are byte offsets)
    parts: list[Part]
    script: Script
    depth: int

    def text(self, node: Node) -> str:
        if self.ascii is not None:
            return self.ascii[node.start_byte : node.end_byte]
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    def container(
        self, node: Node, pipe_prev: Part | None, start: int = 0, last: list[Part] | None = None
    ) -> list[Part]:
        raise NotImplementedError  # pragma: no cover - `TreeBuilder` walks statements

    def word_of(self, node: Node, children: list[Node]) -> Word:
        segs: list[Seg] = []
        for c in children:
            segs.extend(self.word(c).segs)
        return Word(self.text(node), segs, "concatenation")

    def word(self, node: Node) -> Word:
        t = node.type
        if t == "word" or t == "number":
            # the commonest word: one literal segment (what `segs` makes of it)
            asc = self.ascii
            text = (
                asc[node.start_byte : node.end_byte]
                if asc is not None
                else self.data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")
            )
            if t == "number" or not ("\\" in text or node.child_count):
                return Word(text, [Seg("lit", text, False)], t)
        elif t == "raw_string" or t == "simple_expansion":
            # 'text' and $NAME: one segment (what `segs` makes of them)
            text = self.text(node)
            if t == "raw_string":
                return Word(text, [Seg("lit", text[1:-1], True)], t)
            return Word(text, [Seg("var", text[1:], False)], t)
        segs: list[Seg] = []
        self.segs(node, False, segs)
        return Word(self.text(node), segs, t)

    def segs(self, node: Node, quoted: bool, out: list[Seg]) -> None:
        t = node.type
        if t == "string" or t == "translated_string":
            self.dquoted(node, out)
        elif (
            t == "word"
            or t == "number"
            or t
            in (
                "brace_expression",
                "extglob_pattern",
                "regex",
                "test_operator",
                "special_variable_name",
                "variable_name",
            )
        ):
            text = self.text(node)
            if t == "word" and ("\\" in text or node.child_count):
                self.unquoted_word(node, text, quoted, out)
            else:
                out.append(Seg("lit", text, quoted))
        elif t == "raw_string":
            out.append(Seg("lit", self.text(node)[1:-1], True))
        elif t == "ansi_c_string":
            out.append(Seg("lit", decode_ansi_c(self.text(node)[2:-1]), True))
        elif t == "concatenation":
            pos = node.start_byte
            for c in node.children:
                if c.start_byte > pos:  # text between children is literal
                    out.append(
                        Seg(
                            "lit",
                            self.data[pos : c.start_byte].decode("utf-8", "surrogateescape"),
                            quoted,
                        )
                    )
                if c.is_named or c.type not in ("$",):
                    self.segs(c, quoted, out) if c.is_named else out.append(
                        Seg("lit", self.text(c), quoted)
                    )
                pos = c.end_byte
        elif t == "simple_expansion":
            out.append(Seg("var", self.text(node)[1:], quoted))
        elif t == "expansion":
            out.append(self.expansion(node, quoted))
        elif t == "command_substitution":
            out.append(self.substitution(node, quoted, "subst"))
        elif t == "process_substitution":
            out.append(self.substitution(node, quoted, "proc"))
        elif t == "arithmetic_expansion":
            self.descend_substitutions(node)
            out.append(Seg("arith", self.text(node), quoted))
        else:
            self.descend_substitutions(node)
            out.append(Seg("opaque", self.text(node), quoted))

    def unquoted_word(self, node: Node, text: str, quoted: bool, out: list[Seg]) -> None:
        if node.child_count:  # e.g. a word holding a substitution in odd places
            self.descend_substitutions(node)
            out.append(Seg("opaque", text, quoted))
            return
        if "\n" in text and any(
            text[k] == "\n" and (k == 0 or text[k - 1] != "\\") for k in range(len(text))
        ):
            # tree-sitter-bash glues `\n\\cmd` onto the previous command; bash does not.
            self.script.flags.add("newline-word")
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

    def dquoted(self, node: Node, out: list[Seg]) -> None:
        start = node.start_byte
        end = node.end_byte
        raw = self.data[start:end]
        open_len = 2 if raw.startswith(b'$"') else 1
        pos = start + open_len
        stop = end - 1 if raw.endswith(b'"') and end - start > open_len else end
        before = len(out)
        for c in node.named_children:
            if c.start_byte > pos:
                out.append(Seg("lit", dq_unescape(self.data[pos : c.start_byte]), True))
            if c.type == "string_content":
                out.append(Seg("lit", dq_unescape(self.data[c.start_byte : c.end_byte]), True))
            else:
                self.segs(c, True, out)
            pos = max(pos, c.end_byte)
        if stop > pos:
            out.append(Seg("lit", dq_unescape(self.data[pos:stop]), True))
        if len(out) == before:
            out.append(Seg("lit", "", True))

    def expansion(self, node: Node, quoted: bool) -> Seg:
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
                name = self.text(c)
            elif fname == "operator":
                if not name:
                    plain_name = False  # ${#x}, ${!x}
                op += self.text(c)
            elif c.is_named:
                if c.type == "subscript":
                    plain_name = False
                    continue
                w = self.word(c)
                if w.expands:
                    literal = False
                arg_parts.append("".join(s.text for s in w.segs))
            else:
                op += self.text(c)
        if not plain_name or not name:
            self.descend_substitutions(node)
            return Seg("opaque", self.text(node), quoted)
        if not literal:
            self.descend_substitutions(node)
        return Seg("var", name, quoted, op=op, arg="".join(arg_parts) if literal else None)

    def substitution(self, node: Node, quoted: bool, kind: SegKind) -> Seg:
        start = len(self.parts)
        self.depth += 1
        self.container(node, None)
        self.depth -= 1
        inner = self.parts[start:]
        idiom = cat_heredoc(inner) if kind == "subst" else None
        if idiom is not None:
            return Seg("lit", idiom, quoted)
        return Seg(kind, self.text(node), quoted, inner=inner)

    def descend_substitutions(self, node: Node) -> None:
        for c in node.named_children:
            if c.type in ("command_substitution", "process_substitution"):
                self.substitution(c, False, "subst")
            else:
                self.descend_substitutions(c)
