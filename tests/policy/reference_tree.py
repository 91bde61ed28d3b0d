"""A frozen copy of the tree-sitter walk (policy/parse/parser.py `parse_tree`, policy/parse/bashtree.py,
policy/parse/bashwords.py) as it was before that walk was rewritten for speed: the reference the
equality test (test_tree_equal.py) compares the live walk with. Not used by gitsup itself;
do not change it (it is the specification of the output by example)."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import re
import threading

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from gitsup.policy.parse.script import (
    Part,
    Redirect,
    Script,
    Seg,
    SegKind,
    Word,
    cat_heredoc,
    dq_unescape,
    piped_into,
    decode_ansi_c,
)


class WordBuilder:
    """The word half of `bashtree._Builder` (it supplies `container`)."""

    data: bytes
    parts: list[Part]
    script: Script
    depth: int

    def text(self, node: Node) -> str:
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
            text = self.text(node)
            if t == "number" or not ("\\" in text or node.child_count):
                return Word(text, [Seg("lit", text, False)], t)
        segs: list[Seg] = []
        self.segs(node, False, segs)
        return Word(self.text(node), segs, t)

    def segs(self, node: Node, quoted: bool, out: list[Seg]) -> None:
        t = node.type
        if (
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
        elif t == "string" or t == "translated_string":
            self.dquoted(node, out)
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


_SAFE_GAP = re.compile(r"[\sA-Za-z0-9_./=+:,@%-]*")


_STATEMENTS = frozenset(
    {
        "command",
        "redirected_statement",
        "pipeline",
        "list",
        "subshell",
        "compound_statement",
        "if_statement",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "function_definition",
        "negated_command",
        "declaration_command",
        "unset_command",
        "variable_assignment",
        "variable_assignments",
        "test_command",
        "do_group",
        "else_clause",
        "elif_clause",
        "case_item",
    }
)


_CONTAINERS = frozenset(
    {
        "program",
        "list",
        "subshell",
        "compound_statement",
        "if_statement",
        "while_statement",
        "do_group",
        "else_clause",
        "elif_clause",
        "case_item",
        "negated_command",
    }
)


_WORDISH = frozenset(
    {
        "word",
        "string",
        "raw_string",
        "ansi_c_string",
        "translated_string",
        "concatenation",
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
        "number",
        "brace_expression",
        "extglob_pattern",
        "regex",
        "test_operator",
        "special_variable_name",
        "variable_name",
        "array",
    }
)


_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class TreeBuilder(WordBuilder):
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.parts: list[Part] = []
        self.script = Script(src=data.decode("utf-8", "surrogateescape"), parts=self.parts)
        self.depth = 0
        self.in_function = 0
        self.recovered: set[int] = set()

    # -- helpers -------------------------------------------------------------------------
    def add(self, part: Part, node: Node) -> Part:
        part.depth = self.depth
        part.in_function = self.in_function > 0
        part.line = node.start_point[0]
        self.parts.append(part)
        return part

    # -- statements ----------------------------------------------------------------------
    def statement(self, node: Node, pipe_prev: Part | None = None) -> list[Part]:
        """Walk one statement; return the parts created at this level (for pipelines)."""
        t = node.type
        if t == "command":
            return [self.command(node, pipe_prev)]
        if t == "redirected_statement":
            return self.redirected(node, pipe_prev)
        if t == "pipeline":
            return self.pipeline(list(node.named_children), pipe_prev)
        if t == "list":
            return self.list_chain(node, pipe_prev)
        if t == "function_definition":
            return self.function(node)
        if t == "declaration_command" or t == "unset_command":
            return [self.declaration(node, pipe_prev)]
        if t == "variable_assignment" or t == "variable_assignments":
            return [self.assignment(node)]
        if t == "test_command":
            return [self.test(node, pipe_prev)]
        if t == "for_statement" or t == "case_statement":
            return self.loop(node)
        if t == "c_style_for_statement":
            self.add(Part(self.text(node), "arith"), node)
            return self.container(node, pipe_prev)
        if t == "compound_statement" and node.child_count and node.children[0].type == "((":
            part = self.add(Part(self.text(node), "arith"), node)
            self.descend_substitutions(node)
            return [part]
        if t in _CONTAINERS:
            return self.container(node, pipe_prev)
        if t == "comment":
            return []
        if t == "ERROR":
            self.mark_error(node)
            return self.container(node, pipe_prev)
        # Something this walker does not know: judged opaque (ask), still searched for denies.
        part = self.add(Part(self.text(node), "opaque"), node)
        self.container(node, pipe_prev)
        return [part]

    def mark_error(self, node: Node) -> None:
        self.script.has_error = True
        line = node.start_point[0]
        if self.script.error_line < 0 or line < self.script.error_line:
            self.script.error_line = line

    def list_chain(self, node: Node, pipe_prev: Part | None) -> list[Part]:
        """`a && b || c; d`: tree-sitter nests lists to the left; walk the chain iteratively so
        thousands of parts do not recurse."""
        chain: list[Node] = []
        n = node
        while n.type == "list" and n.child_count and n.children[0].type == "list":
            chain.append(n)
            n = n.children[0]
        made = self.container(n, pipe_prev)
        last = made
        for outer in reversed(chain):
            last = self.container(outer, pipe_prev, start=1, last=last)
            made.extend(last)
        return made

    def container(
        self, node: Node, pipe_prev: Part | None, start: int = 0, last: list[Part] | None = None
    ) -> list[Part]:
        made: list[Part] = []
        last = last if last is not None else []
        children = node.children if start == 0 else node.children[start:]
        for child in children:
            ct = child.type
            if ct == "&":
                for p in last:
                    p.background = True
                continue
            if not child.is_named:
                continue
            if ct in _STATEMENTS or ct == "ERROR":
                last = self.statement(child, pipe_prev)
                made.extend(last)
            elif ct in _WORDISH:
                w = self.word(child)
                made.append(self.add(Part(w.src, "words", words=[w]), child))
            elif ct == "comment" or ct in ("heredoc_body", "heredoc_start", "heredoc_end"):
                continue
            elif ct in _REDIRECTS:
                made.append(
                    self.add(
                        Part(self.text(child), "redirects", redirects=self.redirect(child, None)),
                        child,
                    )
                )
            else:
                last = self.statement(child, pipe_prev)
                made.extend(last)
        return made

    def pipeline(self, stages: list[Node], pipe_prev: Part | None) -> list[Part]:
        made: list[Part] = []
        prev = pipe_prev
        for stage in stages:
            if stage.type == "comment":
                continue
            parts = self.statement(stage, prev)
            made.extend(parts)
            if parts:
                prev = parts[-1]
        return made

    def function(self, node: Node) -> list[Part]:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        self.script.flags.add("function")
        start = len(self.parts)
        self.in_function += 1
        body = node.child_by_field_name("body")
        if body is not None:
            self.statement(body)
        self.in_function -= 1
        inner = self.parts[start:]
        self.script.functions[name] = inner
        # A function that calls itself in a pipeline or in the background: a fork bomb.
        for p in inner:
            if (
                p.words
                and p.words[0].src == name
                and (p.pipe_prev is not None or p.background or piped_into(p, inner))
            ):
                self.script.fork_bombs.append(self.text(node))
                break
        return []

    def loop(self, node: Node) -> list[Part]:
        made: list[Part] = []
        words: list[Word] = []
        var = ""
        for child in node.children:
            if not child.is_named:
                continue
            if node.type == "for_statement" and child.type == "variable_name" and not var:
                var = self.text(child)
            elif child.type in _WORDISH:
                words.append(self.word(child))
            elif child.type == "comment":
                continue
            else:
                made.extend(self.statement(child))
        part = Part(self.text(node).split("\n", 1)[0], "words", words=words)
        if var:
            part.assigns.append((var, None))
            part.words = words
            self.script.flags.add("for:" + var)
        self.add(part, node)
        return [part, *made]

    def test(self, node: Node, pipe_prev: Part | None) -> Part:
        words: list[Word] = []

        def walk(n: Node) -> None:
            for c in n.named_children:
                if c.type in _WORDISH:
                    words.append(self.word(c))
                else:
                    walk(c)

        walk(node)
        return self.add(Part(self.text(node), "test", words=words, pipe_prev=pipe_prev), node)

    def assignment(self, node: Node) -> Part:
        assigns: list[tuple[str, Word | None]] = []
        nodes = [node] if node.type == "variable_assignment" else list(node.named_children)
        for n in nodes:
            if n.type == "variable_assignment":
                assigns.append(self.assign(n))
        return self.add(Part(self.text(node), "assign", assigns=assigns), node)

    def assign(self, node: Node) -> tuple[str, Word | None]:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        value = node.child_by_field_name("value")
        if value is None:
            return (name, Word("", [Seg("lit", "", True)], "string"))
        if value.type == "array":
            w = self.word(value)
            w.segs = [Seg("opaque", w.src, False)]
            return (name, w)
        return (name, self.word(value))

    def declaration(self, node: Node, pipe_prev: Part | None) -> Part:
        words: list[Word] = []
        assigns: list[tuple[str, Word | None]] = []
        for child in node.children:
            ct = child.type
            if not child.is_named:
                if ct in ("export", "declare", "local", "readonly", "typeset", "unset", "unsetenv"):
                    words.append(Word(ct, [Seg("lit", ct, False)], "word"))
                continue
            if ct == "variable_assignment":
                name, value = self.assign(child)
                assigns.append((name, value))
                words.append(
                    Word(
                        self.text(child),
                        [Seg("lit", name + "=", False)] + (value.segs if value else []),
                        "concatenation",
                    )
                )
            elif ct in _WORDISH:
                words.append(self.word(child))
        part = Part(self.text(node), "decl", words=words, assigns=assigns, pipe_prev=pipe_prev)
        return self.add(part, node)

    def redirected(self, node: Node, pipe_prev: Part | None) -> list[Part]:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        tails: list[tuple[str, Node]] = []
        for i, child in enumerate(node.children):
            if node.field_name_for_child(i) == "redirect" or child.type in _REDIRECTS:
                redirects.extend(self.redirect(child, tails))
        made: list[Part]
        if body is not None and body.type == "command":
            part = self.command(body, pipe_prev)
            # tree-sitter-bash drops a word such as `-` between the command and a heredoc
            # (`git commit -F - <<'EOF'`): recover it, or refuse to judge the gap.
            first = next((c for c in node.children if c.start_byte >= body.end_byte), None)
            gap = self.data[body.end_byte : first.start_byte if first else body.end_byte]
            if gap.strip():
                text = gap.decode("utf-8", "surrogateescape")
                if _SAFE_GAP.fullmatch(text):
                    self.recovered.add(body.end_byte)
                    part.words.extend(Word(w, [Seg("lit", w, False)], "word") for w in text.split())
                else:
                    self.script.flags.add("gap")
            part.redirects.extend(redirects)
            part.src = (
                self.text(node).split("\n", 1)[0]
                if any(r.is_heredoc for r in redirects)
                else self.text(node)
            )
            made = [part]
        elif body is not None and body.type in ("list", "pipeline") and redirects:
            # tree-sitter-bash hangs `a && b <<EOF` / `a | b > f` on the whole list; in bash
            # the redirections belong to the last simple command.
            made = self.statement(body, pipe_prev)
            last = next((p for p in reversed(made) if p.kind == "cmd"), None)
            if last is not None:
                last.redirects.extend(redirects)
            else:
                made.append(self.add(Part(self.text(node), "redirects", redirects=redirects), node))
        else:
            made = self.statement(body, pipe_prev) if body is not None else []
            made.append(self.add(Part(self.text(node), "redirects", redirects=redirects), node))
        # `cat <<EOF | bash` / `cat <<EOF && x`: tree-sitter puts the rest inside the heredoc.
        for kind, tail in tails:
            if kind == "pipe":
                made.extend(
                    self.pipeline(list(tail.named_children), made[-1] if made else None)
                    if tail.type == "pipeline"
                    else self.statement(tail, made[-1])
                )
            else:
                made.extend(self.statement(tail))
        return made

    def command(self, node: Node, pipe_prev: Part | None) -> Part:
        words: list[Word] = []
        assigns: list[tuple[str, Word | None]] = []
        redirects: list[Redirect] = []
        pending_dollar = False
        prev_end = -1
        for child in node.children:
            ct = child.type
            if prev_end >= 0 and b"\n" in self.data[prev_end : child.start_byte]:
                gap = self.data[prev_end : child.start_byte]
                for k in range(len(gap)):
                    if gap[k] == 10 and (k == 0 or gap[k - 1] != 92):
                        self.script.flags.add("newline-word")
                        self.script.glued.append(prev_end + k)
            prev_end = child.end_byte
            if ct == "variable_assignment" and not words:
                assigns.append(self.assign(child))
            elif ct in _REDIRECTS:
                redirects.extend(self.redirect(child, None))
            elif ct == "command_name":
                inner = child.named_children
                w = self.word(inner[0]) if len(inner) == 1 else self.word_of(child, inner)
                words.append(w)
            elif ct == "$" and not child.is_named:
                pending_dollar = True  # `$"..."` (translated string): a `$` then a string
            elif child.is_named and ct != "comment":
                w = self.word(child)
                if pending_dollar:
                    w.src = "$" + w.src
                    w.node_type = "translated_string"
                words.append(w)
                pending_dollar = False
        part = Part(
            self.text(node),
            "cmd",
            words=words,
            assigns=assigns,
            redirects=redirects,
            pipe_prev=pipe_prev,
        )
        if not words:
            part.kind = "assign" if assigns else "redirects"
        return self.add(part, node)

    # -- redirects -----------------------------------------------------------------------
    def redirect(self, node: Node, tails: list[tuple[str, Node]] | None) -> list[Redirect]:
        t = node.type
        fd = ""
        op = ""
        out: list[Redirect] = []
        if t == "heredoc_redirect":
            start = ""
            body_node: Node | None = None
            for i, c in enumerate(node.children):
                ct = c.type
                fname = node.field_name_for_child(i)
                if ct in ("<<", "<<-"):
                    op = ct
                elif ct == "heredoc_start":
                    start = self.text(c)
                elif ct == "heredoc_body":
                    body_node = c
                elif ct == "file_descriptor":
                    fd = self.text(c)
                elif ct in _REDIRECTS:
                    out.extend(self.redirect(c, tails))
                elif ct in ("heredoc_end", "&&", "||", "|", "|&", ";", "&"):
                    continue
                elif ct == "ERROR":
                    self.mark_error(c)
                elif c.is_named and tails is not None:
                    tails.append(
                        (
                            "pipe"
                            if ct == "pipeline"
                            else ("pipe" if fname is None and ct == "pipeline" else "list"),
                            c,
                        )
                    )
                elif c.is_named:
                    self.statement(c)
            quoted = any(ch in start for ch in "'\"\\")
            body = self.text(body_node) if body_node is not None else ""
            if op == "<<-":
                body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
            expands = False
            if not quoted and body_node is not None:
                expands = "$" in body or "`" in body
                self.descend_substitutions(body_node)
            out.insert(0, Redirect(op or "<<", fd, None, body, quoted, expands))
            return out
        target: Word | None = None
        for c in node.children:
            ct = c.type
            if ct == "file_descriptor":
                fd = self.text(c)
            elif not c.is_named:
                op += ct
            elif ct in _WORDISH:
                target = self.word(c)
        if t == "herestring_redirect":
            op = "<<<"
        out.append(Redirect(op, fd, target))
        return out


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


def ref_parse_tree(command: str) -> Script:
    """`parse` through tree-sitter (every command the fast path does not take)."""
    data = command.encode("utf-8", "surrogateescape")
    tree = _parser().parse(data)
    root = tree.root_node
    if _too_deep(root, data):
        return Script(
            src=command, parts=[], has_error=root.has_error, flags={"too-deep"}, error_line=0
        )
    b = TreeBuilder(data)
    b.container(root, None)
    if not root.has_error and _has_gap(root, data, b.recovered):
        b.script.flags.add("gap")
    if root.has_error:
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


def _has_gap(root: Node, data: bytes, recovered: set[int]) -> bool:
    """True when some non-blank source text belongs to no token (tree-sitter dropped it)."""
    pos = 0
    stack = [root]
    while stack:
        n = stack.pop()
        if n.child_count == 0 or n.type in (
            "heredoc_body",
            "comment",
            "raw_string",
            "string_content",
            "heredoc_content",
            "word",
        ):
            if (
                n.start_byte > pos
                and data[pos : n.start_byte].strip(b" \t\n\\")
                and (pos not in recovered)
            ):
                return True
            pos = max(pos, n.end_byte)
            continue
        stack.extend(reversed(n.children))
    return bool(data[pos:].strip(b" \t\n\\"))
