"""The allow list in plain form (POLICY.md section 3) and the ask triggers (section 4).

Every part must be accounted for; the first part that is not gives the `ask` decision.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import gitsup.policy.gitcmd as gitcmd
from gitsup.policy.config import Policy, RunnerSpec, UtilitySpec
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.normalise import (
    UNKNOWN,
    Expander,
    basename,
    has_glob,
    inside,
    may_match,
    names_git_dir,
    resolve,
)
from gitsup.policy.parse import Part, Script
from gitsup.policy.rules import RuleId

_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*|\[|:|\.)$")
_GLOB = re.compile(r"[*?\[]")
_PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")

_GIT_READ = frozenset(
    {
        "status",
        "diff",
        "log",
        "show",
        "blame",
        "grep",
        "shortlog",
        "describe",
        "rev-parse",
        "ls-files",
        "ls-tree",
        "cat-file",
        "merge-base",
        "cherry",
        "count-objects",
        "version",
    }
)
_GIT_NETWORK = frozenset(
    {"fetch", "pull", "clone", "ls-remote", "submodule", "request-pull", "archive"}
)
_GIT_BAD_FLAGS = (
    "--ext-diff",
    "--textconv",
    "--exec",
    "--filters",
    "--open-files-in-pager",
    "--upload-pack",
    "--receive-pack",
)
# git's parse-options takes any unique prefix of a long option (`--ext-d`, `--open`).
_GIT_BAD_PREFIXES = frozenset(f[:k] for f in _GIT_BAD_FLAGS for k in range(3, len(f) + 1))
# Exact option names that are also prefixes of a flag above (git prefers the exact match).
_GIT_NOT_ABBREVIATIONS = frozenset({"--text"})
_BRANCH_LIST = frozenset(
    {
        "-a",
        "--all",
        "-r",
        "--remotes",
        "-v",
        "-vv",
        "--verbose",
        "--show-current",
        "--no-color",
        "--column",
        "--no-column",
        "-i",
        "--ignore-case",
        "--omit-empty",
    }
)
_BRANCH_LIST_WITH_ARG = frozenset(
    {
        "--merged",
        "--no-merged",
        "--contains",
        "--no-contains",
        "--points-at",
        "--sort",
        "--format",
        "--color",
    }
)
_MUTATORS = frozenset(
    {
        "rm",
        "rmdir",
        "mv",
        "cp",
        "ln",
        "chmod",
        "chown",
        "chgrp",
        "truncate",
        "unlink",
        "install",
        "shred",
        "dd",
        "tar",
        "unzip",
        "gzip",
        "gunzip",
        "patch",
        "rsync",
        "sed",
        "perl",
    }
)
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


@dataclass
class AllowState:
    policy: Policy
    worktree: str
    home: str
    cwds: set[str] = field(default_factory=set)
    sandboxed: bool = False  # POLICY.md section 4a: the task's kernel sandbox is enforced
    dotglob: bool = False

    def __post_init__(self) -> None:
        if not self.cwds:
            self.cwds = {self.worktree}

    def path_inside(self, value: str) -> bool:
        if value in ("/dev/null", "-", ""):
            return True
        if UNKNOWN in value:
            return False
        # glob components that can match `..` escape W (sandboxed: bash rules, where only a
        # pattern starting with `.` can match `..`; otherwise any pattern that fnmatches it)
        if not has_glob(value):
            return all(inside(resolve(value, cwd), self.worktree) for cwd in self.cwds)
        dots = _dotdot_sandboxed if self.sandboxed else _dotdot
        for cwd in self.cwds:
            p = resolve(value, cwd)
            if not inside(p, self.worktree):
                return False
            rel = p[len(self.worktree) :]
            if any(dots(c) for c in rel.split("/")):
                return False
        return not any(dots(c) for c in value.split("/"))

    def in_git_dir(self, value: str) -> bool:
        """The path is (or, through a glob, may be) in a `.git` directory."""
        if ".git" not in value and not has_glob(value) and not any(".git" in c for c in self.cwds):
            return False  # `..` only removes components: no `.git` can appear
        return any(names_git_dir(resolve(value, cwd), dotglob=self.dotglob) for cwd in self.cwds)

    def strictly_inside(self, value: str) -> bool:
        """Inside W and not W itself (nor a glob at W's top that may match everything)."""
        if not self.path_inside(value) or value in ("-", "", "/dev/null"):
            return False
        return all(resolve(value, cwd) != self.worktree for cwd in self.cwds)


def _dotdot(component: str) -> bool:
    return bool(_GLOB.search(component)) and fnmatch.fnmatchcase("..", component)


def _dotdot_sandboxed(component: str) -> bool:
    return has_glob(component) and may_match(component, "..")


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
    rule: str = RuleId.A_STRUCTURE.value
    reason = "only structure: comments, cd, inert assignments"
    best_depth = 1 << 30
    for part in script.parts:
        d = judge_part(part, st)
        if d is None:
            continue
        if d.verdict != "allow":
            return d
        if d.rule != RuleId.A_STRUCTURE and (rule == RuleId.A_STRUCTURE or part.depth < best_depth):
            rule, reason, best_depth = d.rule, d.reason, part.depth
    return Decision("allow", rule, reason, script.src)


def judge_part(part: Part, st: AllowState) -> Decision | None:
    src = part.src
    if part.background:
        return ask(RuleId.ASK_BACKGROUND, "runs in the background (&)", src)
    if part.kind == "arith":
        return ask(RuleId.ASK_EXPANSION, "arithmetic evaluation", src)
    if part.kind == "opaque":
        return ask(RuleId.ASK_UNKNOWN, "a shell construct the classifier does not account for", src)
    for w in part.words:
        if w.expands:
            return ask(RuleId.ASK_EXPANSION, f"unresolved expansion {w.src!r}", src)
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
    if part.kind in ("words", "assign", "redirects"):
        return None
    if part.kind == "decl":
        kw = part.words[0].src if part.words else "declare"
        return ask(RuleId.ASK_ASSIGNMENT, f"`{kw}` changes the environment", src)
    if part.kind == "test":
        ex = Expander({}, st.home, st.worktree)
        return _test(
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
    if not head.plain or not _NAME.match(prog):
        if "/" in prog and head.plain:
            if st.sandboxed:
                from gitsup.policy.sandboxed import path_program

                d = path_program(part, st)
                if d is not None:
                    return d
            return ask(RuleId.ASK_COMMAND_PATH, f"program named by a path ({prog})", src)
        return ask(
            RuleId.ASK_COMMAND_NAME, f"quoted, escaped or expanded command name {prog!r}", src
        )
    ex = Expander({}, st.home, st.worktree)
    argvs = ex.argvs(part.words)
    if len(argvs) != 1 or not argvs[0]:
        return ask(RuleId.ASK_EXPANSION, "brace expansion with several results", src)
    argv = argvs[0]
    if argv[0] != prog:
        return ask(RuleId.ASK_COMMAND_NAME, f"expanded command name {prog!r}", src)
    return _program(argv, part, st)


def _redirects(part: Part, st: AllowState) -> Decision | None:
    for r in part.redirects:
        if r.is_heredoc:
            if not r.quoted and r.expands:
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
        fields = Expander({}, st.home, st.worktree).word(r.target)
        if len(fields) != 1 or len(fields[0]) != 1:
            return ask(
                RuleId.ASK_EXPANSION,
                f"redirection to {r.target.src!r} expands to several words",
                part.src,
            )
        value = fields[0][0]
        if r.op in (">&", "<&") and (value.isdigit() or value == "-"):
            continue
        if not st.path_inside(value):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"redirection to {value} outside the worktree", part.src
            )
        if r.op != "<" and st.in_git_dir(value):
            return ask(
                RuleId.ASK_GIT_DIR, f"redirection into the Git directory ({value})", part.src
            )
    return None


def _program(argv: list[str], part: Part, st: AllowState) -> Decision | None:
    policy = st.policy
    prog = argv[0]
    args = argv[1:]
    src = part.src
    for prefix in policy.ask_prefixes:
        if len(argv) >= len(prefix) and all(
            p == a or fnmatch.fnmatchcase(a, p) for p, a in zip(prefix, argv, strict=False)
        ):
            return ask(RuleId.ASK_REPO, f"the repository policy asks for `{' '.join(prefix)}`", src)
    if prog == "cd":
        return _cd(args, st, src)
    if prog == "git":
        return _git(args, part, st)
    if prog == "command":
        if args and args[0] in ("-v", "-V"):
            return allow(RuleId.A_READ_ONLY, "command lookup", src)
        return ask(RuleId.ASK_WRAPPER, "`command` runs another program", src)
    if prog == "sed":
        d = _sed(args, st, src)
        if d.verdict != "allow" and st.sandboxed:
            from gitsup.policy.sandboxed import sed_edit

            return sed_edit(args, st, src) or d
        return d
    if prog == "find":
        return _find(args, st, src)
    if prog in ("test", "["):
        return _test(args, st, src, brackets=prog == "[")
    if prog == "printf" and args and args[0].startswith("-v"):
        return ask(RuleId.ASK_ASSIGNMENT, "`printf -v` assigns a variable", src)
    spec = policy.utilities.get(prog)
    if spec is not None:
        return _utility(prog, args, spec, st, src)
    runner = _runner(argv, st, src)
    if runner is not None and runner.verdict == "allow":
        return runner
    if st.sandboxed:
        from gitsup.policy.sandboxed import sandboxed_program

        sd = sandboxed_program(argv, st, src)
        if sd is not None:
            return sd
    if runner is not None:
        return runner
    return _why_ask(prog, args, st, src)


def _why_ask(prog: str, args: list[str], st: AllowState, src: str) -> Decision:
    policy = st.policy
    if prog in policy.shells or prog in ("eval", "source", ".", "exec"):
        return ask(
            RuleId.ASK_INTERPRETER,
            f"`{prog}` runs shell code the classifier cannot account for",
            src,
        )
    if prog in policy.interpreters or _PYTHON.match(prog):
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


# -- git ----------------------------------------------------------------------------------------
def _git(args: list[str], part: Part, st: AllowState) -> Decision:
    src = part.src
    call = gitcmd.parse_git(["git", *args])
    for name, value in call.options:
        if name == "-C":
            if value is None or any(resolve(value, cwd) != st.worktree for cwd in st.cwds):
                return ask(RuleId.ASK_GIT_CWD, f"git run in another directory (-C {value})", src)
        elif name in ("--no-pager", "-P", "--no-optional-locks"):
            continue
        elif name == "--version" and call.sub is None:
            return allow(RuleId.A_GIT_READ, "git --version", src)
        else:
            return ask(
                RuleId.ASK_GIT_OPTION,
                f"git global option {name} can run programs or change the repository",
                src,
            )
    if not any(n == "-C" for n, _ in call.options) and st.cwds != {st.worktree}:
        return ask(
            RuleId.ASK_GIT_CWD,
            "git run outside the worktree root (after cd); repository "
            "discovery may pick up another repository",
            src,
        )
    sub = call.sub
    a = call.args
    if sub is None:
        return ask(RuleId.ASK_UNKNOWN, "git without a subcommand", src)
    for x in a:
        name = x.split("=", 1)[0]
        if (name in _GIT_BAD_PREFIXES and name not in _GIT_NOT_ABBREVIATIONS) or (
            sub == "grep" and x.startswith("-") and not x.startswith("--") and "O" in x
        ):
            return ask(RuleId.ASK_GIT_OPTION, f"`{x}` makes git run a program", src)
        if name.startswith("--o") and "--output".startswith(name):
            value = x.split("=", 1)[1] if "=" in x else ""
            if not value or not st.path_inside(value):
                return ask(RuleId.ASK_OUTSIDE_PATH, "`--output` outside the worktree", src)
        if x.startswith("--output"):
            value = x.split("=", 1)[1] if "=" in x else ""
            if not value or not st.path_inside(value):
                return ask(RuleId.ASK_OUTSIDE_PATH, "`--output` outside the worktree", src)
    if sub in _GIT_READ:
        if sub == "diff" and "--no-index" in a:
            for p in gitcmd.positionals(a):
                if not st.path_inside(p):
                    return ask(RuleId.ASK_OUTSIDE_PATH, f"`git diff --no-index` reads {p}", src)
        return allow(RuleId.A_GIT_READ, f"read-only `git {sub}`", src)
    first = a[0] if a else ""
    if sub == "reflog" and first not in ("expire", "delete", "drop", "write"):
        return allow(RuleId.A_GIT_READ, "displays the reflog", src)
    if sub == "stash" and first in ("list", "show"):
        return allow(RuleId.A_GIT_READ, f"`git stash {first}`", src)
    if sub == "worktree" and first == "list":
        return allow(RuleId.A_GIT_READ, "`git worktree list`", src)
    if sub == "remote" and (
        not a or all(x in ("-v", "--verbose") for x in a) or first == "get-url"
    ):
        return allow(RuleId.A_GIT_READ, "lists remotes", src)
    if sub == "tag" and (not a or "-l" in a or "--list" in a):
        return allow(RuleId.A_GIT_READ, "lists tags", src)
    if sub == "branch":
        return _git_branch(a, st, src)
    if sub == "add":
        return _git_add(a, st, src)
    if sub == "commit":
        return _git_commit(a, part, st, src)
    if sub in ("checkout", "switch"):
        d = _git_create_branch(sub, a, st, src)
        if d.verdict != "allow" and st.sandboxed and sub == "checkout":
            from gitsup.policy.sandboxed import git_worktree_op

            return git_worktree_op(sub, a, st, src) or d
        return d
    if sub in _GIT_NETWORK or (sub == "remote" and first in ("show", "update", "prune")):
        return ask(RuleId.ASK_NETWORK, f"`git {sub}` talks to a remote", src)
    if sub == "config":
        return ask(RuleId.ASK_GIT_CONFIG, "git config (any form) is asked", src)
    if sub not in gitcmd.BUILTINS:
        return ask(RuleId.ASK_GIT_ALIAS, f"unknown git subcommand {sub!r} (may be an alias)", src)
    if st.sandboxed:
        from gitsup.policy.sandboxed import git_worktree_op

        gd = git_worktree_op(sub, a, st, src)
        if gd is not None:
            return gd
    return ask(RuleId.ASK_GIT_CHANGE, f"`git {sub}` changes the working tree, history or refs", src)


def _git_branch(a: list[str], st: AllowState, src: str) -> Decision:
    listing = False
    pos: list[str] = []
    skip = False
    for x in a:
        if skip:
            skip = False
            continue
        name = x.split("=", 1)[0]
        if x in ("-l", "--list"):
            listing = True
        elif x in _BRANCH_LIST or (
            x.startswith("--format=") or x.startswith("--sort=") or x.startswith("--color")
        ):
            continue
        elif name in _BRANCH_LIST_WITH_ARG:
            listing = True
            if "=" not in x:
                skip = True
        elif x.startswith("-"):
            return ask(RuleId.ASK_GIT_CHANGE, f"`git branch {x}` changes branches", src)
        else:
            pos.append(x)
    if not pos or listing:
        return allow(RuleId.A_GIT_READ, "lists branches", src)
    if len(pos) <= 2 and not st.policy.is_protected(pos[0]) and not pos[0].startswith("-"):
        return allow(RuleId.A_GIT_CHANGE, f"creates the branch {pos[0]!r}", src)
    return ask(RuleId.ASK_GIT_CHANGE, f"creates a branch with a protected name ({pos[0]})", src)


def _git_add(a: list[str], st: AllowState, src: str) -> Decision:
    ok_flags = {"-A", "--all", "-u", "--update", "-v", "--verbose", "-n", "--dry-run", "--"}
    for x in a:
        if x.startswith("-") and x != "-":
            if x not in ok_flags:
                return ask(RuleId.ASK_GIT_CHANGE, f"`git add {x}`", src)
        elif not st.path_inside(x):
            return ask(
                RuleId.ASK_OUTSIDE_PATH, f"`git add {x}` names a path outside the worktree", src
            )
    return allow(RuleId.A_GIT_CHANGE, "stages paths in the worktree", src)


_COMMIT_FLAGS = {
    "-a",
    "--all",
    "-s",
    "--signoff",
    "-q",
    "--quiet",
    "-v",
    "--verbose",
    "--amend",
    "--no-edit",
    "--allow-empty",
}


def _git_commit(a: list[str], part: Part, st: AllowState, src: str) -> Decision:
    i = 0
    while i < len(a):
        x = a[i]
        nxt = a[i + 1] if i + 1 < len(a) else None
        if x in _COMMIT_FLAGS:
            i += 1
            continue
        if x in ("-n", "--no-verify"):
            return ask(RuleId.ASK_GIT_CHANGE, "`git commit --no-verify` skips the hooks", src)
        if x in ("-m", "--message"):
            if nxt is None:
                return ask(RuleId.ASK_GIT_CHANGE, "`-m` without a message", src)
            i += 2
            continue
        if x.startswith("--message=") or (x.startswith("-m") and len(x) > 2 and x[1] == "m"):
            i += 1
            continue
        if x in ("-F", "--file") or x.startswith("--file="):
            value = x.split("=", 1)[1] if "=" in x else nxt
            if value is None or not st.path_inside(value):
                return ask(
                    RuleId.ASK_OUTSIDE_PATH,
                    "`git commit -F` reads a file outside the worktree",
                    src,
                )
            i += 1 if "=" in x else 2
            continue
        if x.startswith("-") and not x.startswith("--") and len(x) > 2:
            letters = x[1:]
            if all(c in "asqv" for c in letters):
                i += 1
                continue
            k = letters.find("m")
            if k >= 0 and all(c in "asqv" for c in letters[:k]):
                i += 1 if letters[k + 1 :] else 2
                continue
            if "n" in letters:
                return ask(RuleId.ASK_GIT_CHANGE, "`git commit -n` skips the hooks", src)
        return ask(RuleId.ASK_GIT_CHANGE, f"`git commit {x}` is not on the allow list", src)
    return allow(RuleId.A_GIT_CHANGE, "commits on the task branch", src)


def _git_create_branch(sub: str, a: list[str], st: AllowState, src: str) -> Decision:
    flags = ("-b", "--orphan") if sub == "checkout" else ("-c", "--create")
    rest = [x for x in a if x not in ("-q", "--quiet")]
    if len(rest) == 2 and rest[0] in flags:
        name = rest[1]
        if name.startswith("-"):
            return ask(RuleId.ASK_GIT_CHANGE, f"`git {sub} {' '.join(a)}`", src)
        if st.policy.is_protected(name):
            return ask(
                RuleId.ASK_GIT_CHANGE, f"creates a branch with a protected name ({name})", src
            )
        return allow(RuleId.A_GIT_CHANGE, f"creates and switches to the new branch {name!r}", src)
    if rest and rest[0] in flags:
        return ask(
            RuleId.ASK_GIT_CHANGE, f"`git {sub}` with a start point changes the working tree", src
        )
    return ask(RuleId.ASK_GIT_CHANGE, f"`git {sub}` changes the working tree", src)


# -- utilities ------------------------------------------------------------------------------
def _long_match(name: str, options: Sequence[str]) -> str | None:
    if name in options:
        return name
    if len(name) > 3:
        hits = [o for o in options if o.startswith("--") and o.startswith(name)]
        if len(hits) == 1:
            return hits[0]
    return None


def _forbidden(name: str, forbid: Sequence[str]) -> bool:
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


def _utility(
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
    takes = set(spec.arg_opts) | set(spec.path_opts)
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
            if _forbidden(name, spec.forbid):
                return ask(RuleId.ASK_UTILITY_OPTION, f"`{prog} {name}` is not read-only", src)
            canon = _long_match(name, list(takes) + list(spec.two_value_opts)) or name
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
                    paths.append(value)
                if canon in spec.path_opts and not st.path_inside(value):
                    return ask(
                        RuleId.ASK_OUTSIDE_PATH,
                        f"`{prog} {canon}` names {value} outside the worktree",
                        src,
                    )
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
                    paths.append(value)
                if opt in spec.path_opts and not st.path_inside(value):
                    return ask(
                        RuleId.ASK_OUTSIDE_PATH,
                        f"`{prog} {opt}` names {value} outside the worktree",
                        src,
                    )
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


def _sed(args: list[str], st: AllowState, src: str) -> Decision:
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


def _find(args: list[str], st: AllowState, src: str) -> Decision:
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


def _test(
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
def _runner(
    argv: list[str], st: AllowState, src: str, *, sandboxed: bool = False
) -> Decision | None:
    found: Decision | None = None
    for spec in st.policy.runners_for(argv[0], sandboxed=sandboxed):
        if len(argv) < len(spec.argv):
            continue
        if not all(
            p == a or ("*" in p and fnmatch.fnmatchcase(a, p))
            for p, a in zip(spec.argv, argv, strict=False)
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


def _runner_ok(
    spec: RunnerSpec, rest: list[str], st: AllowState, src: str, *, sandboxed: bool = False
) -> Decision:
    name = " ".join(spec.argv)
    seen: set[str] = set()
    positional: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        nxt = rest[i + 1] if i + 1 < len(rest) else None
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
            if _forbidden(opt, spec.forbid) or any(
                f.startswith("-")
                and not f.startswith("--")
                and len(f) == 2
                and opt.startswith(f)
                and not opt.startswith("--")
                and len(opt) > 2
                and f in ("-Z",)
                for f in spec.forbid
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
        if value not in ("-", "") and st.in_git_dir(value):
            # `go build -o .git/hooks/pre-commit`, `pip install -t .git/...`
            return ask(RuleId.ASK_GIT_DIR, f"`{name}` argument {a!r} names the Git directory", src)
        i += 1
    for word in positional:
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
    if sandboxed:
        return allow(RuleId.A_SANDBOXED, f"inside the sandbox: `{name}`", src)
    return allow(RuleId.A_LOCAL_DEV, f"local development: `{name}`", src)


def is_pythonish(prog: str) -> bool:
    return bool(_PYTHON.match(basename(prog)))
