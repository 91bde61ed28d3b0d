"""The sandboxed mode (docs/policy.md, "Sandboxed mode"): what becomes `allow` when the task's kernel sandbox
is enforced. Only reached from the allow list (`allow/judge.py`, `allow/git.py`) through
`AllowState.sandbox`, the strategy the classifier passes in (`allow/mode.py`), after deny
detection found nothing; every function returns None (no opinion: the caller asks) or a
decision. Writes stay inside W and the Git directory stays out of reach; reads may go wherever the
kernel lets the task read; inline code and installed tools run unless their text names a publishing,
pushing or hook operation (or one of its string literals is a command the deny scan denies:
`deny/scan.py` `scan_command`); network, wrappers, release tools and non-inert assignments keep asking.
Git working-tree operations are in `policy/allow/sandboxed_git.py`.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from gitsup.policy.allow.judge import PROGRAM_NAME, judge_program
from gitsup.policy.allow.programs import (
    is_forbidden,
    judge_find,
    judge_runner,
    judge_sed,
    judge_test,
    judge_utility,
)
from gitsup.policy.allow.state import AllowState
from gitsup.policy.config import Policy, ScriptSpec, UtilitySpec
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.deny.scan import scan_command
from gitsup.policy.facts import ScanState
from gitsup.policy.normalise.expand import Expander, basename, resolve
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import Part, Word
from gitsup.policy.rules import RuleId

RULE = RuleId.A_SANDBOXED


def sandboxed_ok(what: str, src: str) -> Decision:
    return allow(RULE, f"inside the sandbox: {what}", src)


def sandboxed_program(
    argv: list[str], st: AllowState, src: str, part: Part | None = None
) -> Decision | None:
    """A bare-named program: sandboxed runners, file mutation, tar, script interpreters (and
    their inline code), installed tools through `npx`/`npm exec`, printing the environment."""
    policy = st.policy
    prog, args = argv[0], argv[1:]
    d = judge_runner(argv, st, src, sandboxed=True)
    if d is not None:
        return d
    spec = policy.sandboxed_mutators.get(prog)
    if spec is not None:
        return _mutate(prog, args, spec, st, src)
    if prog == "tar":
        return _tar(args, st, src)
    script = policy.script_for(prog)
    if script is not None:
        return _script(prog, args, script, st, src, part)
    if prog == "printenv":
        return sandboxed_ok("`printenv` prints the environment the sandbox passed", src)
    if prog == "env":
        return _env(args, st, src)
    if part is not None and (prog in ("npx", "bunx") or (args[:1] == ["exec"] and prog in _EXECS)):
        return _installed(prog, args if prog in ("npx", "bunx") else args[1:], part, st, src)
    return None


# -- reads anywhere the kernel lets the task read -------------------------------------------
def read_anywhere(
    prog: str, args: list[str], st: AllowState, src: str, what: str = "reads outside the worktree"
) -> Decision | None:
    """A read-only utility, `find`, `test` or `sed -n` that reads outside W (or an unresolved
    expansion): allowed when that is all that kept it from the allow list."""
    policy = st.policy
    reading = st.reading()
    if prog in policy.sandboxed_reads or prog in policy.sandboxed_prints:
        spec = policy.utilities.get(prog)
        if spec is None or spec.create:
            return None
        d = judge_utility(prog, args, spec, reading, src)
    elif prog == "find":
        d = judge_find(args, reading, src)
    elif prog in ("test", "["):
        d = judge_test(args, reading, src, brackets=prog == "[")
    elif prog == "sed":
        d = judge_sed(args, reading, src)
    elif prog == "printenv":
        return sandboxed_ok("`printenv` prints the environment the sandbox passed", src)
    else:
        return None
    if d.verdict != "allow":
        return d
    return sandboxed_ok(f"`{prog}` {what}", src)


_PARAM = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])$")


def _expansion_ok(w: Word) -> bool:
    """Parameter expansions of a plain name and substitutions (whose commands are judged as
    parts of their own); not arithmetic, not subscripts."""
    for seg in w.segs:
        if seg.kind == "lit":
            continue
        if seg.kind == "var":
            if not _PARAM.match(seg.text):
                return False
            continue
        if seg.kind in ("subst", "proc"):
            continue
        return False
    return True


def expanded_part(part: Part, first: Word, st: AllowState) -> Decision | None:
    """A part with unresolved expansions in its arguments (`echo $PATH`, `ls "$HOME"`): allowed
    for printing and reading utilities, `test` and `printenv`; anything else asks as before."""
    src = part.src
    no = ask(RuleId.ASK_EXPANSION, f"unresolved expansion {first.src!r}", src)
    if not all(_expansion_ok(w) for w in part.words):
        return no
    if part.kind in ("words", "assign", "redirects"):
        return None
    ex = st.expander()
    if part.kind == "test":
        d = judge_test(
            [" ".join(a[0]) if a else "" for a in map(ex.word, part.words)],
            st.reading(),
            src,
            brackets=False,
            double=part.src.startswith("[["),
        )
        return sandboxed_ok("a test of an expansion", src) if d.verdict == "allow" else d
    if part.kind != "cmd" or not part.words:
        return no
    head = part.words[0]
    if not head.plain or head.expands or not PROGRAM_NAME.match(head.src):
        return no
    argvs = ex.argvs(part.words)
    if len(argvs) != 1 or not argvs[0] or argvs[0][0] != head.src:
        return no
    argv = argvs[0]
    if argv[0] == "printf" and (len(argv) < 2 or part.words[1].expands):
        return no  # the format (and a `-v NAME`) must be literal
    found = read_anywhere(argv[0], argv[1:], st, src, "reads or prints an expansion")
    return no if found is None else found


# -- printing the environment -----------------------------------------------------------------
def _env(args: list[str], st: AllowState, src: str) -> Decision | None:
    """`env` with options and assignments but no command prints the environment."""
    spec = st.policy.wrappers.get("env")
    takes = spec.opts_with_arg if spec is not None else ()
    assigned = False
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if (a.startswith("-") and not a.startswith("--") and "S" in a) or (
            len(name) > 2 and "--split-string".startswith(name)
        ):
            return None  # `-S`/`-iS`/`--s=`: the string is split into a command
        if a.startswith("-") and a != "-" and not assigned:
            i += 2 if a in takes else 1
            continue
        assigned = True  # options end at the first assignment
        if "=" in a and _PARAM.match(a.split("=", 1)[0]):
            i += 1
            continue
        return None  # a command: `env` runs another program
    return sandboxed_ok("`env` without a command prints the environment", src)


# -- installed tools ---------------------------------------------------------------------------
_EXECS = frozenset({"npm", "pnpm"})
_EXEC_FLAGS = frozenset({"-y", "--yes", "--no", "--no-install", "-q", "--quiet", "--silent"})


def _installed(prog: str, args: list[str], part: Part, st: AllowState, src: str) -> Decision | None:
    """`npx <bin> …`, `npm exec [--] <bin> …`: the project's installed tool, judged like
    `./node_modules/.bin/<bin>`. A package spec (`-p`, `@scope/x`, `x@1`, a URL) would be
    downloaded, `-c` runs shell text: those ask."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--":
            i += 1
            break
        if args[i] not in _EXEC_FLAGS:
            return None
        i += 1
    if i >= len(args):
        return None
    name = args[i]
    if not PROGRAM_NAME.match(name) or name in (".", ":", "["):
        return None
    if name in st.policy.release_tools:
        return _release(name, src)
    d = judge_program([name, *args[i + 1 :]], part, st)
    if d is None or d.verdict == "allow":
        return d
    if d.rule == RuleId.ASK_UNKNOWN:
        d2 = _args_in_w(args[i + 1 :], st, src, name)
        return d2 if d2 is not None else sandboxed_ok(f"runs the installed `{name}`", src)
    return d


def _release(name: str, src: str) -> Decision:
    return ask(RuleId.ASK_RUN, f"`{name}` publishes or releases; not run even in the sandbox", src)


# -- inline code --------------------------------------------------------------------------------
_TOKEN = re.compile(r"[A-Za-z0-9_.+:*-]+")
_GIT_VERBS = frozenset(
    {"update-ref", "symbolic-ref", "filter-branch", "filter-repo", "dcommit", "request-pull"}
)
_HOOKS = re.compile(r"hookspath|\.git[/\\]+hooks|[/\\'\"]hooks[/\\'\"]", re.I)


def inline_code_mentions(code: str, policy: Policy, worktree: str, home: str) -> str | None:
    """What inline code names that the deny rules forbid in a shell command (`git` with `push`,
    `npm` with `publish`, a hooks path), or None. Non-shell code is opaque, so this reads words,
    not programs: a mention is enough to keep asking."""
    words: set[str] = set(_TOKEN.findall(code))
    if "git" in words:
        for verb in (*policy.git_publish, *_GIT_VERBS):
            if verb in words:
                return f"git {verb}"
    for w in words:
        if w.startswith("git-") and w[4:] in policy.git_publish:
            return w
    for prog, verbs in policy.publish.items():
        if prog in words:
            for spelled in verbs:
                if any(fnmatch.fnmatchcase(w, spelled[0]) for w in words):
                    return f"{prog} {' '.join(spelled)}"
    for prog, pairs in policy.forge.items():
        if prog in words:
            for first, _ in pairs:
                if first in words:
                    return f"{prog} {first}"
    if _HOOKS.search(code):
        return "the Git hooks"
    return _literal_deny(code, policy, worktree, home)


_LITERAL = re.compile(r"""'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)"|`((?:[^`\\]|\\.)*)`""")
_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPED = {"n": "\n", "t": "\t"}


def _literal_deny(code: str, policy: Policy, worktree: str, home: str) -> str | None:
    """A string literal of the code (or all of them joined, `execFileSync('git', ['push'])`)
    that the shell classifier denies: the command it would run is visible."""
    texts = [
        _ESCAPE.sub(lambda m: _ESCAPED.get(m.group(1), m.group(1)), a or b or c)
        for a, b, c in _LITERAL.findall(code)
    ]
    if len(texts) > 1:
        texts.append(" ".join(texts))
    for t in texts:
        if not t.strip():
            continue
        dotglob = "dotglob" in t or "GLOBIGNORE" in t
        try:
            d = scan_command(t, parse(t), ScanState(policy, worktree, home, dotglob))
        except (RecursionError, UnicodeError):
            continue  # the classifier asks about such text: it is not a deny
        if d is not None:
            return f"`{d.part}` ({d.rule})"
    return None


def _inline(prog: str, code: str, st: AllowState, src: str, how: str) -> Decision:
    named = inline_code_mentions(code, st.policy, st.worktree, st.home)
    if named is not None:
        return ask(
            RuleId.ASK_INTERPRETER,
            f"`{prog}` {how} that names {named}; not run even in the sandbox",
            src,
        )
    return sandboxed_ok(f"`{prog}` runs {how}", src)


def _stdin_code(part: Part | None) -> str | None:
    """The code on the part's stdin when it is its own heredoc or literal herestring."""
    if part is None or part.pipe_prev is not None:
        return None
    code: str | None = None
    for r in part.redirects:
        if r.op in ("<", "<>", "<&") or (r.fd in ("", "0") and r.op in ("<<", "<<-", "<<<")):
            if r.is_heredoc and r.body is not None:
                code = r.body
            elif r.op == "<<<" and r.target is not None and isinstance(r.target.one_field, str):
                code = r.target.one_field
            else:
                return None
    return code


def path_program(part: Part, st: AllowState) -> Decision | None:
    """`./x`, `.venv/bin/pytest`, `bin/build.sh`: a program inside W. A known name is judged as
    that program; an unknown one runs with every argument inside W."""
    src = part.src
    argvs = Expander({}, st.home, st.worktree).argvs(part.words)
    if len(argvs) != 1 or not argvs[0]:
        return None
    argv = argvs[0]
    path = argv[0]
    if not st.strictly_inside(path) or st.in_git_dir(path):
        return None
    name = basename(path)
    if not PROGRAM_NAME.match(name):
        return None
    if name in st.policy.release_tools:
        return _release(path, src)
    d = judge_program([name, *argv[1:]], part, st)
    if d is None:
        return None
    if d.verdict == "allow":
        return d
    if d.rule == RuleId.ASK_UNKNOWN or (d.rule == RuleId.ASK_INTERPRETER and name.endswith(".sh")):
        d2 = _args_in_w(argv[1:], st, src, path)
        if d2 is not None:
            return d2
        return sandboxed_ok(f"runs {path} from the worktree", src)
    return d


def _args_in_w(args: list[str], st: AllowState, src: str, what: str) -> Decision | None:
    """Every argument that may be a path stays inside W and out of the Git directory."""
    for a in args:
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if not st.path_inside(value):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"`{what}` argument {a!r} is outside the worktree", src
            )
        if value not in ("-", "") and st.in_git_dir(value):
            return ask(RuleId.ASK_GIT_DIR, f"`{what}` argument {a!r} names the Git directory", src)
    return None


# -- interpreters running a script file ---------------------------------------------------------
def _script(
    prog: str,
    args: list[str],
    spec: ScriptSpec,
    st: AllowState,
    src: str,
    part: Part | None = None,
) -> Decision:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        code = _inline_opt(a, args[i + 1] if i + 1 < len(args) else None, spec.inline)
        if code is not None:
            return _inline(prog, code, st, src, "inline code")
        if a in spec.arg_opts:
            i += 2
            continue
        if any(a.startswith(o) and len(o) == 2 for o in spec.arg_opts):
            i += 1
            continue
        if a in spec.flags or (
            not a.startswith("--") and all("-" + c in spec.flags for c in a[1:])
        ):
            i += 1
            continue
        return ask(RuleId.ASK_INTERPRETER, f"`{prog} {a}` runs code that is not a file in W", src)
    if i >= len(args) or args[i] == "-":
        code = _stdin_code(part) if spec.stdin else None
        if code is not None:
            return _inline(prog, code, st, src, "code from its heredoc")
    if i >= len(args):
        return ask(RuleId.ASK_INTERPRETER, f"`{prog}` without a script reads code from stdin", src)
    script = args[i]
    if script == "-" or script.startswith("/dev/") or script.startswith("/proc/"):
        return ask(RuleId.ASK_INTERPRETER, f"`{prog} {script}` reads code from stdin", src)
    if not st.strictly_inside(script) or st.in_git_dir(script):
        return ask(
            RuleId.ASK_OUTSIDE_PATH, f"`{prog}` runs {script}, not a file in the worktree", src
        )
    d = _args_in_w(args[i + 1 :], st, src, f"{prog} {script}")
    if d is not None:
        return d
    return sandboxed_ok(f"`{prog}` runs the script {script} from the worktree", src)


def _inline_opt(a: str, nxt: str | None, inline: tuple[str, ...]) -> str | None:
    """The code of an inline-code option (`-c CODE`, `-cCODE`, `--eval=CODE`), else None."""
    for o in inline:
        if a == o:
            return nxt if nxt is not None else ""
        if o.startswith("--") and a.startswith(o + "="):
            return a[len(o) + 1 :]
        if len(o) == 2 and not a.startswith("--") and a.startswith(o) and len(a) > 2:
            return a[2:]
    return None


# -- file mutation --------------------------------------------------------------------------
def _mutate(prog: str, args: list[str], spec: UtilitySpec, st: AllowState, src: str) -> Decision:
    paths: list[str] = []
    d = judge_utility(prog, args, spec, st, src, collected=paths)
    if d.verdict != "allow":
        return d
    for p in paths:
        if p in ("-", ""):
            continue
        if st.in_git_dir(p):
            return ask(RuleId.ASK_GIT_DIR, f"`{prog}` changes the Git directory ({p})", src)
        if spec.mutate == "remove" and not st.strictly_inside(p):
            return ask(RuleId.ASK_MUTATION, f"`{prog}` would remove the worktree itself ({p})", src)
    if prog == "ln" and _symbolic(args):
        d2 = _symlink_targets(args, paths, st, src)
        if d2 is not None:
            return d2
    return sandboxed_ok(f"`{prog}` on paths in the worktree", src)


def _symbolic(args: list[str]) -> bool:
    for a in args:
        if a == "--":
            return False
        if a == "--symbolic" or (len(a) > 3 and "--symbolic".startswith(a)):
            return True
        if a.startswith("-") and not a.startswith("--") and "s" in a[1:]:
            return True
    return False


def _symlink_targets(
    args: list[str], operands: list[str], st: AllowState, src: str
) -> Decision | None:
    """A relative symlink target is resolved from the link's directory, not the cwd: check it
    from every place the link may land."""
    with_t = any(
        (a.startswith("-") and not a.startswith("--") and "t" in a[1:])
        or (len(a) > 3 and "--target-directory".startswith(a.split("=", 1)[0]))
        for a in args
    )
    if with_t:
        targets, dests = operands[1:], operands[:1]
    elif len(operands) >= 2:
        targets, dests = operands[:-1], operands[-1:]
    else:
        targets, dests = operands, ["."]
    bases: set[str] = set()
    for cwd in st.cwds:
        for dest in dests:
            full = resolve(dest, cwd)
            bases.add(full)
            bases.add(posixpath.dirname(full))
    for t in targets:
        for base in bases:
            full = resolve(t, base)
            if not (full == st.worktree or full.startswith(st.worktree + "/")):
                return ask(
                    RuleId.ASK_OUTSIDE_PATH, f"symlink to {t} points outside the worktree", src
                )
            if st.in_git_dir(full):
                return ask(RuleId.ASK_GIT_DIR, f"symlink to {t} points into the Git directory", src)
    return None


# -- tar -x ------------------------------------------------------------------------------------
_TAR_WITH_VALUE = frozenset("fCTXbHKNgLVIF")
_TAR_FORBID_SHORT = frozenset("IFPcruAd")
_TAR_FORBID = (
    "--to-command",
    "--use-compress-program",
    "--checkpoint-action",
    "--info-script",
    "--new-volume-script",
    "--rmt-command",
    "--rsh-command",
    "--absolute-names",
    "--transform",
    "--xform",
    "--create",
    "--append",
    "--update",
    "--concatenate",
    "--catenate",
    "--delete",
    "--diff",
    "--compare",
    "--index-file",
)
_TAR_PATH_LONG = {
    "--file": "f",
    "--directory": "C",
    "--one-top-level": "C",
    "--volno-file": "g",
    "--files-from": "T",
    "--exclude-from": "X",
    "--listed-incremental": "g",
}


def _tar(args: list[str], st: AllowState, src: str) -> Decision | None:
    """`tar -x`/`-t` of an archive inside W into W; options that run programs or keep absolute
    names ask."""
    words = list(args)
    opts: list[tuple[str, str]] = []  # (letter or long name, value)
    if words and not words[0].startswith("-"):  # old style: `tar xzf a.tgz`
        bundle, words = words[0], words[1:]
        for c in bundle:
            if c in _TAR_WITH_VALUE:
                opts.append((c, words.pop(0) if words else ""))
            else:
                opts.append((c, ""))
    i = 0
    while i < len(words):
        a = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if a == "--":
            break
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            if is_forbidden(name, _TAR_FORBID):
                return ask(
                    RuleId.ASK_MUTATION, f"`tar {name}` runs a program or writes elsewhere", src
                )
            long = next((k for k in _TAR_PATH_LONG if k == name or k.startswith(name)), None)
            if long is not None and len(name) > 3:
                if eq:
                    opts.append((_TAR_PATH_LONG[long], val))
                else:
                    opts.append((_TAR_PATH_LONG[long], nxt))
                    i += 1
            elif name in ("--extract", "--get", "--list") or (
                len(name) > 3 and any(x.startswith(name) for x in ("--extract", "--list"))
            ):
                opts.append(("x" if name != "--list" else "t", ""))
            i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            for k, c in enumerate(a[1:], start=1):
                if c in _TAR_WITH_VALUE:
                    rest = a[k + 1 :]
                    if rest:
                        opts.append((c, rest))
                    else:
                        opts.append((c, nxt))
                        i += 1
                    break
                opts.append((c, ""))
            i += 1
            continue
        i += 1  # a member name: data
    letters = {k for k, _ in opts}
    if not letters & {"x", "t"}:
        return None
    for letter, value in opts:
        if letter in _TAR_FORBID_SHORT:
            return ask(
                RuleId.ASK_MUTATION, f"`tar -{letter}` runs a program or writes elsewhere", src
            )
        if letter in ("f", "C", "T", "X", "g"):
            if letter == "f" and value == "-":
                continue
            if not st.path_inside(value) or value == "-":
                return ask(
                    RuleId.ASK_OUTSIDE_PATH, f"`tar -{letter} {value}` is outside the worktree", src
                )
            if letter in ("C", "g") and st.in_git_dir(value):
                return ask(
                    RuleId.ASK_GIT_DIR, f"`tar -{letter}` writes into the Git directory", src
                )
    if "x" in letters and any(st.in_git_dir(c) for c in st.cwds):
        return ask(RuleId.ASK_GIT_DIR, "`tar -x` in the Git directory", src)
    return sandboxed_ok("`tar` extracts or lists an archive in the worktree", src)


# -- sed -i ----------------------------------------------------------------------------------
_SED_SIMPLE = frozenset("dDpPnNgGhHxlqQz=F{}")
_SED_S_FLAGS = frozenset("gpiImM0123456789")


def sed_edit(args: list[str], st: AllowState, src: str) -> Decision | None:
    """`sed [-i] [-E] -e SCRIPT files`: the script only substitutes, deletes, prints or inserts
    text (no `e`, `w`, `r` commands or flags); the files are inside W."""
    scripts: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name in ("--expression", "--expression=") or a.startswith("--expression="):
                if "=" in a:
                    scripts.append(a.split("=", 1)[1])
                else:
                    scripts.append(nxt or "")
                    i += 1
            elif name not in (
                "--in-place",
                "--regexp-extended",
                "--quiet",
                "--silent",
                "--separate",
                "--unbuffered",
                "--null-data",
                "--posix",
                "--follow-symlinks",
                "--debug",
                "--sandbox",
                "--line-length",
            ):
                return ask(RuleId.ASK_MUTATION, f"`sed {name}` is not accounted for", src)
        elif a.startswith("-") and a != "-":
            for k, c in enumerate(a[1:], start=1):
                if c == "i":
                    break  # the rest is the backup suffix
                if c == "e":
                    rest = a[k + 1 :]
                    scripts.append(rest if rest else (nxt or ""))
                    if not rest:
                        i += 1
                    break
                if c == "l":
                    if not a[k + 1 :]:
                        i += 1
                    break
                if c not in "nErsuzb":
                    return ask(RuleId.ASK_MUTATION, f"`sed -{c}` is not accounted for", src)
        elif not scripts:
            scripts.append(a)
        else:
            files.append(a)
        i += 1
    if not scripts:
        return None
    for script in scripts:
        if not sed_script_safe(script):
            return ask(
                RuleId.ASK_MUTATION, f"sed script {script!r} may run or write something", src
            )
    for f in files:
        if not st.strictly_inside(f):
            return ask(RuleId.ASK_OUTSIDE_PATH, f"`sed` edits {f} outside the worktree", src)
        if st.in_git_dir(f):
            return ask(RuleId.ASK_GIT_DIR, f"`sed` edits the Git directory ({f})", src)
    return sandboxed_ok("`sed` edits files in the worktree", src)


def _skip_delimited(s: str, i: int, delim: str) -> int:
    """Index just past the next unescaped `delim` at or after `i`, or -1."""
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "\n" and delim != "\n":
            return -1
        if c == delim:
            return i + 1
        i += 1
    return -1


_ADDR = re.compile(r"\s*(?:\d+(?:~\d+)?|\$)")


def sed_script_safe(s: str) -> bool:
    """True when a sed script has only text commands: no `e`, `w`/`W`, `r`/`R` commands and no
    `e`/`w` flags on `s`."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\n;":
            i += 1
            continue
        # addresses
        for _ in range(2):
            m = _ADDR.match(s, i)
            if m and m.end() > i and s[i : m.end()].strip():
                i = m.end()
            elif i < n and s[i] == "/":
                i = _skip_delimited(s, i + 1, "/")
                if i < 0:
                    return False
                while i < n and s[i] in "IM":
                    i += 1
            elif i + 1 < n and s[i] == "\\":
                i = _skip_delimited(s, i + 2, s[i + 1])
                if i < 0:
                    return False
            if i < n and s[i] == ",":
                i += 1
                m2 = re.compile(r"\s*[+~]\d+").match(s, i)
                if m2:
                    i = m2.end()
                    break
                continue
            break
        while i < n and s[i] in " \t!":
            i += 1
        if i >= n:
            return True
        c = s[i]
        if c == "s" or c == "y":
            if i + 1 >= n or s[i + 1] in "\\\n":
                return False
            delim = s[i + 1]
            j = _skip_delimited(s, i + 2, delim)
            if j < 0:
                return False
            j = _skip_delimited(s, j, delim)
            if j < 0:
                return False
            if c == "s":
                while j < n and s[j] not in ";\n}":
                    if s[j] not in _SED_S_FLAGS and s[j] not in " \t":
                        return False
                    j += 1
            i = j
            continue
        if c in ("a", "i", "c"):  # text to the end of the line
            j = s.find("\n", i)
            while j > 0 and s[j - 1] == "\\":
                j = s.find("\n", j + 1)
            i = n if j < 0 else j + 1
            continue
        if c in ("b", "t", "T", ":"):  # a label ends at `;`, a newline or a blank
            j = i + 1
            while j < n and s[j] in " \t":
                j += 1
            while j < n and s[j] not in "; \t\n":
                j += 1
            i = j
            continue
        if c == "#":
            j = s.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c in _SED_SIMPLE:
            i += 1
            while i < n and s[i].isdigit():
                i += 1
            continue
        return False
    return True
