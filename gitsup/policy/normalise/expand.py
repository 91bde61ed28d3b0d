"""Static normalisation (docs/policy.md, "Decision order", step 3) and lexical paths.

Words become argument strings after brace expansion, tilde expansion, literal variables,
`$IFS` as a separator, literal command substitutions, and quote removal. Anything that
cannot be known statically becomes `UNKNOWN`, which matches no rule.
"""

from __future__ import annotations

import functools
import itertools
import posixpath
from collections.abc import Callable, Mapping, Sequence

from gitsup.policy.parse.script import Part, Seg, Word, literal_field

UNKNOWN = "\x00?"  # an argument (or piece) that cannot be known without running something
MAX_ALTERNATIVES = 16
MAX_BRACE = 64

# A resolver for command substitutions: inner parts -> literal stdout, or None.
SubstResolver = Callable[[list[Part]], "str | None"]

_Token = tuple[str, bool] | Seg  # (char, unquoted) or an expansion segment


# -- brace expansion -------------------------------------------------------------------------
def _tokens(segs: Sequence[Seg]) -> list[_Token]:
    out: list[_Token] = []
    for s in segs:
        if s.kind == "lit":
            out.extend((c, not s.quoted) for c in s.text)
        else:
            out.append(s)
    return out


def _is(tok: _Token, ch: str) -> bool:
    return isinstance(tok, tuple) and tok[1] and tok[0] == ch


def _brace(tokens: list[_Token], limit: int) -> list[list[_Token]]:
    """Expand the first brace group (recursively); `{a,b}` and `{1..3}` / `{a..c}` forms."""
    n = len(tokens)
    for i in range(n):
        if not _is(tokens[i], "{"):
            continue
        depth = 0
        commas: list[int] = []
        close = -1
        for j in range(i + 1, n):
            t = tokens[j]
            if _is(t, "{"):
                depth += 1
            elif _is(t, "}"):
                if depth == 0:
                    close = j
                    break
                depth -= 1
            elif _is(t, ",") and depth == 0:
                commas.append(j)
        if close < 0:
            continue
        pre, post = tokens[:i], tokens[close + 1 :]
        choices: list[list[_Token]] | None
        if commas:
            bounds = [i, *commas, close]
            choices = [tokens[bounds[k] + 1 : bounds[k + 1]] for k in range(len(bounds) - 1)]
        else:
            choices = _sequence(tokens[i + 1 : close])
            if choices is None:
                continue
        out: list[list[_Token]] = []
        for choice in choices:
            for rest in _brace(pre + choice + post, limit):
                out.append(rest)
                if len(out) >= limit:
                    return out
        return out
    return [tokens]


def _sequence(inner: list[_Token]) -> list[list[_Token]] | None:
    if not all(isinstance(t, tuple) and t[1] for t in inner):
        return None
    text = "".join(t[0] for t in inner if isinstance(t, tuple))
    pieces = text.split("..")
    if len(pieces) not in (2, 3):
        return None
    a, b = pieces[0], pieces[1]
    step = int(pieces[2]) if len(pieces) == 3 and pieces[2].lstrip("-").isdigit() else 1
    step = abs(step) or 1
    values: list[str]
    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
        x, y = int(a), int(b)
        rng = range(x, y + 1, step) if x <= y else range(x, y - 1, -step)
        values = [str(v) for v in itertools.islice(rng, MAX_BRACE)]
    elif len(a) == 1 and len(b) == 1:
        x, y = ord(a), ord(b)
        rng = range(x, y + 1, step) if x <= y else range(x, y - 1, -step)
        values = [chr(v) for v in itertools.islice(rng, MAX_BRACE)]
    else:
        return None
    return [[(c, False) for c in v] for v in values]


# -- expansion -------------------------------------------------------------------------------
class Expander:
    """Evaluates words in the normalised form used for deny detection."""

    def __init__(
        self,
        variables: Mapping[str, Sequence[str]],
        home: str,
        cwd: str,
        subst: SubstResolver | None = None,
    ) -> None:
        self.variables = variables
        self.home = home
        self.cwd = cwd
        self.subst = subst

    def var_values(self, seg: Seg) -> list[str]:
        name = seg.text
        values: list[str] = list(self.variables.get(name, ()))
        if name == "HOME":
            values.append(self.home)
        elif name == "PWD":
            values.append(self.cwd)
        elif name == "IFS" and not values:
            values.append(" ")
        if seg.op and seg.arg is not None and seg.op.lstrip(":") in ("-", "="):
            values.append(seg.arg)
        elif seg.op and seg.op.lstrip(":") in ("-", "=") and seg.arg is None:
            values.append(UNKNOWN)
        elif seg.op and seg.op.lstrip(":") not in ("-", "="):
            return [UNKNOWN]  # ${x#..}, ${x/..}: not evaluated
        if not values:
            values.append(UNKNOWN)
        # dict.fromkeys keeps order and drops duplicates
        return list(dict.fromkeys(values))[:MAX_ALTERNATIVES]

    def word(self, word: Word) -> list[list[str]]:
        """Alternatives, each a list of fields (a word can split into several or none)."""
        # fast path: literal text without brace or tilde expansion is one field
        one = word.one_field
        if one.__class__ is not str:
            one = literal_field(word) if one is False else None
        if one is not None:
            return [[one]]
        results: list[list[str]] = []
        for toks in _brace(_tokens(word.segs), MAX_BRACE):
            for fields in self._fields(toks):
                results.append(fields)
                if len(results) >= MAX_ALTERNATIVES * 4:
                    return results
        return results

    def _fields(self, toks: list[_Token]) -> list[list[str]]:
        # Each alternative: (fields so far, current field or None when between fields)
        alts: list[tuple[list[str], str | None]] = [([], None)]
        first = True
        for tok in toks:
            if isinstance(tok, tuple):
                ch, unq = tok
                if first and unq and ch == "~":
                    alts = [(f, (cur or "") + "\x01TILDE") for f, cur in alts]
                else:
                    alts = [(f, (cur or "") + ch) for f, cur in alts]
                first = False
                continue
            first = False
            values: list[str]
            if tok.kind == "var":
                values = self.var_values(tok)
            elif tok.kind == "subst":
                res = self.subst(tok.inner or []) if self.subst is not None else None
                values = [res.rstrip("\n") if res is not None else UNKNOWN]
            elif tok.kind == "proc":
                values = ["/dev/fd/63"]
            else:
                values = [UNKNOWN]
            new: list[tuple[list[str], str | None]] = []
            for f, cur in alts:
                for v in values:
                    if tok.quoted or v == UNKNOWN:
                        new.append((f, (cur or "") + v))
                        continue
                    pieces = v.split(None) if v.strip() else []
                    lead = bool(v) and v[0].isspace()
                    trail = bool(v) and v[-1].isspace()
                    ff = list(f)
                    c: str | None = cur
                    if not pieces:
                        if v and c is not None:
                            ff.append(c)
                            c = None
                        new.append((ff, c))
                        continue
                    if lead and c is not None:
                        ff.append(c)
                        c = None
                    for k, piece in enumerate(pieces):
                        if k == 0:
                            c = (c or "") + piece
                        else:
                            ff.append(c or "")
                            c = piece
                    if trail:
                        ff.append(c or "")
                        c = None
                    new.append((ff, c))
            alts = new[:MAX_ALTERNATIVES]
        out: list[list[str]] = []
        for f, cur in alts:
            fields = [*f, cur] if cur is not None else f
            out.append([self._tilde(x) for x in fields])
        if not toks:
            return [[""]]
        return out

    def _tilde(self, field: str) -> str:
        if field.startswith("\x01TILDE"):
            rest = field[len("\x01TILDE") :]
            if rest == "" or rest.startswith("/"):
                return self.home + rest
            user, sep, tail = rest.partition("/")
            if user == "+":  # ~+ is $PWD
                return self.cwd + sep + tail
            if user[:1] in ("+", "-"):  # ~- ($OLDPWD) and directory-stack forms: unknown
                return UNKNOWN + sep + tail
            user, sep, tail = rest.partition("/")
            if user and all(c.isalnum() or c in "._-" for c in user):
                base = "/root" if user == "root" else "/home/" + user
                return base + sep + tail
            return "~" + rest
        return field

    def argvs(self, words: Sequence[Word]) -> list[list[str]]:
        """Candidate argument vectors (capped) for a list of words."""
        plain: list[str] = []
        for w in words:  # the commonest case: every word's one literal field is known
            one = w.one_field
            if one.__class__ is not str:
                break
            plain.append(one)
        else:
            return [plain]
        per_word = [self.word(w) for w in words]
        simple: list[str] = []
        for alts in per_word:  # the common case: every word is one field
            if len(alts) != 1 or len(alts[0]) != 1:
                break
            simple.append(alts[0][0])
        else:
            return [simple]
        out: list[list[str]] = []
        for combo in itertools.product(*per_word):
            out.append([f for fields in combo for f in fields])
            if len(out) >= MAX_ALTERNATIVES:
                break
        return out

    def value(self, word: Word) -> str:
        """The first alternative, fields joined by a space."""
        alts = self.word(word)
        return " ".join(alts[0]) if alts else ""


def expand_braces_text(text: str) -> list[str]:
    """Brace-expand unquoted text (no other expansion)."""
    out: list[str] = []
    for toks in _brace([(c, True) for c in text], MAX_BRACE):
        out.append("".join(t[0] for t in toks if isinstance(t, tuple)))
    return out


def literal_text(word: Word) -> str | None:
    """The word's value when it has no expansion at all (plain judgement), brace-free."""
    if word.expands:
        return None
    return "".join(s.text for s in word.segs)


# -- paths -----------------------------------------------------------------------------------
def resolve(path: str, cwd: str, home: str | None = None) -> str:
    """Lexical normalisation against `cwd` (and `~` when `home` is given)."""
    if home is not None and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    if not path.startswith("/"):
        path = cwd.rstrip("/") + "/" + path
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


def is_ancestor(path: str, of: str) -> bool:
    """True when `path` is a strict ancestor of `of`."""
    if path == of:
        return False
    return inside(of, path)


def basename(prog: str) -> str:
    if "/" not in prog:
        return prog
    return prog.rstrip("/").rsplit("/", 1)[-1]


@functools.lru_cache(maxsize=64)  # the few worktrees judged
def normal_form(path: str) -> str:
    """`posixpath.normpath(path)`, remembered (a classifier question asks it of its worktree)."""
    return posixpath.normpath(path)


def has_glob(text: str) -> bool:
    return "*" in text or "?" in text or "[" in text


def may_match(component: str, name: str, *, dotglob: bool = False) -> bool:
    """Could the path component `component` (a bash glob, or plain text) name `name`? Leans
    toward yes: bracket expressions and extglob are taken to match anything of the right
    kind; a leading `.` must be matched explicitly unless dotglob is on (bash rules)."""
    if not has_glob(component) and "(" not in component:
        return component == name
    if name.startswith(".") and not dotglob and not component.startswith((".", "[")):
        return False
    if "(" in component:
        return True
    import fnmatch

    return fnmatch.fnmatchcase(name, component.replace("[^", "[!"))


def names_git_dir(path: str, *, dotglob: bool = False) -> bool:
    """True when some component of `path` is (or, as a glob, may be) `.git`."""
    return any(
        c == ".git" or (c and may_match(c, ".git", dotglob=dotglob)) for c in path.split("/")
    )
