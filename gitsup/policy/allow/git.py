"""The allow list for `git` (docs/policy.md, "Allow: the plain form"): read-only subcommands, and the local
writes a task may make (add, commit, branch) with their forbidden flags."""

from __future__ import annotations

from gitsup.policy import facts
from gitsup.policy.allow.state import AllowState
from gitsup.policy.decision import Decision, allow, ask
from gitsup.policy.normalise.expand import resolve
from gitsup.policy.parse.script import Part
from gitsup.policy.rules import RuleId

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


# Options of the read-only subcommands whose value is a file git reads: long options (any
# unique prefix: git's parse-options takes abbreviations) and short letters (also at the end of
# a cluster, `-wS FILE`, or with the value attached, `-O/tmp/x`; one letter per subcommand). The file must lie in W
# unsandboxed, like any path operand (docs/policy.md, "Classes that need care").
_GIT_READ_FILES: dict[str, tuple[tuple[str, ...], str]] = {
    "blame": (("--contents", "--ignore-revs-file"), "S"),
    "grep": ((), "f"),
    "ls-files": (("--exclude-from",), "X"),
    "diff": ((), "O"),
    "log": ((), "O"),
    "show": ((), "O"),
    "rev-parse": (("--resolve-git-dir",), ""),
}


def _read_files(sub: str, args: list[str]) -> list[tuple[str, str]]:
    """(option, file) for each file the read-only `git sub args` reads through an option."""
    longs, shorts = _GIT_READ_FILES[sub]
    found: list[tuple[str, str]] = []
    for k, x in enumerate(args):
        nxt = args[k + 1] if k + 1 < len(args) else ""
        if x == "--":
            break
        if x[:2] == "--":
            if not longs:
                continue
            name, eq, value = x.partition("=")
            if len(name) > 3 and any(o.startswith(name) for o in longs):
                found.append((name, value if eq else nxt))
        elif shorts and x[:1] == "-":
            at = x.find(shorts, 1)
            if at > 0:
                found.append((f"-{shorts}", x[at + 1 :] or nxt))
    return found


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


# -- git ----------------------------------------------------------------------------------------
def judge_git(args: list[str], part: Part, st: AllowState) -> Decision:
    src = part.src
    call = facts.parse_git(["git", *args])
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
    cwds = st.cwds
    if (len(cwds) != 1 or st.worktree not in cwds) and not any(n == "-C" for n, _ in call.options):
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
        outside = ""
        if sub in _GIT_READ_FILES:
            for opt, value in _read_files(sub, a):
                if value in ("", "-") or st.path_inside(value):
                    continue
                if not st.sandboxed:
                    return ask(
                        RuleId.ASK_OUTSIDE_PATH,
                        f"`git {sub} {opt}` reads {value} outside the worktree",
                        src,
                    )
                # inside the sandbox the kernel, not the classifier, decides what may be read
                outside = outside or f"`git {sub} {opt}` reads {value}"
        if sub == "diff" and "--no-index" in a:
            for p in facts.positionals(a):
                if not st.path_inside(p):
                    return ask(RuleId.ASK_OUTSIDE_PATH, f"`git diff --no-index` reads {p}", src)
        if outside:
            return allow(RuleId.A_SANDBOXED, f"inside the sandbox: {outside}", src)
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
        if d.verdict != "allow" and st.sandbox is not None and sub == "checkout":
            return st.sandbox.git_worktree_op(sub, a, st, src) or d
        return d
    if sub in _GIT_NETWORK or (sub == "remote" and first in ("show", "update", "prune")):
        return ask(RuleId.ASK_NETWORK, f"`git {sub}` talks to a remote", src)
    if sub == "config":
        return ask(RuleId.ASK_GIT_CONFIG, "git config (any form) is asked", src)
    if sub not in facts.BUILTINS:
        return ask(RuleId.ASK_GIT_ALIAS, f"unknown git subcommand {sub!r} (may be an alias)", src)
    if st.sandbox is not None:
        gd = st.sandbox.git_worktree_op(sub, a, st, src)
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
