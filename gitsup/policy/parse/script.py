"""The parsed form of a shell string (docs/policy.md, "Decision order", step 1): a `Script` of simple commands
(`Part`s) whose words are `Seg`ments, as `policy/parse/parser.py` builds it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

SegKind = Literal["lit", "var", "subst", "proc", "arith", "opaque"]
PartKind = Literal["cmd", "decl", "assign", "test", "redirects", "words", "arith", "opaque"]


@dataclass(slots=True)
class Seg:
    """One piece of a word. `lit` text is uniformly quoted or unquoted."""

    kind: SegKind
    text: str
    quoted: bool
    op: str = ""  # var: ${X<op>arg}
    arg: str | None = None  # var: literal operand of the operator, None if not literal
    inner: list[Part] | None = None  # subst/proc: the parts of the inner script


@dataclass(slots=True)
class Word:
    src: str
    segs: list[Seg]
    node_type: str
    # The word's one field when it is literal text without brace or tilde expansion, computed
    # on first use by `normalise.Expander.word` (words are not changed after parsing).
    one_field: str | bool | None = dataclasses.field(default=False, compare=False, repr=False)

    @property
    def expands(self) -> bool:
        """True when the word has an unresolved expansion ($VAR, $( ), `..`, <( ), $(( )))."""
        if isinstance(self.one_field, str):
            return False
        return any(s.kind != "lit" for s in self.segs)

    @property
    def plain(self) -> bool:
        """An unquoted, unescaped bare word."""
        return self.node_type == "word" and len(self.segs) == 1 and not self.segs[0].quoted


@dataclass(slots=True)
class Redirect:
    op: str
    fd: str
    target: Word | None
    body: str | None = None  # heredoc body (text) or herestring word (see `target`)
    quoted: bool = False  # heredoc delimiter quoted
    expands: bool = False  # unquoted heredoc body containing $ or `

    @property
    def is_heredoc(self) -> bool:
        return self.op in ("<<", "<<-")


@dataclass(slots=True, init=False)
class Part:
    """A simple command (or a piece of structure that is judged like one)."""

    src: str
    kind: PartKind
    words: list[Word]
    assigns: list[tuple[str, Word | None]]
    redirects: list[Redirect]
    background: bool
    pipe_prev: Part | None
    depth: int  # nesting inside substitutions
    in_function: bool
    line: int
    # The plain argument vector (`plain_argv`), computed on first use (parts are not changed
    # after parsing): a list, None when the part has none, False before the first use.
    argv: list[str] | bool | None = field(compare=False, repr=False)

    def __init__(
        self,
        src: str,
        kind: PartKind,
        words: list[Word] | None = None,
        assigns: list[tuple[str, Word | None]] | None = None,
        redirects: list[Redirect] | None = None,
        background: bool = False,
        pipe_prev: Part | None = None,
        depth: int = 0,
        in_function: bool = False,
        line: int = 0,
        argv: list[str] | bool | None = False,
    ) -> None:
        # written out (not generated): the parser builds one per simple command, and an empty
        # list from a literal costs less than from a default factory
        self.src = src
        self.kind = kind
        self.words = [] if words is None else words
        self.assigns = [] if assigns is None else assigns
        self.redirects = [] if redirects is None else redirects
        self.background = background
        self.pipe_prev = pipe_prev
        self.depth = depth
        self.in_function = in_function
        self.line = line
        self.argv = argv


@dataclass(slots=True, init=False)
class Script:
    src: str
    parts: list[Part]
    has_error: bool
    error_line: int  # first line (0-based) with a parse error
    functions: dict[str, list[Part]]
    fork_bombs: list[str]
    flags: set[str]
    # byte offsets of unescaped newlines tree-sitter kept inside one command (flag newline-word)
    glued: list[int]

    def __init__(
        self,
        src: str,
        parts: list[Part],
        has_error: bool = False,
        error_line: int = -1,
        functions: dict[str, list[Part]] | None = None,
        fork_bombs: list[str] | None = None,
        flags: set[str] | None = None,
        glued: list[int] | None = None,
    ) -> None:
        # written out (not generated), like `Part.__init__`
        self.src = src
        self.parts = parts
        self.has_error = has_error
        self.error_line = error_line
        self.functions = {} if functions is None else functions
        self.fork_bombs = [] if fork_bombs is None else fork_bombs
        self.flags = set() if flags is None else flags
        self.glued = [] if glued is None else glued


def literal_field(word: Word) -> str | None:
    """The word's one field when it is literal text without brace or tilde expansion (kept on
    the word), else None."""
    one = word.one_field
    if one is False:
        texts: list[str] = []
        for s in word.segs:
            if s.kind != "lit" or (not s.quoted and ("{" in s.text or "~" in s.text)):
                one = None
                break
            texts.append(s.text)
        else:
            one = texts[0] if len(texts) == 1 else "".join(texts)
        word.one_field = one
    return one  # type: ignore[return-value]


def plain_argv(part: Part) -> list[str] | None:
    """The argument vector of a simple command without redirection or assignment whose every
    word is one literal field, or None. Computed once per part: the deny and the allow steps
    share it instead of each deriving it from the words."""
    argv = part.argv
    if argv is False:
        argv = None
        if part.kind == "cmd" and part.words and not part.redirects and not part.assigns:
            out: list[str] = []
            for w in part.words:
                one = w.one_field
                if one.__class__ is not str:
                    one = literal_field(w)
                    if one is None:
                        break
                out.append(one)
            else:
                argv = out
        part.argv = argv
    return argv  # type: ignore[return-value]


_ANSI = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
    "E": "\x1b",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def decode_ansi_c(body: str) -> str:
    """Decode the inside of a bash `$'...'` string."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _ANSI:
            out.append(_ANSI[e])
        elif e == "x" or e == "u" or e == "U":
            limit = {"x": 2, "u": 4, "U": 8}[e]
            j = i
            while j < n and j - i < limit and body[j] in "0123456789abcdefABCDEF":
                j += 1
            if j == i:
                out.append("\\" + e)
            else:
                code = int(body[i:j], 16)
                out.append(chr(code) if code < 0x110000 else "\ufffd")
                i = j
        elif e in "01234567":
            j = i - 1
            while j < n and j - (i - 1) < 3 and body[j] in "01234567":
                j += 1
            out.append(chr(int(body[i - 1 : j], 8) & 0xFF))
            i = j
        elif e == "c" and i < n:
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append("\\" + e)
    return "".join(out)


def split_glued(script: Script) -> str | None:
    """The script's text with a `;` before every newline tree-sitter glued into a command (bash
    ends the command there, so the text means the same to bash), or None when there is none."""
    if not script.glued:
        return None
    data = script.src.encode("utf-8", "surrogateescape")
    for pos in sorted(set(script.glued), reverse=True):
        data = data[:pos] + b";" + data[pos:]
    return data.decode("utf-8", "surrogateescape")


def piped_into(p: Part, inner: list[Part]) -> bool:
    return any(q.pipe_prev is p for q in inner)


def dq_unescape(raw: bytes) -> str:
    text = raw.decode("utf-8", "surrogateescape")
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def cat_heredoc(inner: list[Part]) -> str | None:
    """`$(cat <<'EOF' ... EOF)`: the whole body is `cat` of a quoted heredoc: literal text."""
    if len(inner) != 1:
        return None
    p = inner[0]
    if p.kind != "cmd" or p.assigns or len(p.words) != 1 or p.words[0].src != "cat":
        return None
    if not p.words[0].plain or len(p.redirects) != 1:
        return None
    r = p.redirects[0]
    if not r.is_heredoc or not r.quoted or r.body is None:
        return None
    return r.body.rstrip("\n")
