"""The tree-sitter walk that turns a bash syntax tree into a `Script` (every command the fast
path does not take): statements, lists, compound commands and redirections here, the words in
`policy/parse/bashwords.py`."""

from __future__ import annotations

import re

from tree_sitter import Node

from gitsup.policy.parse.bashwords import (
    LITERAL_NODES,
    descend_substitutions,
    node_text,
    word,
    word_of,
)
from gitsup.policy.parse.script import Part, Redirect, Script, Seg, Word, piped_into

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


_WORDISH = LITERAL_NODES | {
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
    "array",
}


_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class TreeBuilder:
    """The statement walk; it is the `Walk` the word functions (`bashwords.py`) read from."""

    def __init__(self, data: bytes, command: str) -> None:
        """`data` is `command` encoded (utf-8, surrogateescape)."""
        self.data = data
        # An ASCII command's byte offsets are its character offsets: its text is sliced
        # from the string instead of decoded from the bytes.
        self.ascii = command if command.isascii() else None
        self.parts: list[Part] = []
        src = command if self.ascii is not None else data.decode("utf-8", "surrogateescape")
        self.script = Script(src, self.parts)
        # tree-sitter counts lines by newline bytes: without one, every node is on line 0.
        self.multiline = b"\n" in data
        self.depth = 0
        self.in_function = 0
        self.recovered: set[int] = set()

    # -- helpers -------------------------------------------------------------------------
    def nested(self, node: Node) -> list[Part]:
        """The commands of a substitution, one level deeper: the parts they made."""
        start = len(self.parts)
        self.depth += 1
        self.container(node, None)
        self.depth -= 1
        return self.parts[start:]

    def add(self, part: Part, node: Node) -> Part:
        part.depth = self.depth
        part.in_function = self.in_function > 0
        part.line = node.start_point[0] if self.multiline else 0
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
            self.add(Part(node_text(self, node), "arith"), node)
            return self.container(node, pipe_prev)
        if t == "compound_statement" and node.child_count and node.children[0].type == "((":
            part = self.add(Part(node_text(self, node), "arith"), node)
            descend_substitutions(self, node)
            return [part]
        if t in _CONTAINERS:
            return self.container(node, pipe_prev)
        if t == "comment":
            return []
        if t == "ERROR":
            self.mark_error(node)
            return self.container(node, pipe_prev)
        # Something this walker does not know: judged opaque (ask), still searched for denies.
        part = self.add(Part(node_text(self, node), "opaque"), node)
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
            if ct == "command":  # the commonest statement (what `statement` does with it)
                part = self.command(child, pipe_prev)
                last = [part]
                made.append(part)
            elif ct in _STATEMENTS or ct == "ERROR":
                last = self.statement(child, pipe_prev)
                made.extend(last)
            elif ct in _WORDISH:
                w = word(self, child)
                made.append(self.add(Part(w.src, "words", words=[w]), child))
            elif ct == "comment" or ct in ("heredoc_body", "heredoc_start", "heredoc_end"):
                continue
            elif ct in _REDIRECTS:
                made.append(
                    self.add(
                        Part(
                            node_text(self, child),
                            "redirects",
                            redirects=self.redirect(child, None),
                        ),
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
        name = node_text(self, name_node) if name_node is not None else ""
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
                self.script.fork_bombs.append(node_text(self, node))
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
                var = node_text(self, child)
            elif child.type in _WORDISH:
                words.append(word(self, child))
            elif child.type == "comment":
                continue
            else:
                made.extend(self.statement(child))
        part = Part(node_text(self, node).split("\n", 1)[0], "words", words=words)
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
                    words.append(word(self, c))
                else:
                    walk(c)

        walk(node)
        return self.add(Part(node_text(self, node), "test", words=words, pipe_prev=pipe_prev), node)

    def assignment(self, node: Node) -> Part:
        assigns: list[tuple[str, Word | None]] = []
        nodes = [node] if node.type == "variable_assignment" else list(node.named_children)
        for n in nodes:
            if n.type == "variable_assignment":
                assigns.append(self.assign(n))
        return self.add(Part(node_text(self, node), "assign", assigns=assigns), node)

    def assign(self, node: Node) -> tuple[str, Word | None]:
        name_node = node.child_by_field_name("name")
        name = node_text(self, name_node) if name_node is not None else ""
        value = node.child_by_field_name("value")
        if value is None:
            return (name, Word("", [Seg("lit", "", True)], "string"))
        if value.type == "array":
            w = word(self, value)
            w.segs = [Seg("opaque", w.src, False)]
            return (name, w)
        return (name, word(self, value))

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
                        node_text(self, child),
                        [Seg("lit", name + "=", False)] + (value.segs if value else []),
                        "concatenation",
                    )
                )
            elif ct in _WORDISH:
                words.append(word(self, child))
        part = Part(
            node_text(self, node), "decl", words=words, assigns=assigns, pipe_prev=pipe_prev
        )
        return self.add(part, node)

    def redirected(self, node: Node, pipe_prev: Part | None) -> list[Part]:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        tails: list[tuple[str, Node]] = []
        children = node.children
        heredoc = False
        for i, child in enumerate(children):
            ct = child.type
            if ct in _REDIRECTS or node.field_name_for_child(i) == "redirect":
                if ct == "heredoc_redirect":
                    heredoc = True
                redirects.extend(self.redirect(child, tails))
        made: list[Part]
        if body is not None and body.type == "command":
            part = self.command(body, pipe_prev)
            # tree-sitter-bash drops a word such as `-` between the command and a heredoc
            # (`git commit -F - <<'EOF'`): recover it, or refuse to judge the gap.
            body_end = body.end_byte
            gap_end = body_end
            for c in children:
                if c.start_byte >= body_end:
                    gap_end = c.start_byte
                    break
            gap = self.data[body_end:gap_end]
            if gap.strip():
                text = gap.decode("utf-8", "surrogateescape")
                if _SAFE_GAP.fullmatch(text):
                    self.recovered.add(body.end_byte)
                    part.words.extend(Word(w, [Seg("lit", w, False)], "word") for w in text.split())
                else:
                    self.script.flags.add("gap")
            part.redirects.extend(redirects)
            src = node_text(self, node)
            part.src = (
                src.split("\n", 1)[0] if heredoc or any(r.is_heredoc for r in redirects) else src
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
                made.append(
                    self.add(Part(node_text(self, node), "redirects", redirects=redirects), node)
                )
        else:
            made = self.statement(body, pipe_prev) if body is not None else []
            made.append(
                self.add(Part(node_text(self, node), "redirects", redirects=redirects), node)
            )
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
        multiline = self.multiline
        asc = self.ascii
        for child in node.children:
            ct = child.type
            if multiline:
                if prev_end >= 0 and b"\n" in self.data[prev_end : child.start_byte]:
                    gap = self.data[prev_end : child.start_byte]
                    for k in range(len(gap)):
                        if gap[k] == 10 and (k == 0 or gap[k - 1] != 92):
                            self.script.flags.add("newline-word")
                            self.script.glued.append(prev_end + k)
                prev_end = child.end_byte
            if ct == "word" and asc is not None and not pending_dollar and not child.child_count:
                # the commonest argument, a bare word of one literal segment (as `word` makes it)
                text = asc[child.start_byte : child.end_byte]
                if "\\" not in text:
                    words.append(Word(text, [Seg("lit", text, False)], "word"))
                    continue
            if ct == "variable_assignment" and not words:
                assigns.append(self.assign(child))
            elif ct in _REDIRECTS:
                redirects.extend(self.redirect(child, None))
            elif ct == "command_name":
                inner = child.named_children
                if len(inner) == 1:
                    name = inner[0]
                    if asc is not None and name.type == "word" and not name.child_count:
                        text = asc[name.start_byte : name.end_byte]
                        if "\\" not in text:
                            words.append(Word(text, [Seg("lit", text, False)], "word"))
                            continue
                    words.append(word(self, name))
                else:
                    words.append(word_of(self, child, inner))
            elif ct == "$" and not child.is_named:
                pending_dollar = True  # `$"..."` (translated string): a `$` then a string
            elif child.is_named and ct != "comment":
                w = word(self, child)
                if pending_dollar:
                    w.src = "$" + w.src
                    w.node_type = "translated_string"
                words.append(w)
                pending_dollar = False
        part = Part(
            node_text(self, node),
            "cmd" if words else "assign" if assigns else "redirects",
            words,
            assigns,
            redirects,
            False,
            pipe_prev,
            self.depth,
            self.in_function > 0,
            node.start_point[0] if self.multiline else 0,
        )
        self.parts.append(part)
        return part

    # -- redirects -----------------------------------------------------------------------
    def redirect(self, node: Node, tails: list[tuple[str, Node]] | None) -> list[Redirect]:
        t = node.type
        fd = ""
        op = ""
        out: list[Redirect] = []
        if t == "heredoc_redirect":
            start = ""
            body_node: Node | None = None
            for c in node.children:
                ct = c.type
                if ct in ("<<", "<<-"):
                    op = ct
                elif ct == "heredoc_start":
                    start = node_text(self, c)
                elif ct == "heredoc_body":
                    body_node = c
                elif ct == "file_descriptor":
                    fd = node_text(self, c)
                elif ct in _REDIRECTS:
                    out.extend(self.redirect(c, tails))
                elif ct in ("heredoc_end", "&&", "||", "|", "|&", ";", "&"):
                    continue
                elif ct == "ERROR":
                    self.mark_error(c)
                elif c.is_named and tails is not None:
                    tails.append(("pipe" if ct == "pipeline" else "list", c))
                elif c.is_named:
                    self.statement(c)
            quoted = "'" in start or '"' in start or "\\" in start
            body = node_text(self, body_node) if body_node is not None else ""
            if op == "<<-":
                body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
            expands = False
            if not quoted and body_node is not None:
                expands = "$" in body or "`" in body
                descend_substitutions(self, body_node)
            out.insert(0, Redirect(op or "<<", fd, None, body, quoted, expands))
            return out
        target: Word | None = None
        for c in node.children:
            ct = c.type
            if ct == "file_descriptor":
                fd = node_text(self, c)
            elif not c.is_named:
                op += ct
            elif ct in _WORDISH:
                target = word(self, c)
        if t == "herestring_redirect":
            op = "<<<"
        out.append(Redirect(op, fd, target))
        return out
