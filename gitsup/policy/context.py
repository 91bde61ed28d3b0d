"""State carried through one classification: literal variables, files written with literal
content, downloaded files, whether HEAD is protected, and literal data flowing through pipes."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from gitsup.policy.config import Policy
from gitsup.policy.deny_names import VARIABLE_SETTERS
from gitsup.policy.normalise import UNKNOWN, Expander, basename, resolve
from gitsup.policy.parse import Part, decode_ansi_c

MAX_DEPTH = 8  # nesting of shell payloads (bash -c 'bash -c ...')
_PRINTF_DIRECTIVE = re.compile(r"%(?:%|[-+ #0]*\d*(?:\.\d+)?[sbdiouxXcq])")


@dataclass(slots=True, init=False)
class ScanState:
    policy: Policy
    worktree: str
    home: str
    variables: dict[str, list[str]]
    files: dict[str, str]  # path -> literal content
    downloaded: set[str]
    head_protected: bool
    git_aliases: dict[str, list[str]]
    depth: int
    dotglob: bool  # `*` may match dot files (shopt -s dotglob, GLOBIGNORE)

    _expander: Expander | None

    def __init__(self, policy: Policy, worktree: str, home: str, dotglob: bool = False) -> None:
        # written out (not generated): one state per question, built without default factories
        self.policy = policy
        self.worktree = worktree
        self.home = home
        self.variables = {}
        self.files = {}
        self.downloaded = set()
        self.head_protected = False
        self.git_aliases = {}
        self.depth = 0
        self.dotglob = dotglob
        self._expander = None

    def expander(self) -> Expander:
        """One expander per state (it reads `variables` live, so it never goes stale)."""
        ex = self._expander
        if ex is None:
            ex = self._expander = Expander(
                self.variables, self.home, self.worktree, self.subst_output
            )
        return ex

    def path(self, value: str) -> str:
        return resolve(value, self.worktree, self.home)

    # -- literal data --------------------------------------------------------------------
    def collect_variables(self, parts: list[Part]) -> None:
        """Literal values assigned anywhere in the script's `parts` (order is not evaluated)."""
        ex = self.expander()
        for part in parts:
            for name, word in part.assigns:
                values = self.variables.setdefault(name, [])
                if word is None:  # a for-loop variable: every listed word
                    for w in part.words:
                        for alt in ex.word(w):
                            for v in alt:
                                if v not in values and UNKNOWN not in v:
                                    values.append(v)
                    continue
                for alt in ex.word(word):
                    v = " ".join(alt)
                    if UNKNOWN not in v and v not in values:
                        values.append(v)
            if part.kind != "cmd" or not part.words or part.words[0].src not in VARIABLE_SETTERS:
                continue
            # `printf -v X FORMAT ARGS`
            if len(part.words) >= 4 and part.words[0].src == "printf" and part.words[1].src == "-v":
                for argv in ex.argvs(part.words):
                    if len(argv) >= 4 and UNKNOWN not in argv[3]:
                        value = _printf(decode_ansi_c(argv[3]), argv[4:])
                        self.variables.setdefault(argv[2], []).append(value)
            # `read X <<< literal`
            if part.words[0].src == "read":
                data = self.stdin_of(part)
                if data is not None:
                    names = [w.src for w in part.words[1:] if not w.src.startswith("-")]
                    fields_ = data.split()
                    for i, name in enumerate(names):
                        value = fields_[i] if i < len(fields_) else ""
                        if i == len(names) - 1:
                            value = " ".join(fields_[i:])
                        self.variables.setdefault(name, []).append(value)

    def subst_output(self, inner: list[Part]) -> str | None:
        """Literal stdout of a substitution whose body is one literal pipeline."""
        if not inner:
            return ""
        top = min(p.depth for p in inner)
        stages = [p for p in inner if p.depth == top]
        last = stages[-1]
        chain = []
        p: Part | None = last
        while p is not None:
            chain.append(p)
            p = p.pipe_prev
        if any(s not in chain for s in stages):
            return None
        return self.stdout_of(last)

    def stdin_of(self, part: Part, _depth: int = 0) -> str | None:
        """Literal data on the part's stdin, if visible (through at most 48 pipe stages)."""
        ex = self.expander()
        for r in part.redirects:
            if r.is_heredoc and r.body is not None:
                return r.body
            if r.op == "<<<" and r.target is not None:
                return ex.value(r.target) + "\n"
            if r.op == "<" and r.target is not None:
                target = self.path(ex.value(r.target))
                if target in self.files:
                    return self.files[target]
        if part.pipe_prev is not None:
            return self.stdout_of(part.pipe_prev, _depth + 1)
        return None

    def stdout_of(self, part: Part, _depth: int = 0) -> str | None:
        if part.kind != "cmd" or not part.words or _depth > 48:
            return None
        ex = self.expander()
        argvs = ex.argvs(part.words)
        if not argvs or not argvs[0]:
            return None
        argv = argvs[0]
        prog = basename(argv[0])
        args = argv[1:]
        if prog == "echo":
            newline, escapes = True, False
            while args and re.fullmatch(r"-[neE]+", args[0]):
                newline = newline and "n" not in args[0]
                escapes = escapes or "e" in args[0]
                args = args[1:]
            text = " ".join(args)
            if escapes:
                text = decode_ansi_c(text)
            return text + ("\n" if newline else "")
        if prog == "printf":
            if args and args[0] == "--":
                args = args[1:]
            if not args:
                return None
            fmt = decode_ansi_c(args[0])
            rest = args[1:]
            if not _PRINTF_DIRECTIVE.search(fmt):
                return fmt
            return _printf(fmt, rest)
        if prog in ("cat", "tee") and all(a.startswith("-") for a in args if a != "-"):
            return self.stdin_of(part, _depth)
        if prog == "cat" and args:
            texts = [self.files.get(self.path(a)) for a in args if not a.startswith("-")]
            if all(t is not None for t in texts):
                return "".join(t for t in texts if t is not None)
            return None
        if prog in ("base64", "base32") and any(a in ("-d", "--decode", "-D") for a in args):
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            try:
                raw = (base64.b64decode if prog == "base64" else base64.b32decode)(
                    "".join(data.split())
                )
            except (binascii.Error, ValueError):
                return None
            return raw.decode("utf-8", "replace")
        if prog == "xxd" and "-r" in args:
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            try:
                return bytes.fromhex("".join(data.split())).decode("utf-8", "replace")
            except ValueError:
                return None
        if prog == "rev":
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            return "\n".join(line[::-1] for line in data.split("\n"))
        if prog == "pwd":
            return self.worktree + "\n"
        if prog == "git" and "rev-parse" in args:
            if any(a in ("--git-dir", "--git-common-dir", "--absolute-git-dir") for a in args):
                return self.worktree + "/.git\n"
            if "--show-toplevel" in args:
                return self.worktree + "\n"
        return None


def _printf(fmt: str, args: list[str]) -> str:
    """`printf FORMAT ARGS...` for %s-style directives; the format repeats while args remain."""
    out: list[str] = []
    rest = list(args)
    while True:
        pieces: list[str] = []
        pos = 0
        used = 0
        for m in _PRINTF_DIRECTIVE.finditer(fmt):
            pieces.append(fmt[pos : m.start()])
            if m.group(0) == "%%":
                pieces.append("%")
            else:
                pieces.append(rest[used] if used < len(rest) else "")
                used += 1
            pos = m.end()
        pieces.append(fmt[pos:])
        out.append("".join(pieces))
        rest = rest[used:]
        if not rest or not used:
            break
    return "".join(out)
