"""The allow list's per-program judges (docs/policy.md, "Allow: the plain form"): configured utilities, `sed`,
`find`, `test` and configured runners (interpreters, build and test tools)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from gitsup.policy.allow.state import AllowState
from gitsup.policy.config import RunnerSpec, UtilitySpec
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.facts import PYTHON
from gitsup.policy.normalise.expand import basename
from gitsup.policy.rules import RuleId

_TEST_FILE_OPS = frozenset(
    {
        "-e",
        "-f",
        "-d",
        "-r",
        "-w",
        "-x",
        "-s",
        "-L",
        "-h",
        "-b",
        "-c",
        "-p",
        "-S",
        "-O",
        "-G",
        "-N",
        "-k",
        "-u",
        "-g",
    }
)


_SED_SCRIPT = re.compile(
    r"""^\s*(?:
        (?:(?:\d+|\$|/(?:[^/\\\n]|\\.)*/I?M?|\\(?P<d>[^\s\\])(?:(?!(?P=d)).|\\.)*(?P=d))
           (?:\s*,\s*(?:\d+|\$|\+\d+|~\d+|/(?:[^/\\\n]|\\.)*/I?M?))?
           (?:~\d+)?)?
        \s*!?\s*p
    )\s*$""",
    re.X,
)


# -- utilities ------------------------------------------------------------------------------
def _long_match(name: str, options: Sequence[str]) -> str | None:
    if name in options:
        return name
    if len(name) > 3:
        hits = [o for o in options if o.startswith("--") and o.startswith(name)]
        if len(hits) == 1:
            return hits[0]
    return None


def is_forbidden(name: str, forbid: Sequence[str]) -> bool:
    """`name` is a forbidden option, an unambiguous-prefix abbreviation of a forbidden long
    option, or the double-dash spelling of a single-dash long one (Go: `--toolexec`)."""
    if name in forbid:
        return True
    if name.startswith("--") and len(name) > 3 and name[1:] in forbid:
        return True
    return (
        name.startswith("--")
        and len(name) > 3
        and any(f.startswith("--") and f.startswith(name) for f in forbid)
    )


# spec id -> (spec, options that take a value, those and the two-value options), once per spec
_TAKES: dict[int, tuple[UtilitySpec, frozenset[str], tuple[str, ...]]] = {}


def _takes(spec: UtilitySpec) -> tuple[frozenset[str], tuple[str, ...]]:
    hit = _TAKES.get(id(spec))
    if hit is None or hit[0] is not spec:
        if len(_TAKES) >= 1024:
            _TAKES.clear()
        takes = frozenset(spec.arg_opts) | frozenset(spec.path_opts)
        hit = _TAKES[id(spec)] = (spec, takes, (*takes, *spec.two_value_opts))
    return hit[1], hit[2]


def _path_value(
    prog: str, opt: str, value: str, st: AllowState, src: str, paths: list[str]
) -> Decision | None:
    """The value of an option that names a path: kept in `paths`; outside W it asks."""
    paths.append(value)
    if st.path_inside(value):
        return None
    return ask(RuleId.ASK_OUTSIDE_PATH, f"`{prog} {opt}` names {value} outside the worktree", src)


def judge_utility(
    prog: str,
    args: list[str],
    spec: UtilitySpec,
    st: AllowState,
    src: str,
    collected: list[str] | None = None,
) -> Decision:
    """Judge a utility against its spec; `collected` receives its path operands and path
    option values."""
    operands: list[str] = []
    paths = collected if collected is not None else []
    seen: set[str] = set()
    i = 0
    n = len(args)
    dd = False
    takes, longs = _takes(spec)
    data = spec.operands in ("data", "none")
    while i < n:
        a = args[i]
        if dd or a == "-" or not a.startswith("-") or (data and prog in ("echo", "printf")):
            operands.append(a)
            i += 1
            continue
        if a == "--":
            dd = True
            i += 1
            continue
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            if is_forbidden(name, spec.forbid):
                return ask(RuleId.ASK_UTILITY_OPTION, f"`{prog} {name}` is not read-only", src)
            canon = _long_match(name, longs) or name
            seen.add(canon)
            if spec.allowed_opts is not None and canon not in spec.allowed_opts:
                return ask(
                    RuleId.ASK_UTILITY_OPTION, f"`{prog} {name}` is not on the allow list", src
                )
            if canon in spec.two_value_opts:
                second = args[i + 2] if i + 2 < n else ""
                if canon in ("--slurpfile", "--rawfile") and not st.path_inside(second):
                    return ask(RuleId.ASK_OUTSIDE_PATH, f"{canon} reads {second}", src)
                i += 3
                continue
            if canon in takes:
                value = val if eq else (args[i + 1] if i + 1 < n else "")
                if canon in spec.path_opts:
                    outside = _path_value(prog, canon, value, st, src, paths)
                    if outside is not None:
                        return outside
                i += 1 if eq else 2
                continue
            i += 1
            continue
        # short option cluster
        consumed = 0
        for k in range(1, len(a)):
            opt = "-" + a[k]
            if opt in spec.forbid:
                return ask(RuleId.ASK_UTILITY_OPTION, f"`{prog} {opt}` is not read-only", src)
            if spec.allowed_opts is not None and opt not in spec.allowed_opts:
                return ask(
                    RuleId.ASK_UTILITY_OPTION, f"`{prog} {opt}` is not on the allow list", src
                )
            seen.add(opt)
            if opt in takes:
                rest = a[k + 1 :]
                value = rest if rest else (args[i + 1] if i + 1 < n else "")
                consumed = 0 if rest else 1
                if opt in spec.path_opts:
                    outside = _path_value(prog, opt, value, st, src, paths)
                    if outside is not None:
                        return outside
                break
            if a[k].isdigit():
                break
        i += 1 + consumed
    if spec.require and not any(r in seen for r in spec.require):
        return ask(
            RuleId.ASK_UTILITY_OPTION, f"`{prog}` needs one of {', '.join(spec.require)}", src
        )
    if (spec.operands == "pattern" and not (seen & {"-e", "--regexp", "-f", "--file"})) or (
        spec.operands == "filter" and not (seen & {"-f", "--from-file"})
    ):
        operands = operands[1:]
    elif data:
        operands = []
    paths.extend(operands)
    for op in operands:
        if not st.path_inside(op):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"`{prog}` reads or writes {op} outside the worktree", src
            )
        if spec.create and st.in_git_dir(op):
            return ask(RuleId.ASK_GIT_DIR, f"`{prog}` writes into the Git directory ({op})", src)
    if prog == "uniq" and len(operands) > 1:
        return ask(RuleId.ASK_MUTATION, f"`uniq` writes its output operand {operands[1]}", src)
    if prog == "tree" and any(o in seen for o in ("-o",)):
        return ask(RuleId.ASK_MUTATION, "`tree -o` writes a file", src)
    if spec.create:
        return allow(RuleId.A_CREATE, f"`{prog}` creates paths in the worktree", src)
    if spec.operands in ("data", "none"):
        return allow(RuleId.A_READ_ONLY, f"`{prog}` only prints", src)
    return allow(RuleId.A_READ_ONLY, f"read-only `{prog}` on paths in the worktree", src)


def judge_sed(args: list[str], st: AllowState, src: str) -> Decision:
    quiet = False
    scripts: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-n", "--quiet", "--silent"):
            quiet = True
        elif a in ("-e", "--expression"):
            scripts.append(args[i + 1] if i + 1 < len(args) else "")
            i += 1
        elif a.startswith("--expression="):
            scripts.append(a.split("=", 1)[1])
        elif a in (
            "-E",
            "-r",
            "--regexp-extended",
            "-s",
            "--separate",
            "-u",
            "--unbuffered",
            "-z",
            "--null-data",
            "--posix",
        ):
            pass
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            letters = a[1:]
            if (
                "e" in letters
                and letters.endswith("e")
                and all(c in "nErsuz" for c in letters[:-1])
            ):
                quiet = quiet or "n" in letters
                scripts.append(args[i + 1] if i + 1 < len(args) else "")
                i += 1
            elif all(c in "nErsuz" for c in letters):
                quiet = quiet or "n" in letters
            else:
                return ask(RuleId.ASK_MUTATION, f"`sed {a}` may edit files or run commands", src)
        elif a.startswith("-") and a != "-":
            return ask(RuleId.ASK_MUTATION, f"`sed {a}` may edit files or run commands", src)
        elif not scripts and not files and not any(s for s in scripts):
            scripts.append(a)
        else:
            files.append(a)
        i += 1
    if not quiet:
        return ask(RuleId.ASK_MUTATION, "`sed` without -n and a print-only script", src)
    for script in scripts:
        for cmd in re.split(r"[;\n]", script):
            if cmd.strip() and not _SED_SCRIPT.match(cmd):
                return ask(
                    RuleId.ASK_MUTATION, f"sed script {cmd.strip()!r} is not print-only", src
                )
    for f in files:
        if not st.path_inside(f):
            return ask(RuleId.ASK_OUTSIDE_PATH, f"`sed` reads {f} outside the worktree", src)
    return allow(RuleId.A_READ_ONLY, "`sed -n` with a print-only script", src)


_FIND_FORBID = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


_FIND_PATH_ARGS = frozenset({"-newer", "-anewer", "-cnewer", "-samefile", "-files0-from"})


def judge_find(args: list[str], st: AllowState, src: str) -> Decision:
    roots = []
    for a in args:
        if a in ("-H", "-L", "-P"):
            continue
        if a.startswith("-") or a in ("(", "!", ")", ","):
            break
        roots.append(a)
    for a in args:
        if a in _FIND_FORBID:
            return ask(RuleId.ASK_WRAPPER, f"`find {a}` runs programs or changes files", src)
    for k, a in enumerate(args):
        if a in _FIND_PATH_ARGS and k + 1 < len(args) and not st.path_inside(args[k + 1]):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"`find {a}` names a path outside the worktree", src
            )
    for r in roots or ["."]:
        if not st.path_inside(r):
            return ask(RuleId.ASK_OUTSIDE_PATH, f"`find {r}` searches outside the worktree", src)
    return allow(RuleId.A_READ_ONLY, "`find` inside the worktree", src)


_ARITH_OPS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


_INTEGER = re.compile(r"^\s*[-+]?(0[xX][0-9a-fA-F]+|[0-9]+)\s*$")


def judge_test(
    args: Sequence[str], st: AllowState, src: str, *, brackets: bool, double: bool = False
) -> Decision:
    words = list(args)
    if brackets:
        if not words or words[-1] != "]":
            return ask(RuleId.ASK_UNKNOWN, "`[` without a closing `]`", src)
        words = words[:-1]
    for k, w in enumerate(words):
        # `-v a[$(cmd)]` evaluates the subscript; `[[ x -eq y ]]` evaluates both sides as
        # arithmetic (array subscripts and variable values included): only integers are plain
        if w in ("-v", "-R") and k + 1 < len(words) and "[" in words[k + 1]:
            return ask(RuleId.ASK_EXPANSION, f"`{w} {words[k + 1]}` evaluates a subscript", src)
        if double and w in _ARITH_OPS:
            for p in (words[k - 1] if k else "", words[k + 1] if k + 1 < len(words) else ""):
                if not _INTEGER.match(p):
                    return ask(
                        RuleId.ASK_EXPANSION, f"`[[ … {w} … ]]` evaluates {p!r} as code", src
                    )
        if w in _TEST_FILE_OPS and k + 1 < len(words) and not st.path_inside(words[k + 1]):
            return ask(
                RuleId.ASK_OUTSIDE_PATH,
                f"`test {w} {words[k + 1]}` looks outside the worktree",
                src,
            )
        if w in ("-nt", "-ot", "-ef"):
            for p in (words[k - 1] if k else "", words[k + 1] if k + 1 < len(words) else ""):
                if not st.path_inside(p):
                    return ask(
                        RuleId.ASK_OUTSIDE_PATH, f"`test` compares {p} outside the worktree", src
                    )
    return allow(RuleId.A_READ_ONLY, "a test", src)


# -- local development --------------------------------------------------------------------
def judge_runner(
    argv: list[str], st: AllowState, src: str, *, sandboxed: bool = False
) -> Decision | None:
    found: Decision | None = None
    for spec in st.policy.runners_for(argv[0], sandboxed=sandboxed):
        words = spec.argv
        if len(argv) < len(words):
            continue
        if tuple(argv[: len(words)]) != words and (
            # not the same words: a match only through a glob word
            not any("*" in p for p in words)
            or not all(
                p == a or ("*" in p and fnmatch.fnmatchcase(a, p))
                for p, a in zip(words, argv, strict=False)
            )
        ):
            continue
        d = _runner_ok(spec, argv[len(spec.argv) :], st, src, sandboxed=sandboxed)
        if d.verdict == "allow":
            return d
        found = found or d
    return found


_STDIN_PATHS = re.compile(r"^(-|/dev/stdin|/dev/fd/\d+|/proc/(self|\d+)/fd/\d+)$")


def _path_opt(a: str, nxt: str | None, opts: Sequence[str]) -> tuple[str, str, int] | None:
    """(option, value, words consumed) when `a` is one of `opts` (a long abbreviation, `=`,
    or an attached short value), else None."""
    if a.startswith("--"):
        name, eq, val = a.partition("=")
        canon = _long_match(name, opts)
        if canon is None:
            return None
        return (canon, val, 1) if eq else (canon, nxt or "", 2)
    head = a[:2]
    if head in opts:
        return (head, a[2:], 1) if len(a) > 2 else (head, nxt or "", 2)
    for o in opts:  # single-dash long options (`-toolexec=x`)
        if len(o) > 2 and not o.startswith("--") and (a == o or a.startswith(o + "=")):
            return (o, a[len(o) + 1 :], 1) if "=" in a else (o, nxt or "", 2)
    return None


_EMBEDDED = re.compile(r"[=:]")


def _embedded(value: str) -> list[str]:
    """The pieces of a value between `=` and `:` (`cache_dir=/x` -> `cache_dir`, `/x`), without
    blanks or quotes (`extend = "/x.toml"`)."""
    return [v for v in (p.strip(" \t'\"") for p in _EMBEDDED.split(value)) if v]


def _runner_ok(
    spec: RunnerSpec, rest: list[str], st: AllowState, src: str, *, sandboxed: bool = False
) -> Decision:
    name = " ".join(spec.argv)
    seen: set[str] = set()
    positional: list[str] = []
    i = 0
    value_opts = spec.value_opts() if spec.ask_values else ()
    contained = False
    embedded: Decision | None = None
    while i < len(rest):
        a = rest[i]
        nxt = rest[i + 1] if i + 1 < len(rest) else None
        if value_opts and a[:1] == "-" and (a[:2] in value_opts or a[:2] == "--"):
            hit = _path_opt(a, nxt, value_opts)
            if hit is not None and spec.asks_for(hit[0], hit[1]):
                if not st.sandboxed:
                    return ask(
                        RuleId.ASK_RUNNER_OPTION,
                        f"`{name} {hit[0]} {hit[1]}` loads or runs code the command names",
                        src,
                    )
                # inside the sandbox: no worse than a script written into W and run
                contained = True
        if spec.path_opts and a.startswith("-") and a != "-":
            hit = _path_opt(a, nxt, spec.path_opts)
            if hit is not None:
                opt, value, used = hit
                seen.add(opt)
                if _STDIN_PATHS.match(value):
                    return ask(
                        RuleId.ASK_INTERPRETER,
                        f"`{name} {opt} {value}` reads its program from stdin",
                        src,
                    )
                if not st.path_inside(value):
                    return ask(
                        RuleId.ASK_OUTSIDE_PATH,
                        f"`{name} {opt}` names {value} outside the worktree",
                        src,
                    )
                if st.in_git_dir(value):
                    return ask(RuleId.ASK_GIT_DIR, f"`{name} {opt}` names the Git directory", src)
                i += used
                continue
        opt = a.split("=", 1)[0]
        if a.startswith("-"):
            seen.add(opt)
            if (
                spec.forbid
                and (
                    is_forbidden(opt, spec.forbid)
                    # `-Z` takes its value attached (`cargo -Zflag`)
                    or ("-Z" in spec.forbid and opt[:2] == "-Z" and len(opt) > 2)
                )
            ):
                return ask(
                    RuleId.ASK_RUNNER_OPTION,
                    f"`{name} {opt}` names a program, fixes code or writes elsewhere",
                    src,
                )
        else:
            positional.append(a)
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if not st.path_inside(value):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"`{name}` argument {a!r} points outside the worktree", src
            )
        if (
            embedded is None
            and ("=" in value or ":" in value)
            and not all(st.path_inside(v) for v in _embedded(value))
        ):
            # a path inside a value (`-o cache_dir=/x`, `--cov-report=html:/x`); said after
            # the checks below, which name a more specific reason (`make VAR=/x`)
            embedded = ask(
                RuleId.ASK_OUTSIDE_PATH,
                f"`{name}` argument {a!r} names a path outside the worktree",
                src,
            )
        if value not in ("-", "") and st.in_git_dir(value):
            # `go build -o .git/hooks/pre-commit`, `pip install -t .git/...`
            return ask(RuleId.ASK_GIT_DIR, f"`{name}` argument {a!r} names the Git directory", src)
        i += 1
    for word in positional if spec.ask_words else ():
        if any(fnmatch.fnmatchcase(word, p) for p in spec.ask_words):
            return ask(
                RuleId.ASK_RUN, f"`{name} {word}`: its name says it publishes or installs", src
            )
    if spec.require and not any(r in seen for r in spec.require):
        return ask(
            RuleId.ASK_RUNNER_OPTION, f"`{name}` needs one of {', '.join(spec.require)}", src
        )
    if spec.only:
        targets = [a for a in rest if not a.startswith("-")]
        if any("=" in t for t in targets):
            return ask(RuleId.ASK_RUNNER_OPTION, f"`{name}` with a variable override", src)
        if not targets or any(t not in spec.only for t in targets):
            return ask(
                RuleId.ASK_RUN, f"`{name}` with a target other than {', '.join(spec.only)}", src
            )
    if embedded is not None:
        return embedded
    if sandboxed or contained:
        return allow(RuleId.A_SANDBOXED, f"inside the sandbox: `{name}`", src)
    return allow(RuleId.A_LOCAL_DEV, f"local development: `{name}`", src)


def is_pythonish(prog: str) -> bool:
    return bool(PYTHON.match(basename(prog)))
