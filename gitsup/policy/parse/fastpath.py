"""The plain-command fast path: a `Script` for simple commands without running tree-sitter."""

from __future__ import annotations

import functools
import re

from gitsup.policy.parse.script import Part, Redirect, Script, Seg, Word

# The fast path: a one-line command made only of simple commands joined by `&&`, `||`, `;`
# or `|`, whose words are each one bare word of inert characters, one '...' string or one
# "..." string without expansions or escapes, is split without tree-sitter. The scanner
# accepts nothing else (any other character, adjacency of two tokens, a reserved word, an
# assignment or a declaration in command position sends the command to tree-sitter), and
# tests/policy/test_fastparse.py proves it builds the same `Script` tree-sitter would.
_FAST_TOKEN = re.compile(
    r"[ \t]*((&&|\|\||[|;])|([A-Za-z0-9_./=+:,-]+)|'([^'\n]*)'|\"([^\"$`\\!\n]*)\"|(#[^\n]*)\Z|\Z)"
)


_FAST_NUMBER = re.compile(r"-?[0-9]+")


_FAST_BARE = re.compile(r"[A-Za-z0-9_./=+:,\- \t]*")


_FAST_BARE_OPS = re.compile(r"[A-Za-z0-9_./=+:,\-&|; \t]*")


_FAST_OPS = frozenset({"&&", "||", "|", ";"})


_FAST_NAME = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")


_FAST_NOT_FIRST = frozenset(
    {
        "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
        "esac", "in", "function", "select", "time", "coproc", "declare", "export", "local",
        "readonly", "typeset", "unset", "unsetenv",
    }
)  # fmt: skip


@functools.lru_cache(maxsize=256)  # the answers for a few program names
def _may_lead(src: str) -> bool:
    """A bare first word that may start a simple command (no reserved word, no assignment)."""
    return src not in _FAST_NOT_FIRST and _FAST_NAME.fullmatch(src) is not None


# Words by their source text: a word of the fast path is fully determined by its text (bare,
# '...' or "..." without expansions) and words are not changed after parsing, so scripts share
# them. Bounded; cleared when full.
_WORDS: dict[str, Word] = {}
_WORDS_LIMIT = 256


def _remember(word: Word) -> Word:
    if len(_WORDS) >= _WORDS_LIMIT:
        _WORDS.clear()
    _WORDS[word.src] = word
    return word


def _bare_word(t: str) -> Word | None:
    """A bare word as tree-sitter types it (`word`, or `number` for its number token); None
    for one it parses otherwise."""
    word = _WORDS.get(t)
    if word is not None:
        return word
    if t[0] == "=":
        return None  # tree-sitter drops `==` words
    kind = "word"
    if t[t[0] == "-" :][:1].isdigit():  # tree-sitter's `number` token
        if not _FAST_NUMBER.fullmatch(t):
            return None
        kind = "number"
    return _remember(Word(t, [Seg("lit", t, False)], kind, t))


def fast_parse(command: str) -> Script | None:
    """The `Script` of a plain command (see `_FAST_TOKEN`), or None when it is not plain."""
    if _FAST_BARE.fullmatch(command):
        return _fast_bare(command)
    if _FAST_BARE_OPS.fullmatch(command):
        fast = fast_ops(command)
        if fast is not None:
            return fast
    elif "\n" in command:
        # No token holds a newline (only the message form below does).
        return _fast_message(command) if command.endswith(')"') else None
    elif not ("'" in command or '"' in command or "#" in command):
        # Outside quotes and comments the tokens hold only the characters of `_FAST_BARE_OPS`,
        # so without them one of the others is unmatchable.
        return None
    k = command.find("#")
    if k > 0 and command[k - 1] in " \t":
        # Bare words and operators, then a comment (`cmd args # note`): the split of the text
        # before the comment, which ends the last part just as the token scanner would end it.
        head = command[:k]
        if _FAST_BARE.fullmatch(head):
            fast = _fast_bare(head)
        elif _FAST_BARE_OPS.fullmatch(head):
            fast = fast_ops(head)
        else:
            fast = None
        if fast is not None:
            fast.src = command
            return fast
    parts: list[Part] = []
    script = Script(src=command, parts=parts)
    words: list[Word] = []
    fields: list[str] = []  # each word's one field (the text a fast-path word stands for)
    start = 0
    end = 0
    seen = 0  # the operators so far (`_end_command`)
    pos = 0
    n = len(command)
    match = _FAST_TOKEN.match
    while True:
        m = match(command, pos)
        if m is None:
            return None
        tok, op, bare, raw, dq, comment = m.groups()
        tok_start = m.start(1)
        if words and tok_start == end and op is None and tok:
            return None  # two tokens glued together: a concatenation
        if not tok or op is not None or comment is not None:
            if not words:
                return None
            first = words[0]
            if first.node_type in ("word", "number") and not _may_lead(first.src):
                return None
            seen = _end_command(parts, command[start:end], words, fields, op, seen)
            if seen < 0:
                return None
            words = []
            fields = []
            if op is None:
                return script if m.end() == n else None
            pos = m.end()
            continue
        if not words:
            start = tok_start
        end = m.end()
        if bare is not None:
            word = _bare_word(bare)
            if word is None:
                return None
            words.append(word)
            fields.append(bare)
        else:
            word = _WORDS.get(tok)
            if word is None:
                if raw is not None:
                    word = _remember(Word(tok, [Seg("lit", raw, True)], "raw_string", raw))
                else:
                    word = _remember(Word(tok, [Seg("lit", dq, True)], "string", dq))
            words.append(word)
            fields.append(raw if raw is not None else dq)
        pos = end


def _fast_bare(command: str) -> Script | None:
    """`fast_parse` of one simple command of bare words (the commonest case, split at once)."""
    texts = command.split()
    if not texts or not _may_lead(texts[0]):
        return None
    get = _WORDS.get
    words: list[Word] = []
    for t in texts:
        word = get(t) or _bare_word(t)
        if word is None:
            return None
        words.append(word)
    # a bare word's one field is its text: the plain argument vector is the split itself
    return Script(command, [Part(command.strip(" \t"), "cmd", words, argv=texts)])


def fast_ops(command: str) -> Script | None:
    """`fast_parse` of bare words and operators each standing apart (`a -x && b | c`), split
    at whitespace; None when an operator touches a word or another operator."""
    parts: list[Part] = []
    words: list[Word] = []
    start = end = pos = 0
    seen = 0  # the operators so far (`_end_command`)
    for t in command.split():
        pos = command.find(t, pos)
        if t in _FAST_OPS:
            if not words or not _may_lead(words[0].src):
                return None
            # bare words: each one's field is its text
            seen = _end_command(parts, command[start:end], words, [w.src for w in words], t, seen)
            if seen < 0:
                return None
            words = []
            pos += len(t)
            continue
        if "&" in t or "|" in t or ";" in t:
            return None  # an operator glued to a word, or `&`
        word = _bare_word(t)
        if word is None:
            return None
        if not words:
            start = pos
        pos += len(t)
        end = pos
        words.append(word)
    if not words or not _may_lead(words[0].src):
        return None
    _end_command(parts, command[start:end], words, [w.src for w in words], None, seen)
    return Script(command, parts)


# What `_end_command` has seen: a pipe, a chaining operator (`&&`, `||`), the last one a pipe.
_PIPED = 1
_CHAINED = 2
_PIPE_NEXT = 4


def _end_command(
    parts: list[Part], src: str, words: list[Word], argv: list[str], op: str | None, seen: int
) -> int:
    """Append the simple command `words` (its text `src`, its fields `argv`), piped from the
    last part when the operator before it was `|`, and ended by `op` (None at the end); return
    what is seen after `op`, or -1 for pipes and chaining mixed (`a | b && c`): tree-sitter
    nests those its own way, the fast path leaves them."""
    parts.append(
        Part(src, "cmd", words, pipe_prev=parts[-1] if seen & _PIPE_NEXT else None, argv=argv)
    )
    if op is None:
        return seen
    if op == "|":
        seen |= _PIPED | _PIPE_NEXT
    else:
        seen = (seen & ~_PIPE_NEXT) | (0 if op == ";" else _CHAINED)
    return -1 if seen & _PIPED and seen & _CHAINED else seen


# The message form: bare words, then one "$(cat <<'EOF' ... EOF)" word holding a quoted heredoc
# (how agents write a commit message): `git commit -m "$(cat <<'EOF'\n...\nEOF\n)"`. Its
# body is literal text; tree-sitter builds the `cat` part (depth 1) and the command whose last
# word is that text. Only bodies of the characters below are taken (tests/policy/
# test_fastparse.py compares the result with tree-sitter's over generated messages).
_FAST_MESSAGE = re.compile(
    r"((?:[A-Za-z0-9_./=+:,-]+ )+)\"\$\(cat <<'([A-Za-z_][A-Za-z0-9_]*)'\n((?:[^\n]*\n)*?)\2\n\)\""
)
_FAST_MESSAGE_BODY = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f`$\\\"]*")


def _fast_message(command: str) -> Script | None:
    """`fast_parse` of the message form, or None."""
    m = _FAST_MESSAGE.fullmatch(command)
    if m is None:
        return None
    prefix, delim, body = m.groups()
    if not _FAST_MESSAGE_BODY.fullmatch(body) or delim in body:
        return None  # a character we do not take, or the delimiter's text in the body
    if body[:1] in (" ", "\t", "\n"):
        return None  # tree-sitter drops the blanks that start the body
    words: list[Word] = []
    for t in prefix.split():
        word = _bare_word(t)
        if word is None:
            return None
        words.append(word)
    if not _may_lead(words[0].src) or (cat := _bare_word("cat")) is None:
        return None
    text = body.rstrip("\n")
    words.append(Word(command[len(prefix) :], [Seg("lit", text, True)], "string", text))
    heredoc = Redirect("<<", "", None, body, quoted=True, expands=False)
    inner = Part(f"cat <<'{delim}'", "cmd", words=[cat], redirects=[heredoc], depth=1)
    return Script(src=command, parts=[inner, Part(command, "cmd", words=words)])
