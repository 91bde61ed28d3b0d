"""The allow list in plain form and the ask triggers (docs/policy.md, "Allow: the plain form"
and "Ask").

Every part must be accounted for; the first part that is not gives the `ask` decision.
The judges of `git` live in `policy/allow/git.py`, those of other programs in
`policy/allow/programs.py`, the state they judge against in `policy/allow/state.py`.
"""

from __future__ import annotations

import fnmatch
import functools
import re

from gitsup.policy.allow.git import judge_git
from gitsup.policy.allow.programs import (
    judge_find,
    judge_runner,
    judge_sed,
    judge_test,
    judge_utility,
)
from gitsup.policy.allow.state import AllowState
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, allow, ask, make_decision
from gitsup.policy.facts import MUTATORS, PYTHON
from gitsup.policy.normalise.expand import UNKNOWN, resolve
from gitsup.policy.parse.script import Part, Script, Word, plain_argv
from gitsup.policy.rules import RuleId

PROGRAM_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*|\[|:|\.)$")


@functools.lru_cache(maxsize=4096)  # the answers for a few program names
def _is_name(prog: str) -> bool:
    """A plain program name (`PROGRAM_NAME`)."""
    return PROGRAM_NAME.match(prog) is not None


# Programs whose ask says they change files (`ask.mutation`): the file changers the deny side
# knows (`facts.MUTATORS`) and the archivers, less those an ask calls unknown (`chattr`,
# `setfacl`) or that are utilities judged before (`mkdir`, `tee`, `touch`).
_MUTATORS = (MUTATORS - {"chattr", "setfacl", "mkdir", "tee", "touch"}) | {
    "dd",
    "tar",
    "unzip",
    "gzip",
    "gunzip",
    "perl",
}


_STRUCTURE: str = RuleId.A_STRUCTURE.value


def judge_script(script: Script, st: AllowState) -> Decision:
    if "gap" in script.flags:
        return ask(
            RuleId.ASK_UNPARSEABLE,
            "part of the command is not accounted for by the parser",
            script.src,
        )
    if "function" in script.flags:
        name = next(iter(script.functions), "")
        return ask(
            RuleId.ASK_FUNCTION,
            f"defines a shell function ({name}); its calls are not accounted for",
            script.src,
        )
    rule: str = _STRUCTURE
    reason = "only structure: comments, cd, inert assignments"
    best_depth = 1 << 30
    best: Decision | None = None
    for part in script.parts:
        d = judge_part(part, st)
        if d is None:
            continue
        if d.verdict != "allow":
            return d
        if d.rule != _STRUCTURE and (rule == _STRUCTURE or part.depth < best_depth):
            rule, reason, best_depth, best = d.rule, d.reason, part.depth, d
    if best is not None and best.part == script.src and not best.sandboxed:
        return best  # the same decision (a one-part command): not built twice
    return make_decision("allow", rule, reason, script.src)


def judge_part(part: Part, st: AllowState) -> Decision | None:
    if not part.background:
        # The commonest part: a plain program name and words whose one literal field is known
        # (every check below passes for it); judged as the program at once, with the argument
        # vector the deny scan used.
        plain = plain_argv(part)
        if plain is not None:
            head = part.words[0]
            if plain[0] == head.src and head.plain and _is_name(plain[0]):
                d = judge_program(plain, part, st)
                if st.policy.allow_rules and d is not None and d.verdict == "ask":
                    return repo_allow(d, plain, st.policy, part.src)
                return d
    src = part.src
    if part.background:
        return ask(RuleId.ASK_BACKGROUND, "runs in the background (&)", src)
    if part.kind == "arith":
        return ask(RuleId.ASK_EXPANSION, "arithmetic evaluation", src)
    if part.kind == "opaque":
        return ask(RuleId.ASK_UNKNOWN, "a shell construct the classifier does not account for", src)
    expanded: Word | None = None
    for w in part.words:
        if w.one_field.__class__ is not str and w.expands:
            if not st.sandboxed:
                return ask(RuleId.ASK_EXPANSION, f"unresolved expansion {w.src!r}", src)
            if expanded is None:
                expanded = w
    for name, value in part.assigns:
        if value is None:
            continue  # for-loop variable: its uses are expansions
        if value.expands:
            return ask(RuleId.ASK_EXPANSION, f"assignment of an expansion to {name}", src)
        if name not in st.policy.inert_vars:
            return ask(RuleId.ASK_ASSIGNMENT, f"assignment of the non-inert variable {name}", src)
    d = _redirects(part, st)
    if d is not None:
        return d
    if expanded is not None and st.sandbox is not None:
        return st.sandbox.expanded_part(part, expanded, st)
    if part.kind in ("words", "assign", "redirects"):
        return None
    if part.kind == "decl":
        kw = part.words[0].src if part.words else "declare"
        return ask(RuleId.ASK_ASSIGNMENT, f"`{kw}` changes the environment", src)
    if part.kind == "test":
        ex = st.expander()
        return judge_test(
            [" ".join(a[0]) if a else "" for a in map(ex.word, part.words)],
            st,
            src,
            brackets=False,
            double=part.src.startswith("[["),
        )
    if not part.words:
        return None
    head = part.words[0]
    prog = head.src
    if not head.plain or not PROGRAM_NAME.match(prog):
        if "/" in prog and head.plain:
            if st.sandbox is not None:
                d = st.sandbox.path_program(part, st)
                if d is not None:
                    return d
            return ask(RuleId.ASK_COMMAND_PATH, f"program named by a path ({prog})", src)
        return ask(
            RuleId.ASK_COMMAND_NAME, f"quoted, escaped or expanded command name {prog!r}", src
        )
    ex = st.expander()
    argvs = ex.argvs(part.words)
    if len(argvs) != 1 or not argvs[0]:
        return ask(RuleId.ASK_EXPANSION, "brace expansion with several results", src)
    argv = argvs[0]
    if argv[0] != prog:
        return ask(RuleId.ASK_COMMAND_NAME, f"expanded command name {prog!r}", src)
    d = judge_program(argv, part, st)
    if (
        st.sandboxed
        and d is not None
        and d.verdict == "allow"
        and d.rule != RuleId.A_SANDBOXED
        and part.redirects
        and _sandboxed_redirect(part, st)
    ):
        return allow(RuleId.A_SANDBOXED, f"inside the sandbox: {d.reason}", src)
    if st.policy.allow_rules and d is not None and d.verdict == "ask":
        return repo_allow(d, argv, st.policy, src)
    return d


_ASK_REPO: str = RuleId.ASK_REPO.value


def repo_allow(d: Decision, argv: list[str], policy: Policy, src: str) -> Decision:
    """`d` (an ask of the allow list for a part of literal words whose redirections stay in
    the worktree), or allow when a repository allow rule matches the part's words. An ask of
    the repository's own rules stays ask (the stricter rule wins)."""
    if d.rule == _ASK_REPO:
        return d
    for rule in policy.allow_rules:
        if rule.matches(argv):
            return allow(RuleId.A_REPO, rule.reason(), src)
    return d


def _sandboxed_redirect(part: Part, st: AllowState) -> bool:
    """A redirection only the sandboxed mode allows: an unquoted heredoc whose body expands,
    or input read from outside the worktree."""
    for r in part.redirects:
        if r.is_heredoc and not r.quoted and r.expands:
            return True
        if r.op == "<" and r.target is not None:
            fields = st.expander().word(r.target)
            if fields and fields[0] and not st.path_inside(fields[0][0]):
                return True
    return False


def _redirects(part: Part, st: AllowState) -> Decision | None:
    for r in part.redirects:
        if r.is_heredoc:
            # inside the sandbox the body's substitutions are judged as parts of their own
            if not r.quoted and r.expands and not st.sandboxed:
                return ask(
                    RuleId.ASK_EXPANSION, "unquoted heredoc whose body expands $ or `", part.src
                )
            continue
        if r.target is None:
            continue
        if r.target.expands:
            return ask(
                RuleId.ASK_EXPANSION, f"redirection to an expansion {r.target.src!r}", part.src
            )
        if r.op == "<<<":
            continue
        fields = st.expander().word(r.target)
        if len(fields) != 1 or len(fields[0]) != 1:
            return ask(
                RuleId.ASK_EXPANSION,
                f"redirection to {r.target.src!r} expands to several words",
                part.src,
            )
        value = fields[0][0]
        if r.op in (">&", "<&") and (value.isdigit() or value == "-"):
            continue
        if not st.path_inside(value) and not (
            r.op == "<" and st.sandboxed and UNKNOWN not in value
        ):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"redirection to {value} outside the worktree", part.src
            )
        if r.op != "<" and st.in_git_dir(value):
            return ask(
                RuleId.ASK_GIT_DIR, f"redirection into the Git directory ({value})", part.src
            )
    return None


def judge_program(argv: list[str], part: Part, st: AllowState) -> Decision | None:
    policy = st.policy
    prog = argv[0]
    args = argv[1:]
    src = part.src
    for prefix in policy.ask_prefixes:
        if len(argv) >= len(prefix) and all(
            p == a or fnmatch.fnmatchcase(a, p) for p, a in zip(prefix, argv, strict=False)
        ):
            return ask(RuleId.ASK_REPO, f"the repository policy asks for `{' '.join(prefix)}`", src)
    for rule in policy.ask_rules:
        if rule.matches(argv):
            return ask(RuleId.ASK_REPO, rule.reason(), src)
    if prog == "cd":
        return _cd(args, st, src)
    if prog == "git":
        return judge_git(args, part, st)
    if prog == "command":
        if args and args[0] in ("-v", "-V"):
            return allow(RuleId.A_READ_ONLY, "command lookup", src)
        return ask(RuleId.ASK_WRAPPER, "`command` runs another program", src)
    if prog == "sed":
        d = judge_sed(args, st, src)
        if d.verdict != "allow" and st.sandbox is not None:
            if d.rule == RuleId.ASK_OUTSIDE_PATH:
                return st.sandbox.read_anywhere(prog, args, st, src) or d
            return st.sandbox.sed_edit(args, st, src) or d
        return d
    if prog == "find":
        d = judge_find(args, st, src)
        return _outside(d, prog, args, st) if st.sandboxed and d.verdict != "allow" else d
    if prog in ("test", "["):
        d = judge_test(args, st, src, brackets=prog == "[")
        return _outside(d, prog, args, st) if st.sandboxed and d.verdict != "allow" else d
    if prog == "printf" and args and args[0].startswith("-v"):
        return ask(RuleId.ASK_ASSIGNMENT, "`printf -v` assigns a variable", src)
    spec = policy.utilities.get(prog)
    if spec is not None:
        d = judge_utility(prog, args, spec, st, src)
        return _outside(d, prog, args, st) if st.sandboxed and d.verdict != "allow" else d
    if (
        len(args) == 1
        and args[0][:1] == "-"
        and args[0] in _VERSION_QUERIES.get(_version_key(prog), ())
    ):
        return allow(RuleId.A_READ_ONLY, f"`{prog} {args[0]}` prints its version", src)
    runner = judge_runner(argv, st, src)
    if runner is not None and runner.verdict == "allow":
        return runner
    if st.sandbox is not None:
        sd = st.sandbox.program(argv, st, src, part)
        if sd is not None:
            return sd
    if runner is not None:
        return runner
    return _why_ask(prog, args, st, src)


# Interpreters asked only for their version (`python --version`): a read, like `git --version`.
_VERSION_QUERIES: dict[str, tuple[str, ...]] = {
    "python": ("--version", "-V"),
    "node": ("--version", "-v"),
    "perl": ("--version", "-v"),
    "ruby": ("--version",),
    "php": ("--version", "-v"),
    "deno": ("--version",),
    "bun": ("--version",),
}


def _version_key(prog: str) -> str:
    if PYTHON.match(prog) or prog in ("pypy", "pypy3"):
        return "python"
    return "node" if prog == "nodejs" else prog


def _outside(d: Decision, prog: str, args: list[str], st: AllowState) -> Decision:
    """Inside the sandbox a read outside the worktree is the kernel's to refuse."""
    if d.rule != RuleId.ASK_OUTSIDE_PATH or st.sandbox is None:
        return d
    return st.sandbox.read_anywhere(prog, args, st, d.part) or d


def _why_ask(prog: str, args: list[str], st: AllowState, src: str) -> Decision:
    policy = st.policy
    if prog in policy.shells or prog in ("eval", "source", ".", "exec"):
        return ask(
            RuleId.ASK_INTERPRETER,
            f"`{prog}` runs shell code the classifier cannot account for",
            src,
        )
    if prog in policy.interpreters or PYTHON.match(prog):
        if any(a in ("-m",) for a in args[:3]) and any(a in ("pip", "ensurepip") for a in args):
            return ask(RuleId.ASK_INSTALL, "installs packages", src)
        return ask(RuleId.ASK_INTERPRETER, f"`{prog}` runs code in another language (opaque)", src)
    if prog in policy.installers or (
        prog in ("uv", "poetry", "npm", "yarn", "pnpm", "cargo", "go", "pdm")
        and args[:1]
        and args[0] in ("pip", "install", "add", "ci", "get", "i", "sync", "update", "upgrade")
    ):
        return ask(RuleId.ASK_INSTALL, f"`{prog}` installs or changes dependencies", src)
    if prog in policy.network:
        return ask(RuleId.ASK_NETWORK, f"`{prog}` talks to the network", src)
    if (
        prog in policy.runs_programs
        or prog in policy.wrappers
        or (args and f"{prog} {args[0]}" in policy.wrappers)
    ):
        return ask(RuleId.ASK_WRAPPER, f"`{prog}` runs another program", src)
    if prog in _MUTATORS:
        return ask(RuleId.ASK_MUTATION, f"`{prog}` changes or removes files", src)
    if prog.endswith(".sh"):
        return ask(RuleId.ASK_INTERPRETER, "runs a shell script", src)
    return ask(RuleId.ASK_UNKNOWN, f"`{prog}` is not on the allow list", src)


def _cd(args: list[str], st: AllowState, src: str) -> Decision:
    if len(args) != 1 or args[0] in ("-",) or args[0].startswith("-"):
        return ask(RuleId.ASK_OUTSIDE_PATH, "`cd` without a directory inside the worktree", src)
    target = args[0]
    if not st.path_inside(target):
        return ask(RuleId.ASK_OUTSIDE_PATH, f"`cd {target}` leaves the worktree", src)
    st.cwds = st.cwds | {resolve(target, cwd) for cwd in st.cwds}
    return allow(RuleId.A_STRUCTURE, "cd inside the worktree", src)
